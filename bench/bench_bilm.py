"""Benchmark biLM inference: tokens/s and peak memory of the `original` preset (random weights) on a
batch of real sentences, each fast path next to a straightforward step loop measured in the same run.

    python bench/bench_bilm.py                              # CPU, 2 threads
    python bench/bench_bilm.py --device cuda --dtype bf16   # on a GPU, adds bf16 autocast rows
    python bench/bench_bilm.py --peer PEER_DIR              # side by side with AllenNLP (bench_peer.py)

Every configuration runs in its own process (clean peak memory). Writes bench/results/bilm-<device>.json,
a bar chart next to it, and the device's section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import SHARED, machine

ROOT = Path(__file__).resolve().parents[1]
CORPUS = SHARED / "data" / "corpus"
RESULTS = ROOT / "bench" / "results"
AIM_CPU, AIM_GPU = 500, 300_000

# name, path, clipped, cache, naive
CONFIGS = [
    ("straightforward step loop, clipped", "naive", True, False),
    ("exact step loop, clipped, cache off", "step", True, False),
    ("exact step loop, clipped, cache warm", "step", True, True),
    ("straightforward step loop, unclipped", "naive", False, False),
    ("fused kernel, unclipped, cache off", "fused", False, False),
    ("fused kernel, unclipped, cache warm", "fused", False, True),
    ("exact step loop, unclipped, cache warm (CPU default)", "step", False, True),
]


def load_sentences(count: int, seed: int = 0):
    """`count` real sentences from the held-out corpus, cut by spaCy's English tokenizer and
    sentencizer; and the words of the first 2,000 training lines (to warm the token cache)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    sentences: list = []
    for name in ("valid.txt", "test.txt", "train.txt"):  # the held-out text first; more only where asked
        lines = [line for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line.strip()]
        cut = [[t.text for t in sent if not t.is_space] for doc in nlp.pipe(lines) for sent in doc.sents]
        sentences += [s for s in cut if 0 < len(s) <= 100]
        if len(sentences) >= count:
            break
    chosen = random.Random(seed).sample(sentences, min(count, len(sentences)))
    warm_lines = [line for line in (CORPUS / "train.txt").read_text(encoding="utf-8").splitlines() if line.strip()][
        :2000
    ]
    warm_words = sorted({t.text for doc in nlp.tokenizer.pipe(warm_lines) for t in doc if not t.is_space})
    return chosen, warm_words


def worker(spec: dict) -> dict:
    import copy

    import torch
    from naive_bilm import naive_forward, naive_token_representations

    from spacy_elmo import BiLM, BiLMConfig, embed_sentences
    from spacy_elmo.network.chars import BOS_TOKEN, EOS_TOKEN, encode_sentences

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    device = torch.device(spec["device"])
    config = BiLMConfig.preset("original")
    if not spec["clipped"]:
        config = config.replace(cell_clip=None, proj_clip=None)
    bilm = BiLM(config).to(device).eval()
    sentences, warm_words = load_sentences(spec["sentences"])
    bilm.token_cache.capacity = 20000 if spec["cache"] else 0
    if spec["cache"]:
        with torch.inference_mode():
            for start in range(0, len(warm_words), 2048):
                bilm.token_cache.lookup(warm_words[start : start + 2048], bilm.char_encoder, bilm.represent_tokens)
    warm_cache = copy.deepcopy(bilm.token_cache)  # every run starts from this state
    if spec["path"] == "naive":
        char_ids = torch.from_numpy(encode_sentences(sentences)).long().to(device)
        run = lambda: naive_forward(bilm, char_ids)  # noqa: E731
        char_stage = lambda: naive_token_representations(bilm, char_ids)  # noqa: E731
    else:
        bilm = bilm.with_settings(lstm_path=spec["path"])
        flat = [t for s in sentences for t in (BOS_TOKEN, *s, EOS_TOKEN)]
        run = lambda: embed_sentences(bilm, sentences, max_batch_tokens=10**9)  # noqa: E731
        char_stage = lambda: bilm.token_cache.lookup(flat, bilm.char_encoder, bilm.represent_tokens)  # noqa: E731
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=spec["dtype"] == "bf16")
    baseline_rss = _rss_mb()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with autocast, torch.inference_mode():
        times = _timed(run, bilm, warm_cache, spec["repeats"], device)
        result = run()
        hits, misses = bilm.token_cache.hits, bilm.token_cache.misses
        char_times = _timed(char_stage, bilm, warm_cache, spec["repeats"], device)
    words = sum(len(s) for s in sentences)
    seconds, char_seconds = statistics.median(times), statistics.median(char_times)
    report = {
        **spec,
        "words": words,
        "seconds": seconds,
        "tokens_per_s": words / seconds,
        "char_stage_share": char_seconds / seconds,
        "peak_rss_mb": _rss_mb(),
        "model_rss_mb": baseline_rss,
    }
    if device.type == "cuda":
        report["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    if spec["cache"]:
        report["cache_hit_rate"] = hits / (hits + misses)
    report["check"] = _checksum(result, sentences)
    return report


def _timed(function, bilm, warm_cache, repeats: int, device) -> list:
    """Seconds of ``repeats`` runs after one warm-up, each starting from the warm cache."""
    import copy

    times = []
    for _ in range(repeats + 1):
        bilm.token_cache = copy.deepcopy(warm_cache)
        bilm.token_cache.hits = bilm.token_cache.misses = 0
        _sync(device)
        start = time.perf_counter()
        function()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times[1:]


def _checksum(result, sentences) -> float:
    """Mean |top layer| over the sentences' words, to see that every path computed the same thing."""
    import numpy as np

    if isinstance(result, list):
        return float(np.mean([np.abs(r[-1]).mean() for r in result if r.shape[1]]))
    tops = result[-1].float().cpu().numpy()
    return float(np.mean([np.abs(tops[i, 1 : len(s) + 1]).mean() for i, s in enumerate(sentences) if s]))


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_all(args) -> list:
    configs = list(CONFIGS)
    if args.device == "cuda":
        configs = [c for c in configs if c[1] != "naive" or c[2]] + [
            ("fused kernel, unclipped, bf16 autocast", "fused", False, True)
        ]
    reports = []
    for name, path, clipped, cache in configs:
        spec = {
            "name": name,
            "path": path,
            "clipped": clipped,
            "cache": cache,
            "device": args.device,
            "threads": args.threads,
            "sentences": args.sentences,
            "repeats": args.repeats,
            "dtype": "bf16" if "bf16" in name else "fp32",
        }
        print(f"... {name}", flush=True)
        done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name} failed:\n{done.stderr}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        reports.append(report)
        print(f"    {report['tokens_per_s']:10.0f} tokens/s   peak RSS {report['peak_rss_mb']:.0f} MB", flush=True)
    return reports


