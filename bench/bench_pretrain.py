"""Benchmark pretraining: a biLM trained for a fixed wall-clock time on shared/data/corpus, its
full-softmax perplexity on the held-out valid and test text next to a unigram model's, the
learning curve, and the training throughput.

    python bench/bench_pretrain.py                                  # CPU: the small preset, 30 minutes
    python bench/bench_pretrain.py --device cuda --minutes 20 --config training/configs/pretrain-gpu.json

Writes bench/results/pretrain-<device>.json and .png and the device's section of BENCHMARKS.md.
Working files (corpus shards, run directory) go to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import SHARED

ROOT = Path(__file__).resolve().parents[1]
CORPUS = SHARED / "data" / "corpus"
OUT, RESULTS = ROOT / "bench" / "out", ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))


def prepare(vocab_size: int) -> Path:
    from spacy_elmo.training.corpus import MANIFEST, prepare_corpus, read_sentences
    from spacy_elmo.training.vocab import Vocabulary

    corpus = OUT / "corpus"
    if not (corpus / MANIFEST).exists():
        splits = {"train": [CORPUS / "train.txt"], "dev": [CORPUS / "valid.txt"], "test": [CORPUS / "test.txt"]}
        prepare_corpus(corpus, splits, pipeline="en")
    vocab = OUT / f"vocab-{vocab_size}.txt"
    if not vocab.exists():
        Vocabulary.from_sentences(read_sentences(corpus / "train"), vocab_size).save(vocab)
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--config", default=str(ROOT / "training" / "configs" / "pretrain-cpu.json"))
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--vocab-size", type=int, default=30000)
    parser.add_argument("--reuse", action="store_true", help="Evaluate the existing bench/out run instead of training.")
    args = parser.parse_args()
    from spacy_elmo.training.corpus import read_sentences
    from spacy_elmo.training.evaluate import evaluate
    from spacy_elmo.training.loop.curve import plot_learning_curve

    corpus = prepare(args.vocab_size)
    vocab = OUT / f"vocab-{args.vocab_size}.txt"
    run = OUT / f"run-{args.device}"
    if not args.reuse:
        train(run, corpus, vocab, args)
    dev = evaluate(run, read_sentences(corpus / "dev"))
    test = evaluate(run, read_sentences(corpus / "test"))
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    config = json.loads((run / "train-config.json").read_text())
    last = [r for r in records if "loss" in r][-1]
    result = {
        "device": args.device,
        "date": time.strftime("%Y-%m-%d"),
        "config": config,
        "command": " ".join(["python", "bench/bench_pretrain.py", *(a for a in sys.argv[1:] if a != "--reuse")]),
        "minutes_training": last["elapsed"] / 60,
        "steps": last["step"],
        "tokens": last["tokens"],
        "tokens_per_s_median": statistics.median(rates[1:] or rates),
        "valid": dev,
        "test": test,
        "corpus": {k: v["tokens"] for k, v in json.loads((corpus / "manifest.json").read_text())["splits"].items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"pretrain-{args.device}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = (
        f"{config['preset']} preset on shared/data/corpus, {args.device.upper()}, {result['minutes_training']:.0f} min"
    )
    plot_learning_curve(
        run / "log.jsonl", RESULTS / f"pretrain-{args.device}.png", baseline=dev["unigram_perplexity"], title=title
    )
    write_markdown(result, args)
    print(json.dumps({k: result[k] for k in ("steps", "tokens", "tokens_per_s_median")}, indent=2))
    print(
        f"valid perplexity {dev['perplexity']:.1f} (unigram {dev['unigram_perplexity']:.1f}); test "
        f"{test['perplexity']:.1f}"
    )


def train(run: Path, corpus: Path, vocab: Path, args) -> None:
    if run.exists():
        import shutil

        shutil.rmtree(run)
    command = [
        sys.executable,
        "-m",
        "spacy_elmo.training.pretrain",
        args.config,
        "--output",
        str(run),
        f"--set=corpus={json.dumps(str(corpus))}",
        f"--set=vocab={json.dumps(str(vocab))}",
        f"--set=max_minutes={args.minutes}",
    ]
    subprocess.run(command, check=True, cwd=ROOT)


def write_markdown(result: dict, args) -> None:
    config, dev, test = result["config"], result["valid"], result["test"]
    lines = [
        f"### biLM pretraining on {args.device.upper()} ({result['date']})",
        "",
        f"`{config['preset']}` preset (plus {config['model'] or 'no changes'}), {config['softmax']} softmax"
        f"{' with ' + str(config['n_samples']) + ' samples' if config['softmax'] == 'sampled' else ''}, "
        f"{config['optimizer']} "
        f"(lr {config['lr']}), batches of {config['batch_tokens']} tokens, dropout {config['dropout']}; "
        f"vocabulary: the {args.vocab_size - 3:,} most frequent training words plus `<S>`, `</S>`, `<UNK>`. "
        f"Corpus: shared/data/corpus train / valid / test ({result['corpus']['train']:,} / "
        f"{result['corpus']['dev']:,} / "
        f"{result['corpus']['test']:,} tokens after spaCy's English tokenizer and sentencizer). Command: "
        f"`{result['command']}`.",
        "",
        "| | value |",
        "|---|---:|",
        f"| training time | {result['minutes_training']:.1f} min ({result['steps']:,} steps) |",
        f"| tokens seen | {result['tokens']:,} |",
        f"| throughput (median) | {result['tokens_per_s_median']:,.0f} tokens/s |",
        f"| valid perplexity (forward / backward / average) | {dev['perplexity_forward']:.1f} / "
        f"{dev['perplexity_backward']:.1f} / **{dev['perplexity']:.1f}** |",
        f"| valid perplexity of a unigram model | {dev['unigram_perplexity']:.1f} |",
        f"| test perplexity (average) / unigram | {test['perplexity']:.1f} / {test['unigram_perplexity']:.1f} |",
        f"| valid out-of-vocabulary rate | {dev['oov_rate']:.2%} |",
        "",
        "Perplexity: full softmax, exp of the mean NLL over the forward and the backward predictions.",
        "",
        f"![learning curve](bench/results/pretrain-{args.device}.png)",
        "",
    ]
    from report import write_section

    write_section(f"bench_pretrain:{args.device}", lines)


if __name__ == "__main__":
    main()
