"""Each precision's kernels when the cores are shared, as a served replica's are: the LSTM's recurrent
matmul of the full-size model (rows x 512 by 512 x 16,384) through the kernels ``select`` chose, alone
and beside busy processes (``while True: pass``, one per core and one more).

    python bench/bench_shared_cores.py [--label zen3]

What runs never depends on this (``kernels.select`` times nothing); it says how much each precision
slows down when other work shares its cores. Each call: fastest and median of 20 after a warm-up, the
precisions taking turns. Writes bench/results/shared-cores[-LABEL].json and its BENCHMARKS.md section.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import result_name, write_section

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ROWS = (1, 8, 32)
CALLS = 20
BUSY_LOOP = "while True: pass"


def timings(threads: int) -> dict:
    """{precision: {rows: (fastest ms, median ms)}} for fp32 and each precision that runs here."""
    import torch

    from spacy_elmo.kernels.select import select

    torch.set_num_threads(threads)
    cpu = torch.device("cpu")
    weight = torch.nn.Parameter(torch.randn(16384, 512) * 0.05, requires_grad=False)
    chosen = {p: select(cpu, p) for p in ("fp32", "bf16", "int8")}
    chosen = {p: k for p, k in chosen.items() if k.runs == p}
    table: dict = {p: {} for p in chosen}
    with torch.inference_mode():
        for rows in ROWS:
            x = torch.randn(rows, 512)
            times: dict = {p: [] for p in chosen}
            for kernels in chosen.values():
                kernels.step_matmul(x, weight)  # weight copies and compiled kernels made here
            for _ in range(CALLS):
                for precision, kernels in chosen.items():
                    started = time.perf_counter()
                    kernels.step_matmul(x, weight)
                    times[precision].append(1000 * (time.perf_counter() - started))
            for precision, values in times.items():
                table[precision][rows] = (min(values), statistics.median(values))
    return {"table": table, "kernels": {p: k.choice.kernel for p, k in chosen.items()}}


def measure(threads: int) -> dict:
    quiet = timings(threads)
    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(1.0)
        busy = timings(threads)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return {"quiet": quiet["table"], "busy": busy["table"], "kernels": quiet["kernels"], "busy_loops": len(loops)}


def write_outputs(report: dict, label: str | None) -> None:
    from spacy_elmo.files import atomic_write_json

    name = result_name("shared-cores", label)
    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / f"{name}.json", report)
    lines = [
        f"### Each precision's kernels when the cores are shared ({report['date']})",
        "",
        f"Machine: {report['machine']}. The LSTM's recurrent matmul of the full-size model (rows x 512 by "
        f"512 x 16,384) through the kernels `select` chose, alone and beside {report['busy_loops']} busy processes "
        f"(`{BUSY_LOOP}`); ms per call, fastest / median of {CALLS}, the precisions taking turns. Command: "
        f"`python bench/bench_shared_cores.py{' --label ' + label if label else ''}`.",
        "",
        "| precision (kernel) | rows | alone: fastest / median (ms) | shared: fastest / median (ms) | x fp32 alone / "
        "shared (medians) |",
        "|---|---:|---|---|---|",
    ]
    for precision, kernel in report["kernels"].items():
        for rows in ROWS:
            quiet, busy = report["quiet"][precision][str(rows)], report["busy"][precision][str(rows)]
            fp32_quiet, fp32_busy = report["quiet"]["fp32"][str(rows)][1], report["busy"]["fp32"][str(rows)][1]
            lines.append(
                f"| {precision} ({kernel}) | {rows} | {quiet[0]:.2f} / {quiet[1]:.2f} | {busy[0]:.2f} / {busy[1]:.2f} "
                f"| {fp32_quiet / quiet[1]:.2f}x / {fp32_busy / busy[1]:.2f}x |"
            )
    lines.append("")
    write_section(f"bench_shared_cores:{label or 'cpu'}", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--label", help="this machine's results under their own name, e.g. zen3")
    args = parser.parse_args()
    import json

    import torch

    from spacy_elmo.kernels.machine import cpu_description

    report = json.loads(json.dumps(measure(args.threads)))  # rows as strings, as the JSON file keeps them
    report.update(
        machine=f"{cpu_description()}, {args.threads} threads, torch {torch.__version__}",
        date=time.strftime("%Y-%m-%d"),
    )
    write_outputs(report, args.label)
    for precision in report["kernels"]:
        for rows in ROWS:
            quiet, busy = report["quiet"][precision][str(rows)], report["busy"][precision][str(rows)]
            print(f"{precision:>5} {rows:>3} rows: alone {quiet[1]:7.2f} ms, shared {busy[1]:7.2f} ms")


if __name__ == "__main__":
    main()