def write_outputs(reports: list, args) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"bilm-{args.device}"
    header = {
        "machine": machine(args.threads, args.device),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python", "bench/bench_bilm.py", *sys.argv[1:]]),
    }
    stem.with_suffix(".json").write_text(json.dumps({**header, "results": reports}, indent=2) + "\n")
    _plot(reports, stem.with_suffix(".png"), AIM_GPU if args.device == "cuda" else AIM_CPU, header["machine"])
    _update_markdown(reports, header, args)


def _plot(reports, path: Path, aim: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in reports][::-1]
    rates = [r["tokens_per_s"] for r in reports][::-1]
    colours = ["#999999" if "straightforward" in n else "#1f77b4" for n in names]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(names) + 1.5))
    ax.barh(names, rates, color=colours)
    ax.axvline(aim, color="#d62728", linestyle="--", label=f"aim: {aim:,} tokens/s")
    for y, rate in enumerate(rates):
        ax.text(rate, y, f" {rate:,.0f}", va="center")
    ax.set_xlabel("tokens/s (words, sentence boundaries not counted)")
    ax.set_title(f"biLM inference, original preset\n{title}", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _update_markdown(reports, header, args) -> None:
    words = reports[0]["words"]
    lines = [
        f"### biLM inference on {args.device.upper()} ({header['date']})",
        "",
        f"Machine: {header['machine']}. `original` preset (93.6M parameters), random weights, "
        f"{args.sentences} real sentences from shared/data/corpus/valid.txt ({words} words; spaCy tokenizer "
        f"and sentencizer), one batch; median of {args.repeats} runs after a warm-up. tokens/s counts words "
        f"(the `<S>`/`</S>` the model also runs are not counted). Cache warm: every run starts from a token "
        f"cache filled with the words of 2,000 training lines (hit rate = this batch's unique tokens found "
        f"there). Char stage share: the time of the token representations alone (char CNN or cache) over "
        f"the whole run. Mean abs top layer: the same in every row means every path computed the same "
        f"numbers. Command: `{header['command']}`.",
        "",
        "| configuration | tokens/s | vs straightforward | char stage share | peak RSS (MB) | cache hit rate | mean "
        "abs top layer |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    baselines = {r["clipped"]: r["tokens_per_s"] for r in reports if r["path"] == "naive"}
    for r in reports:
        speedup = r["tokens_per_s"] / baselines[r["clipped"]] if r["clipped"] in baselines else float("nan")
        hit = f"{r['cache_hit_rate']:.1%}" if r.get("cache_hit_rate") is not None else "-"
        memory = f"{r['peak_gpu_mb']:.0f} (GPU)" if "peak_gpu_mb" in r else f"{r['peak_rss_mb']:.0f}"
        lines.append(
            f"| {r['name']} | {r['tokens_per_s']:,.0f} | {speedup:.1f}x | {r['char_stage_share']:.0%} | {memory} | "
            f"{hit} | {r['check']:.6f} |"
        )
    lines += ["", f"![biLM inference]({Path('bench/results') / f'bilm-{args.device}.png'})", ""]
    if args.device == "cpu":
        # CPU speed figures stand in BENCHMARKS.md only next to the peer's from the same run (--peer);
        # this comparison of our own paths is a diagnostic: printed and kept in bench/results.
        print("\n".join(lines))
        return
    from report import write_section

    write_section(f"bench_bilm:{args.device}", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peer", help="the peer's folder (../shared/tools/peer-allennlp/setup.sh): run bench_peer.py instead"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        subprocess.run(
            [sys.executable, str(Path(__file__).with_name("bench_peer.py")), args.peer, "--threads", str(args.threads)],
            check=True,
        )
        return
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    reports = run_all(args)
    write_outputs(reports, args)
    print(f"Wrote {RESULTS}/bilm-{args.device}.json/.png" + (" and BENCHMARKS.md" if args.device == "cuda" else ""))


if __name__ == "__main__":
    main()
