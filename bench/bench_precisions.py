"""What each precision's kernels (``kernels.select``) give through `nlp.pipe`: each opt-in precision
against exact fp32, in one process, on full-size weights, one sentence and 64 sentences of real
text; what each ran, the warning its load gave, and what each load cost.

    python bench/bench_precisions.py                # this CPU as it is
    python bench/bench_precisions.py --cap AVX2     # with the kernels capped as on an AVX2-only CPU

A precision runs what the machine's features and probes select, or falls back to fp32 with one
warning; a precision the rule (or a kept `info --machine` measurement) knows to be no faster than
fp32 warns once. Each load starts from an empty user cache. Each configuration is timed in turn on
the same docs, alternating, 5 rounds after a warm-up: median words/s. Writes
bench/results/precisions-cpu[-LABEL][-capped-CAP].json and the section of BENCHMARKS.md, with the CPU named
(``--label zen3``: this machine's results beside another CPU's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from bench_peer import workload_sentences
from report import result_name, write_section

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from simulated_cpus import SIMULATED_CPUS, why_not_cap  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PRECISIONS = ("fp32", "bf16", "int8")
WORKLOADS = ("1 sentence", "64 sentences")
ROUNDS = 5


def load(weights: str, precision: str):
    """A pipeline of the elmo component alone in ``precision``; the fallback warning, if any."""
    import spacy

    from spacy_elmo.kernels.advice import SlowerPrecision
    from spacy_elmo.kernels.select import PrecisionFallback

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": weights, "precision": precision, "set_vector_hooks": False})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", (PrecisionFallback, SlowerPrecision))
        nlp.initialize()
    nlp.get_pipe("elmo").bilm.token_cache.capacity = 0
    fallback = [str(w.message) for w in caught if issubclass(w.category, (PrecisionFallback, SlowerPrecision))]
    return nlp, fallback


def measure(weights: str, threads: int) -> dict:
    """Every precision, every workload, in this process."""
    import torch
    from spacy.tokens import Doc

    torch.set_num_threads(threads)
    pipelines = {precision: load(weights, precision) for precision in PRECISIONS}
    rows = []
    for workload in WORKLOADS:
        sentences = workload_sentences(workload)
        words = sum(len(s) for s in sentences)
        times: dict = {precision: [] for precision in PRECISIONS}
        for round_ in range(ROUNDS + 1):
            for precision, (nlp, _) in pipelines.items():
                docs = [Doc(nlp.vocab, words=s) for s in sentences]
                started = time.perf_counter()
                for _ in nlp.pipe(docs, batch_size=1000):
                    pass
                if round_:
                    times[precision].append(time.perf_counter() - started)
        fp32 = words / statistics.median(times["fp32"])
        for precision, (nlp, fallback) in pipelines.items():
            bilm = nlp.get_pipe("elmo").bilm
            speed = words / statistics.median(times[precision])
            rows.append(
                {
                    "workload": workload,
                    "precision": precision,
                    "runs": bilm.precision,
                    "kernel": bilm.precision_choice.kernel,
                    "words_per_s": speed,
                    "x_fp32": speed / fp32,
                    "fallback_warnings": fallback,
                }
            )
    kernels = {p: nlp.get_pipe("elmo").bilm.kernels.description() for p, (nlp, _) in pipelines.items()}
    return {"rows": rows, "kernels": kernels}


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    cap, label = report["capped"], report.get("label")
    name = result_name("precisions-cpu", label, cap)
    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / f"{name}.json", report)
    title = f"capped at {cap}, simulating a lesser CPU's kernels" if cap else "uncapped"
    title = f"{label}, {title}" if label else title
    lines = [
        f"### Each precision against fp32 through `nlp.pipe`, {title} ({report['date']})",
        "",
        f"Machine: {report['machine']}. Full-size random weights (93.6M parameters, the peer's, converted), the "
        "`elmo` component alone, token cache off; fp32, bf16 and int8 pipelines in one process, timed in turn on the "
        f"same docs, median of {ROUNDS} rounds after a warm-up; each load from an empty user cache. Command: "
        f"`python bench/bench_precisions.py{' --cap ' + cap if cap else ''}{' --label ' + label if label else ''}`.",
        "",
        "| workload | precision | runs (kernel) | words/s | x fp32 | warning at load |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in report["rows"]:
        warned = "yes: " + r["fallback_warnings"][0][:140] + "..." if r["fallback_warnings"] else "-"
        lines.append(
            f"| {r['workload']} | {r['precision']} | {r['runs']} ({r['kernel']}) | {r['words_per_s']:,.1f} | "
            f"**{r['x_fp32']:.2f}x** | {warned} |"
        )
    lines.append("")
    write_section(f"bench_precisions:{name.removeprefix('precisions-')}", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=str(ROOT / "bench" / "out" / "peer-full-bilm"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cap", choices=sorted(SIMULATED_CPUS))
    parser.add_argument("--label", help="this machine's results under their own name (precisions-cpu-LABEL), e.g. zen3")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (Path(args.weights) / "model.safetensors").is_file():
        raise SystemExit(f"No native biLM at {args.weights}: run bench/bench_peer.py PEER_DIR once (it converts it).")
    if args.worker:
        print(json.dumps(measure(args.weights, args.threads)))
        return
    if args.cap and why_not_cap(args.cap):
        raise SystemExit(f"--cap {args.cap}: {why_not_cap(args.cap)}.")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, **(SIMULATED_CPUS[args.cap] if args.cap else {}), "SPACY_ELMO_CACHE": cache}
        command = [sys.executable, __file__, "--worker", "--weights", args.weights, "--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    report = {**json.loads(done.stdout.strip().splitlines()[-1]), "capped": args.cap, "label": args.label}
    report.update(machine=_worker_machine(args), date=time.strftime("%Y-%m-%d"))
    write_outputs(report)
    for r in report["rows"]:
        speed = f"{r['words_per_s']:9.1f} words/s {r['x_fp32']:.2f}x"
        print(f"{r['workload']:>13} {r['precision']}: runs {r['runs']:4} {speed}")


def _worker_machine(args) -> str:
    env = {**os.environ, **(SIMULATED_CPUS[args.cap] if args.cap else {})}
    code = "import sys; sys.path.insert(0, 'bench'); from report import machine; print(machine(%d))" % args.threads
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    ).stdout.strip()


if __name__ == "__main__":
    main()
