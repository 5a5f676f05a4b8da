"""int8 matmul kernels against fp32 at the full-size model's LSTM input shape (a 16384 x 512 weight),
1, 32 and 256 rows: the micro-benchmark of ../shared/measurements/amd-epyc-zen3.md, on this CPU.

    python bench/bench_int8.py              # this CPU as it is
    python bench/bench_int8.py --cap AVX2   # with the kernels capped as on an AVX2-only CPU

Rows: fp32 ``a @ w.t()`` and ``nn.Linear``; ``torch._int_mm`` (int8 activations and weights, M
padded to 17 rows where torch needs it); oneDNN's int8 linear (``quantized``'s path on AMX); fbgemm's
dynamic int8 Linear (``torch.ao``: it scales each call's activations by their batch's range, so a
row's result depends on its batch: for comparison only). ms per call: the mean of 20 after a
warm-up, 2 threads. Writes bench/results/int8-cpu[-capped-CAP].json and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from report import write_section

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from simulated_cpus import SIMULATED_CPUS, why_not_cap  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ROWS = (1, 32, 256)


def milliseconds(call, runs: int = 20) -> float:
    call()
    started = time.perf_counter()
    for _ in range(runs):
        call()
    return 1000 * (time.perf_counter() - started) / runs


def kernels(weight, rows: int) -> dict:
    """Each kernel's call on ``rows`` rows of activations; a kernel this torch or CPU refuses is left out."""
    import torch

    from spacy_elmo.kernels import quantized

    x = torch.randn(rows, weight.shape[1])
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    calls = {"fp32 a @ w.t()": lambda: x @ weight.t(), "fp32 nn.Linear": lambda: linear(x)}
    values, _ = quantized.quantize_rows(x)
    for levels, name in ((quantized.INT8_MAX, "torch._int_mm, 8-bit weights"), (quantized.INT7_MAX, "7-bit")):
        packed = quantized.quantize_weight(weight, quantized.Int8Kernel("int_mm", levels, ()))
        calls[name if levels == quantized.INT8_MAX else "torch._int_mm, 7-bit weights"] = lambda packed=packed: (
            quantized.channel_scaled_sums(values, packed)
        )
    onednn = quantized.quantize_weight(weight, quantized.INT8_KERNELS["onednn"])
    calls["oneDNN int8 linear, 8-bit weights"] = lambda: quantized.channel_scaled_sums(values, onednn)
    dynamic = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, torch.qint8)
    calls["fbgemm dynamic int8 Linear (batch-dependent)"] = lambda: dynamic(x)
    times = {}
    for name, call in calls.items():
        try:
            times[name] = milliseconds(call)
        except RuntimeError as err:  # refused by this torch or CPU
            times[name] = f"refused: {str(err).splitlines()[0][:80]}"
    return times


def measure(threads: int) -> dict:
    import torch

    from spacy_elmo.kernels.machine import cpu_description

    torch.set_num_threads(threads)
    weight = torch.randn(16384, 512) * 0.05
    with torch.inference_mode():
        table = {rows: kernels(weight, rows) for rows in ROWS}
    return {
        "machine": f"{cpu_description()}, {threads} threads, torch {torch.__version__}",
        "engine": torch.backends.quantized.engine,
        "ms": {str(rows): times for rows, times in table.items()},
    }


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    cap = report["capped"]
    name = f"int8-cpu-capped-{cap}" if cap else "int8-cpu"
    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / f"{name}.json", report)
    names = list(report["ms"]["1"])
    title = f"capped at {cap}" if cap else "uncapped"
    lines = [
        f"### int8 kernels against fp32, {title} ({report['date']})",
        "",
        f"Machine: {report['machine']}; quantized engine {report['engine']}. A 16384 x 512 weight (the full-size "
        "model's LSTM input projection), ms per call, mean of 20 after a warm-up. Command: "
        f"`python bench/bench_int8.py{' --cap ' + cap if cap else ''}`.",
        "",
        "| kernel | " + " | ".join(f"{rows} row{'s' if rows > 1 else ''}" for rows in ROWS) + " |",
        "|---|" + "---:|" * len(ROWS),
    ]
    for kernel in names:
        cells = [report["ms"][str(rows)][kernel] for rows in ROWS]
        lines.append(f"| {kernel} | " + " | ".join(f"{c:.2f}" if isinstance(c, float) else c for c in cells) + " |")
    lines.append("")
    write_section(f"bench_int8:{name.removeprefix('int8-')}", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cap", choices=sorted(SIMULATED_CPUS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.threads)))
        return
    if args.cap and why_not_cap(args.cap):
        raise SystemExit(f"--cap {args.cap}: {why_not_cap(args.cap)}.")
    env = {**os.environ, **(SIMULATED_CPUS[args.cap] if args.cap else {})}
    command = [sys.executable, __file__, "--worker", "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    report = {**json.loads(done.stdout.strip().splitlines()[-1]), "capped": args.cap, "date": time.strftime("%Y-%m-%d")}
    write_outputs(report)
    for rows, times in report["ms"].items():
        print(rows, {k: round(v, 2) if isinstance(v, float) else v for k, v in times.items()})


if __name__ == "__main__":
    main()
