"""Sweep biLM architectures and training settings for the lowest held-out perplexity in a fixed
wall-clock budget: which network the workflow's few minutes on a CPU are best spent on.

    python bench/bench_sweep.py                              # every candidate, 9 minutes each, the workflow's text
    python bench/bench_sweep.py --candidates small-before,e256-p64 --minutes 3
    python bench/bench_sweep.py --corpus my-project/corpus   # prepared by spacy_elmo.training.corpus (+ vocab.txt)

Each candidate trains with ``python -m spacy_elmo.training.pretrain`` for ``--minutes`` on this machine's cores,
evaluating the first 10,000 dev tokens every minute; then its full-softmax perplexity on the whole
dev and test splits. Finished candidates are kept in bench/out/sweep/ and not run again (``--fresh``
runs them again). Writes bench/results/sweep-cpu.json and .png (dev perplexity against minutes, one
line per candidate) and the sweep's section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from report import ROOT, write_section

OUT, RESULTS = ROOT / "bench" / "out" / "sweep", ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

_QUARTER_FILTERS = [[1, 8], [2, 8], [3, 16], [4, 32], [5, 64], [6, 128], [7, 256]]  # 512, the original's shape / 4
_EIGHTH_FILTERS = [[1, 4], [2, 4], [3, 8], [4, 16], [5, 32], [6, 64], [7, 128]]  # 256

# Settings every candidate shares: the workflow's evaluation pace and checkpointing.
COMMON: Dict[str, Any] = dict(
    eval_every=0, eval_minutes=1.0, eval_tokens=10000, log_every=10, checkpoint_every=100000, checkpoint_minutes=100.0
)
BEFORE: Dict[str, Any] = dict(
    preset="small", softmax="sampled", n_samples=1024, optimizer="adam", lr=0.001, dropout=0.1, batch_tokens=4096
)
SCHEDULED: Dict[str, Any] = dict(BEFORE, lr=0.003, lr_schedule="warmup-cosine", warmup=0.05, final_lr=0.1)


def _shape(filters: List[List[int]], lstm_dim: int, projection_dim: int, **more: Any) -> Dict[str, Any]:
    return {"model": dict(filters=filters, lstm_dim=lstm_dim, projection_dim=projection_dim, **more)}


# name -> (what it tries, its settings over COMMON)
CANDIDATES: Dict[str, tuple] = {
    "small-before": ("the workflow's biLM before: small preset, adam 1e-3 constant", BEFORE),
    "small-scheduled": ("small preset with the time schedule (peak 3e-3)", SCHEDULED),
    "q512-p128": ("filters / 4, LSTM 512, projection 128", dict(SCHEDULED, **_shape(_QUARTER_FILTERS, 512, 128))),
    "q512-p128-full": (
        "as q512-p128, full softmax",
        dict(SCHEDULED, softmax="full", **_shape(_QUARTER_FILTERS, 512, 128)),
    ),
    "q512-p128-lr6e-3": (
        "as q512-p128, peak lr 6e-3",
        dict(SCHEDULED, lr=0.006, **_shape(_QUARTER_FILTERS, 512, 128)),
    ),
    "e512-p128": ("filters / 8, LSTM 512, projection 128", dict(SCHEDULED, **_shape(_EIGHTH_FILTERS, 512, 128))),
    "q512-p256": ("filters / 4, LSTM 512, projection 256", dict(SCHEDULED, **_shape(_QUARTER_FILTERS, 512, 256))),
    "e256-p64": ("filters / 8, LSTM 256, projection 64", dict(SCHEDULED, **_shape(_EIGHTH_FILTERS, 256, 64))),
    "e256-p64-lr6e-3": (
        "as e256-p64, peak lr 6e-3",
        dict(SCHEDULED, lr=0.006, **_shape(_EIGHTH_FILTERS, 256, 64)),
    ),
}


def workflow_corpus() -> Path:
    """The workflow's default corpus, made as `spacy project run text corpus vocab` makes it."""
    corpus = OUT / "corpus"
    if not (corpus / "vocab.txt").exists():
        text = OUT / "text"
        steps = [
            ["spacy_elmo.training.builtin_text", "gensim", str(text), "--lang", "en"],
            ["spacy_elmo.training.corpus", str(corpus), "--source", str(text), "--split", "0.96,0.02,0.02"],
            ["spacy_elmo.training.vocab", str(corpus), str(corpus / "vocab.txt"), "--max-size", "20000"],
        ]
        for step in steps:
            subprocess.run([sys.executable, "-m", *step], check=True, cwd=ROOT)
    return corpus


def run_candidate(name: str, corpus: Path, minutes: float, fresh: bool) -> Dict[str, Any]:
    """Train one candidate (unless its result is kept) and score it; its result."""
    run = OUT / name
    kept = run / "result.json"
    if kept.exists() and not fresh and json.loads(kept.read_text())["minutes"] == minutes:
        return json.loads(kept.read_text())
    shutil.rmtree(run, ignore_errors=True)
    settings = dict(COMMON, **CANDIDATES[name][1], corpus=str(corpus), vocab=str(corpus / "vocab.txt"))
    settings["max_minutes"] = minutes
    overrides = [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]
    command = [sys.executable, "-m", "spacy_elmo.training.pretrain", "--output", str(run), *overrides]
    subprocess.run(command, check=True, cwd=ROOT)
    result = score(name, run, corpus, settings, minutes)
    kept.write_text(json.dumps(result, indent=2) + "\n")
    return result


