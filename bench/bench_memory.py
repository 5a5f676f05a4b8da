"""Memory over a long run: RSS of a process that sends tens of thousands of docs through the elmo
component, `nlp(text)` one at a time and then `nlp.pipe`, against the same docs through spaCy alone
(a blank pipeline with the sentencizer: its string store and vocabulary grow with every new word),
each in its own process.

    python bench/bench_memory.py                  # fixture weights (../shared/fixtures), 20,000 docs each way
    python bench/bench_memory.py --docs 60000
    python bench/bench_memory.py --onednn-cache 64    # a third run: oneDNN's primitive cache capped at 64

Lines are those of shared/data/corpus/train.txt, in order (new words keep arriving, as in service).
Records RSS, the string store's size and the component's caches every 500 docs; writes
bench/results/memory-cpu.json and .png and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from report import SHARED, write_section

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
FIXTURE = SHARED / "fixtures" / "elmo-allennlp"
EVERY = 500


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def lines(count: int) -> list:
    text = (SHARED / "data" / "corpus" / "train.txt").read_text(encoding="utf-8")
    found = [line for line in text.splitlines() if line.strip()][:count]
    return (found * (count // len(found) + 1))[:count]


def pipeline(with_elmo: bool, weights: Path):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    if with_elmo:
        nlp.add_pipe("elmo", config={"weights": str(weights)})
        nlp.initialize()
    return nlp


def label(run_: dict) -> str:
    if not run_["with_elmo"]:
        return "spaCy alone (blank + sentencizer)"
    cache = run_.get("onednn_cache")
    return "spaCy + elmo" + (f", ONEDNN_PRIMITIVE_CACHE_CAPACITY={cache}" if cache is not None else "")


def run(with_elmo: bool, weights: Path, count: int, threads: int) -> dict:
    """RSS and sizes every EVERY docs: first ``nlp(text)`` one at a time, then ``nlp.pipe``."""
    import torch

    torch.set_num_threads(threads)
    nlp = pipeline(with_elmo, weights)
    texts = lines(count)
    curve = [sample(nlp, 0, "start")]
    for i, text in enumerate(texts, 1):
        nlp(text)
        if i % EVERY == 0:
            curve.append(sample(nlp, i, "nlp(text)"))
    for i, _ in enumerate(nlp.pipe(texts, batch_size=64), 1):
        if i % EVERY == 0:
            curve.append(sample(nlp, count + i, "nlp.pipe"))
    cache = os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    return {"with_elmo": with_elmo, "onednn_cache": int(cache) if cache else None, "curve": curve}


def sample(nlp, docs: int, phase: str) -> dict:
    point = {"docs": docs, "phase": phase, "rss_mb": rss_mb(), "strings": len(nlp.vocab.strings)}
    if "elmo" in nlp.pipe_names:
        elmo = nlp.get_pipe("elmo")
        point["token_cache_rows"] = len(elmo.bilm.token_cache)
        point["sentence_cache_tokens"] = elmo._sentences._tokens
    return point


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for run_ in report["runs"]:
        curve = run_["curve"]
        ax.plot([p["docs"] for p in curve], [p["rss_mb"] for p in curve], label=label(run_))
    ax.axvline(report["docs"], color="#888888", linewidth=1, linestyle=":")
    ax.text(report["docs"], ax.get_ylim()[0], " nlp.pipe from here", fontsize=7, va="bottom")
    ax.set_xlabel("docs processed (nlp(text) one at a time, then nlp.pipe)")
    ax.set_ylabel("RSS (MB)")
    ax.set_title(f"memory over a long run, {report['machine'].split(' (')[0]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def growth(curve: list, phase: str) -> tuple:
    """RSS at the phase's first and last sample, and over its second half."""
    points = [p for p in curve if p["phase"] == phase]
    half = points[len(points) // 2]
    return points[0]["rss_mb"], points[-1]["rss_mb"], points[-1]["rss_mb"] - half["rss_mb"]


def capped_option(report: dict) -> str:
    caps = [r["onednn_cache"] for r in report["runs"] if r.get("onednn_cache") is not None]
    return f" --onednn-cache {caps[0]}" if caps else ""


def update_markdown(report: dict) -> None:
    lines_ = [
        f"### Memory over a long run ({report['date']})",
        "",
        f"Machine: {report['machine']}. The fixture's ELMo weights; {report['docs']:,} lines of "
        "shared/data/corpus/train.txt through `nlp(text)` one at a time, then the same lines through `nlp.pipe` "
        "(batches of 64); each pipeline in its own process; RSS every 500 docs. spaCy alone is a blank English "
        "pipeline with the sentencizer: its string store grows with every new word. Command: "
        f"`python bench/bench_memory.py --docs {report['docs']}{capped_option(report)}`.",
        "",
        "| pipeline | phase | RSS first -> last (MB) | growth over the phase's second half (MB) | strings at the end |",
        "|---|---|---|---:|---:|",
    ]
    for run_ in report["runs"]:
        name = label(run_)
        for phase in ("nlp(text)", "nlp.pipe"):
            first, last, late = growth(run_["curve"], phase)
            strings = [p["strings"] for p in run_["curve"] if p["phase"] == phase][-1]
            lines_.append(f"| {name} | {phase} | {first:,.0f} -> {last:,.0f} | {late:+.1f} | {strings:,} |")
    lines_ += [
        "",
        "oneDNN compiles and keeps a kernel for each matmul shape it meets; the component runs its matmuls at a few "
        "row counts (`spacy_elmo/kernels/row_buckets.py`), so docs of new lengths bring no new shapes once the "
        "common ones are met, and RSS levels off.",
    ]
    if any(run_.get("onednn_cache") is not None for run_ in report["runs"]):
        lines_ += [
            "",
            "The third run caps oneDNN's primitive cache (`ONEDNN_PRIMITIVE_CACHE_CAPACITY`, read when torch starts): "
            "oneDNN keeps one compiled kernel for each matmul shape it meets, up to 1,024 by default, and docs of "
            "new lengths bring new shapes.",
        ]
    lines_ += ["", "![memory over a long run](bench/results/memory-cpu.png)", ""]
    write_section("bench_memory:cpu", lines_)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", type=Path, help="a native biLM (default: the fixture, converted)")
    parser.add_argument("--onednn-cache", type=int, help="also run with oneDNN's primitive cache capped at this size")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(args.worker == "elmo", args.weights, args.docs, args.threads)))
        return
    weights = args.weights or convert_fixture()
    runs = []
    variants = [("spacy", {}), ("elmo", {})]
    if args.onednn_cache is not None:
        variants.append(("elmo", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(args.onednn_cache)}))
    for which, env in variants:
        command = [sys.executable, __file__, "--worker", which, "--docs", str(args.docs), "--weights", str(weights)]
        environment = {**os.environ, **env}
        done = subprocess.run(
            [*command, "--threads", str(args.threads)], capture_output=True, text=True, env=environment
        )
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    from spacy_elmo.files import atomic_write_json
    from spacy_elmo.kernels.machine import cpu_description

    report = {"machine": cpu_description(), "date": time.strftime("%Y-%m-%d"), "docs": args.docs, "runs": runs}
    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / "memory-cpu.json", report)
    plot(report, RESULTS / "memory-cpu.png")
    update_markdown(report)
    for run_ in runs:
        for phase in ("nlp(text)", "nlp.pipe"):
            print(run_["with_elmo"], phase, [round(x, 1) for x in growth(run_["curve"], phase)])


def convert_fixture() -> Path:
    from spacy_elmo import import_original, save_bilm

    target = ROOT / "bench" / "out" / "fixture-bilm"
    if not (target / "model.safetensors").is_file():
        save_bilm(import_original(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5"), target)
    return target


if __name__ == "__main__":
    main()
