"""The peer's side of a benchmark against the peer (bench/suite/peer.py): AllenNLP's `Elmo` on given sentences, timed.

Runs inside the peer's own virtual environment (../shared/tools/peer-allennlp/setup.sh), never in
the project's: `suite.peer.run_peer` starts it as a subprocess with the peer's Python and stubs.

    PEER/venv/bin/python bench/suite/allennlp_side.py --model PEER/full --sentences s.json --mode plain

Prints one line `RESULT {json}`: words/s (the median of --reps timed runs after one warm-up; `<S>`,
`</S>` not counted) and peak RSS. `cached` is AllenNLP's own fast mode (`vocab_to_cache`: the char
CNN is run once for the batch's words beforehand). Sentences run in batches of --batch-size, as a
user of `Elmo` would feed them. `--device cuda` runs `Elmo` on the GPU (each batch's ids moved
there, the clock read after `torch.cuda.synchronize`) and adds its peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import resource

# run by the peer's own Python from this folder: timing.py (stdlib only) is a sibling, not a package
from timing import timed


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def batches(sentences, size):
    return [sentences[start : start + size] for start in range(0, len(sentences), size)]


def build(model_dir: str, mode: str, sentences, device: str = "cpu"):
    """(the Elmo module on ``device``, a callable that embeds every batch once)."""
    import torch
    from allennlp.modules.elmo import Elmo, batch_to_ids

    options, weights = f"{model_dir}/options.json", f"{model_dir}/lm_weights.hdf5"
    vocabulary = ["@@PADDING@@"] + sorted({word for sentence in sentences for word in sentence})
    extra = {"vocab_to_cache": vocabulary} if mode == "cached" else {}
    elmo = Elmo(options, weights, num_output_representations=1, dropout=0.0, **extra).eval().to(device)
    index = {word: i for i, word in enumerate(vocabulary)}

    def run(groups):
        for group in groups:
            char_ids = batch_to_ids(group)
            if mode == "cached":
                word_ids = torch.zeros(char_ids.shape[:2], dtype=torch.long)
                for row, sentence in enumerate(group):
                    word_ids[row, : len(sentence)] = torch.tensor([index[w] for w in sentence])
                elmo(char_ids.to(device), word_ids.to(device))
            else:
                elmo(char_ids.to(device))
        if device != "cpu":
            torch.cuda.synchronize()

    return elmo, run


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="folder with options.json + lm_weights.hdf5")
    parser.add_argument("--sentences", required=True, help="JSON list of token lists")
    parser.add_argument("--mode", choices=["plain", "cached"], default="plain")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (cuda:N) to run on a GPU")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with open(args.sentences, encoding="utf-8") as stream:
        sentences = json.load(stream)
    groups = batches(sentences, args.batch_size)
    with torch.inference_mode():
        _, run = build(args.model, args.mode, sentences, args.device)
        timing = timed(lambda: run(groups), args.reps)
    words = sum(len(s) for s in sentences)
    gpu = {"peak_gpu_mb": torch.cuda.max_memory_allocated() / 1e6} if args.device != "cpu" else {}
    print(
        "RESULT "
        + json.dumps(
            {
                **gpu,
                "sentences": len(sentences),
                **timing.summary(words),
                "peak_rss_mb": peak_rss_mb(),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
