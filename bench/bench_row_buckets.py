"""What the row buckets cost in speed: the elmo component with matmuls at bucket sizes (as shipped,
``spacy_elmo/kernels/row_buckets.py``) against the same code with each call at its own row count
(``bucket_rows`` replaced by the identity), each configuration in its own process, alternating.

    python bench/bench_row_buckets.py /tmp/peer          # full-size weights, converted once (bench_peer)
    python bench/bench_row_buckets.py --weights DIR --processes 5

Workloads: 1, 8 and 64 sentences of held-out text through ``nlp.pipe`` (median of repeated runs
after a warm-up: the shapes are met before the clock starts), and a stream of 150 training lines
never seen before through ``nlp(text)`` one at a time (new doc lengths: new shapes, compiled on
the way). With the peer's folder, AllenNLP's ``Elmo`` (fp32, its own venv, batches of 64) runs the
sentence workloads in each round of the same run. words/s per process; the table gives the median
over processes. Writes
bench/results/row-buckets-cpu.json and .png and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from report import SHARED, write_section

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SENTENCE_WORKLOADS = ["1 sentence", "8 sentences", "64 sentences"]
WORKLOADS = [*SENTENCE_WORKLOADS, "150 new lines, one at a time"]
VARIANTS = {"buckets": "row counts rounded to buckets (shipped)", "own rows": "each call at its own row count"}
PEER = "AllenNLP `Elmo` (the peer, its own venv; batches of 64)"


def measure(weights: str, precision: str, variant: str) -> dict:
    """words/s of each workload, in this process."""
    import spacy
    import torch
    from bench_bilm import load_sentences
    from bench_peer import time_pipe

    from spacy_elmo.kernels import quantized, row_buckets

    if variant == "own rows":
        row_buckets.bucket_rows = quantized.bucket_rows = lambda rows: rows
    torch.set_num_threads(2)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": weights, "set_vector_hooks": False, "precision": precision})
    nlp.initialize()
    sentences = load_sentences(64)[0]
    speeds = {
        "1 sentence": time_pipe(nlp, sentences[:1], 15)["words_per_s"],
        "8 sentences": time_pipe(nlp, sentences[:8], 7)["words_per_s"],
        "64 sentences": time_pipe(nlp, sentences, 5)["words_per_s"],
    }
    lines = [line for line in (SHARED / "data" / "corpus" / "train.txt").read_text().splitlines() if line.strip()]
    start, words = time.perf_counter(), 0
    for text in lines[5000:5150]:
        words += len(nlp(text))
    speeds[WORKLOADS[-1]] = words / (time.perf_counter() - start)
    return speeds


def run_all(weights: Path, precisions: list, processes: int, peer: Optional[Path]) -> dict:
    """Each configuration ``processes`` times, alternating; with ``peer``, AllenNLP's ``Elmo`` (fp32,
    its own venv) on the same sentences in each round."""
    runs = {(p, v): [] for p in precisions for v in VARIANTS}
    peer_runs: list = []
    for _ in range(processes):
        if peer is not None:
            peer_runs.append(peer_speeds(peer))
        for precision in precisions:
            for variant in VARIANTS:  # alternating: drift in the machine's speed falls on both alike
                command = [sys.executable, __file__, "--worker", variant, "--precision", precision, str(weights)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(done.stderr[-3000:])
                runs[precision, variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
    from spacy_elmo.kernels.machine import cpu_description

    rows = []
    for (precision, variant), found in runs.items():
        median = {workload: statistics.median(run[workload] for run in found) for workload in WORKLOADS}
        rows.append({"precision": precision, "variant": variant, "runs": found, "median": median})
    if peer_runs:
        median = {w: statistics.median(run[w] for run in peer_runs) for w in SENTENCE_WORKLOADS}
        rows.append({"precision": "fp32", "variant": "peer", "runs": peer_runs, "median": median})
    return {"machine": cpu_description(), "date": time.strftime("%Y-%m-%d %H:%M"), "processes": processes, "rows": rows}


def peer_speeds(peer: Path) -> dict:
    """words/s of AllenNLP's ``Elmo`` on the sentence workloads (batches of 64, as it is run)."""
    from bench_bilm import load_sentences
    from bench_peer import run_peer

    sentences = load_sentences(64)[0]
    speeds = {}
    with tempfile.TemporaryDirectory() as folder:
        for workload, count, repeats in zip(SENTENCE_WORKLOADS, (1, 8, 64), (15, 7, 5)):
            path = Path(folder) / f"{count}.json"
            path.write_text(json.dumps(sentences[:count]))
            speeds[workload] = run_peer(peer, path, "plain", repeats, 2)["words_per_s"]
    return speeds


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(12, 3.5))
    for ax, workload in zip(axes, WORKLOADS):
        rows = [row for row in report["rows"] if workload in row["median"]]
        labels = [f"{row['precision']}\n{row['variant']}" for row in rows]
        colours = {"buckets": "#4c72b0", "own rows": "#dd8452", "peer": "#888888"}
        ax.bar(range(len(rows)), [row["median"][workload] for row in rows], color=[colours[r["variant"]] for r in rows])
        for i, row in enumerate(rows):
            ax.plot([i] * len(row["runs"]), [run[workload] for run in row["runs"]], "k.", markersize=4)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(workload, fontsize=9)
    axes[0].set_ylabel("words/s (bars: median; dots: each process)")
    fig.suptitle(f"row buckets against each call's own row count, {report['machine'].split(' (')[0]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def update_markdown(report: dict, command: str) -> None:
    lines = [
        f"### Row buckets: their cost in speed ({report['date']})",
        "",
        f"Machine: {report['machine']}, 2 threads. Full-size weights; the `elmo` component through `nlp.pipe` (1, 8 "
        "and 64 held-out sentences, shapes met in a warm-up) and 150 new training lines through `nlp(text)` one at a "
        f"time. words/s, median over {report['processes']} processes per row, the rows alternating; the peer "
        "(AllenNLP's `Elmo`, fp32, the same sentences) in each round of the same run. "
        f"Command: `{command}`.",
        "",
        "| precision | matmul rows | " + " | ".join(WORKLOADS) + " |",
        "|---|---|" + "---:|" * len(WORKLOADS),
    ]
    for row in report["rows"]:
        cells = " | ".join(f"{row['median'][w]:,.1f}" if w in row["median"] else "-" for w in WORKLOADS)
        lines.append(f"| {row['precision']} | {VARIANTS.get(row['variant'], PEER)} | {cells} |")
    lines += ["", "![row buckets](bench/results/row-buckets-cpu.png)", ""]
    write_section("bench_row_buckets:cpu", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", nargs="?", type=Path, help="the peer's folder (its full-size weights, converted)")
    parser.add_argument("--weights", type=Path, help="a native biLM instead")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--precision", action="append", help="fp32 and int8 unless given")
    parser.add_argument("--worker", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(str(args.peer or args.weights), args.precision[0], args.worker)))
        return
    if args.weights is None and args.peer is None:
        parser.error("give the peer's folder (full-size weights) or --weights DIR")
    if args.weights is None:
        from bench_peer import converted_weights

        args.weights = converted_weights(args.peer)
    report = run_all(args.weights, args.precision or ["fp32", "int8"], args.processes, args.peer)
    RESULTS.mkdir(parents=True, exist_ok=True)
    from spacy_elmo.files import atomic_write_json

    atomic_write_json(RESULTS / "row-buckets-cpu.json", report)
    plot(report, RESULTS / "row-buckets-cpu.png")
    update_markdown(report, "python " + " ".join(["bench/bench_row_buckets.py", *sys.argv[1:]]))
    for row in report["rows"]:
        print(row["precision"], row["variant"], {w: round(v, 1) for w, v in row["median"].items()})


if __name__ == "__main__":
    main()