def score(name: str, run: Path, corpus: Path, settings: Dict[str, Any], minutes: float) -> Dict[str, Any]:
    """Throughput, the dev curve and the full-softmax perplexity on the whole dev and test splits."""
    from spacy_elmo import load_bilm
    from spacy_elmo.training.corpus import read_sentences
    from spacy_elmo.training.evaluate import evaluate

    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    dev, test = (evaluate(run, read_sentences(corpus / split), device="cpu") for split in ("dev", "test"))
    return {
        "name": name,
        "tries": CANDIDATES[name][0],
        "settings": settings,
        "minutes": minutes,
        "parameters": sum(p.numel() for p in load_bilm(run / "bilm").parameters()),
        "steps": steps[-1]["step"],
        "tokens": steps[-1]["tokens"],
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps[1:] or steps),
        "dev_curve": [[r["elapsed"] / 60, r["dev_ppl"]] for r in records if "dev_ppl" in r],
        "dev": dev["perplexity"],
        "test": test["perplexity"],
        "unigram_test": test["unigram_perplexity"],
    }


def plot(results: List[Dict[str, Any]], path: Path, title: str) -> None:
    """Dev perplexity (the evaluation subset) against minutes, one line per candidate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spacy_elmo.files import atomic_write

    fig, ax = plt.subplots(figsize=(9, 5))
    for result in sorted(results, key=lambda r: r["test"]):
        minutes, ppl = zip(*result["dev_curve"])
        ax.plot(minutes, ppl, marker="o", markersize=3, label=f"{result['name']} (test {result['test']:.0f})")
    ax.axhline(results[0]["unigram_test"], color="#888888", linestyle="--", label="unigram model (test)")
    ax.set(yscale="log", xlabel="minutes of training", ylabel="dev perplexity (first 10k tokens)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        atomic_write(path, lambda temporary: fig.savefig(temporary, dpi=110, format="png"))
    finally:
        plt.close(fig)


def write_markdown(report: Dict[str, Any]) -> None:
    rows = sorted(report["candidates"], key=lambda r: r["test"])
    lines = [
        f"### Architecture sweep: the best biLM for {report['minutes']:g} minutes ({report['date']})",
        "",
        f"Machine: {report['machine']}, torch {report['torch']}. Each candidate trained for {report['minutes']:g} "
        f"minutes on the workflow's corpus ({report['corpus']}), then scored with the full softmax on the whole "
        "dev and test splits; every candidate has the corpus's one vocabulary, so the perplexities compare. "
        "Parameters: the biLM without its softmax. tokens/s: the median over the run's log lines; on a shared "
        "machine it drifts between runs of the same network. Command: "
        f"`{report['command']}`.",
        "",
        "| candidate | what it tries | parameters | tokens/s | tokens seen | dev ppl | test ppl |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['name']}` | {r['tries']} | {r['parameters'] / 1e6:.2f}M | {r['tokens_per_s']:,.0f} | "
            f"{r['tokens']:,} | {r['dev']:.1f} | **{r['test']:.1f}** |"
        )
    lines += [
        f"| unigram model | | | | | | {rows[0]['unigram_test']:.1f} |",
        "",
        "![dev perplexity against minutes](bench/results/sweep-cpu.png)",
        "",
    ]
    write_section("bench_sweep:cpu", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=9.0)
    parser.add_argument("--candidates", default=",".join(CANDIDATES), help="Comma-separated names (default: all).")
    parser.add_argument("--corpus", type=Path, help="A prepared corpus with vocab.txt (default: the workflow's).")
    parser.add_argument("--fresh", action="store_true", help="Run candidates again even where a result is kept.")
    args = parser.parse_args()
    import torch

    from spacy_elmo.kernels.machine import cpu_description, cpu_model

    names = [name for name in args.candidates.split(",") if name]
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        parser.error(f"unknown candidates {unknown}; known: {sorted(CANDIDATES)}")
    corpus = args.corpus or workflow_corpus()
    results = [run_candidate(name, corpus, args.minutes, args.fresh) for name in names]
    splits = json.loads((corpus / "manifest.json").read_text())["splits"]
    report = {
        "machine": cpu_description(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "minutes": args.minutes,
        "command": " ".join(["python", "bench/bench_sweep.py", *sys.argv[1:]]),
        "corpus": " / ".join(f"{name} {split['tokens']:,}" for name, split in splits.items()) + " tokens",
        "candidates": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sweep-cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(
        results,
        RESULTS / "sweep-cpu.png",
        f"{args.minutes:g} minutes per candidate on {cpu_model()}, {os.cpu_count()} cores",
    )
    write_markdown(report)
    for r in sorted(results, key=lambda r: r["test"]):
        print(f"{r['name']:>16}  {r['tokens_per_s']:>7,.0f} tok/s  dev {r['dev']:7.1f}  test {r['test']:7.1f}")


if __name__ == "__main__":
    main()
