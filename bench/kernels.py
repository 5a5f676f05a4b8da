"""What the CPU kernels give: each precision against exact fp32 through `nlp.pipe` (``precisions``),
and the int8 matmul kernels against fp32's at the full-size model's shape (``int8``).

    python bench/kernels.py precisions                   # fp32, bf16, int8 on full-size weights, this CPU
    python bench/kernels.py precisions --cap AVX2        # the kernels capped as on an AVX2-only CPU
    python bench/kernels.py precisions --label zen3      # this CPU's results beside another's
    python bench/kernels.py precisions --weights ../shared/fixtures/elmo-allennlp --workloads 1 --repeats 1
    python bench/kernels.py int8 [--cap AVX2]            # the int8 matmul micro-benchmark
    python bench/kernels.py precisions|int8 --render-only [--cap CAP] [--label L]   # the section again

``precisions``: the `elmo` component alone (token cache off) in each precision, all in one process,
timed in turn on the same docs (rounds alternate the precisions), on 1 sentence of the fixture and
64 sentences of real text; what each precision runs (``kernels.select``: the machine's features and
probes, or fp32 with one warning), the warning its load gave. Each load starts from an empty user
cache (its probes run again). Default weights: the peer's full-size random weights, converted
(bench/out/peer-full-bilm: `python bench/peer.py PEER_DIR` converts them once).

``int8``: a 16384 x 512 weight (the full-size model's LSTM input projection) times 1, 32 and 256
rows: fp32 ``a @ w.t()`` and ``nn.Linear``; each of the package's exact int8 kernels
(``kernels.quantized.INT8_KERNELS``: oneDNN's int8 linear, ``torch._int_mm``, int8 values summed
by fp32 GEMMs) on activations quantized beforehand; fbgemm's dynamic int8 Linear (``torch.ao``: it
scales each call's activations by their batch's range, so a row's result depends on its batch: for
comparison only). The kernels of a row count are timed in turn; ms per call, the median.

``--cap`` re-executes the script with the cap's environment (tests/simulated_cpus.py), so that
oneDNN, ATen and MKL load capped: a cap only lowers, and one this CPU cannot honour is refused.
Writes bench/results/precisions-cpu[-LABEL][-capped-CAP].json or int8-cpu[-capped-CAP].json and
the section "kernels:<that name>" of BENCHMARKS.md. CPU only; nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List

from suite.caps import SIMULATED_CPUS, run_capped
from suite.report import OUT, command_line, machine, read_results, result_name, write_results, write_section
from suite.timing import timed_in_turn
from suite.workloads import workload_named, workload_sentences

PRECISIONS = ("fp32", "bf16", "int8")
INT8_ROWS = (1, 32, 256)
INT8_SHAPE = (16384, 512)
SPREAD = " (in brackets: the spread, slowest minus fastest run over the median)"


def main() -> None:
    args = parse_arguments()
    if args.render_only:
        render(args.command, read_results(results_name(args)))
        return
    run_capped(args.cap)
    report = measure_precisions(args) if args.command == "precisions" else measure_int8(args)
    report.update(capped=args.cap, date=time.strftime("%Y-%m-%d"), command=command_line("kernels.py"))
    write_results(results_name(args), report)
    render(args.command, report)
    print_summary(args.command, report)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--threads", type=int, default=2)
    shared.add_argument("--cap", choices=sorted(SIMULATED_CPUS), help="run the kernels a lesser CPU would")
    shared.add_argument("--render-only", action="store_true", help="write the section again from the results file")
    precisions = commands.add_parser("precisions", parents=[shared], help="each precision against fp32, nlp.pipe")
    precisions.add_argument("--weights", default=str(OUT / "peer-full-bilm"), help="the elmo component's weights")
    precisions.add_argument("--label", help="this machine's results under their own name, e.g. zen3")
    precisions.add_argument("--workloads", nargs="+", default=["1", "64"], help="sentence counts (1, 16, 64, ...)")
    precisions.add_argument("--repeats", type=int, default=5, help="timed rounds after a warm-up")
    int8 = commands.add_parser("int8", parents=[shared], help="int8 matmul kernels against fp32")
    int8.add_argument("--rows", nargs="+", type=int, default=list(INT8_ROWS), help="activation rows per call")
    int8.add_argument("--repeats", type=int, default=20, help="timed calls per kernel after a warm-up")
    return parser.parse_args()


def results_name(args: argparse.Namespace) -> str:
    if args.command == "precisions":
        return result_name("precisions-cpu", args.label, args.cap)
    return result_name("int8-cpu", None, args.cap)


# --- precisions -----------------------------------------------------------------------------------


def measure_precisions(args: argparse.Namespace) -> dict:
    """Every precision on every workload, in this process, each load from an empty user cache."""
    import torch

    if not Path(args.weights).is_dir():
        raise SystemExit(
            f"No weights at {args.weights}: `python bench/peer.py PEER_DIR` converts the peer's full-size "
            "ones there, or give --weights."
        )
    torch.set_num_threads(args.threads)
    cache = tempfile.mkdtemp(prefix="spacy-elmo-cache-")
    os.environ["SPACY_ELMO_CACHE"] = cache
    try:
        pipelines = load_pipelines(args.weights)
        rows = [row for count in args.workloads for row in time_precisions(pipelines, workload_named(count), args)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    kernels = {
        precision: nlp.get_pipe("elmo").runner.backend.description() for precision, (nlp, _) in pipelines.items()
    }
    return {
        "machine": machine(args.threads),
        "label": args.label,
        "weights": args.weights,
        "rows": rows,
        "kernels": kernels,
    }


def load_pipelines(weights: str) -> Dict[str, tuple]:
    """precision -> (a pipeline of the elmo component alone, the warnings its load gave); one
    vocabulary for all, so that the same docs run through each."""
    import spacy

    vocab = spacy.blank("en").vocab
    return {precision: load_pipeline(weights, precision, vocab) for precision in PRECISIONS}


def load_pipeline(weights: str, precision: str, vocab) -> tuple:
    import spacy

    from spacy_elmo.kernels.advice import SlowerPrecision
    from spacy_elmo.kernels.select import PrecisionFallback

    nlp = spacy.blank("en", vocab=vocab)
    nlp.add_pipe("elmo", config={"weights": weights, "precision": precision, "set_vector_hooks": False})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", (PrecisionFallback, SlowerPrecision))
        nlp.initialize()
    nlp.get_pipe("elmo").runner.token_cache.capacity = 0
    warned = [str(w.message) for w in caught if issubclass(w.category, (PrecisionFallback, SlowerPrecision))]
    return nlp, warned


def time_precisions(pipelines: Dict[str, tuple], workload: str, args: argparse.Namespace) -> List[dict]:
    """One workload's rows: each precision's words/s, timed in turn on fresh docs of the same words."""
    from spacy.tokens import Doc

    sentences = workload_sentences(workload)
    words = sum(len(s) for s in sentences)
    vocab = next(iter(pipelines.values()))[0].vocab

    def pipe(nlp):
        return lambda docs: list(nlp.pipe(docs, batch_size=1000))

    calls = {precision: pipe(nlp) for precision, (nlp, _) in pipelines.items()}
    timings = timed_in_turn(calls, args.repeats, prepare=lambda: [Doc(vocab, words=s) for s in sentences])
    rows = []
    for precision, (nlp, warned) in pipelines.items():
        runner = nlp.get_pipe("elmo").runner
        row = {"workload": workload, "precision": precision, "runs": runner.precision}
        row.update(kernel=runner.choice.kernel, **timings[precision].summary(words))
        row.update(x_fp32=timings["fp32"].median_s / timings[precision].median_s, fallback_warnings=warned)
        rows.append(row)
    return rows


def precisions_section(report: dict) -> List[str]:
    cap, label = report["capped"], report.get("label")
    title = f"capped at {cap}, simulating a lesser CPU's kernels" if cap else "uncapped"
    kept = "runs_s" in report["rows"][0]  # results from before the suite kept no runs: medians of 5 rounds
    rounds = len(report["rows"][0]["runs_s"]) if kept else 5
    command = report.get("command") or "python bench/kernels.py precisions" + (f" --cap {cap}" if cap else "") + (
        f" --label {label}" if label else ""
    )
    title = f"{label}, {title}" if label else title
    lines = [
        f"### Each precision against fp32 through `nlp.pipe`, {title} ({report['date']})",
        "",
        f"Machine: {report['machine']}. Weights: {weights_named(report)}; the `elmo` component alone, token cache "
        f"off; the precisions' pipelines in one process, timed in turn on the same docs, median of {rounds} rounds "
        f"after a warm-up{SPREAD if kept else ''}; each load from an empty user cache. "
        f"Command: `{command}`.",
        "",
        "| workload | precision | runs (kernel) | words/s | x fp32 | warning at load |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in report["rows"]:
        warned = "yes: " + r["fallback_warnings"][0][:140] + "..." if r["fallback_warnings"] else "-"
        speed = with_spread(f"{r['words_per_s']:,.1f}", r.get("spread"))
        lines.append(
            f"| {r['workload']} | {r['precision']} | {r['runs']} ({r['kernel']}) | {speed} | "
            f"**{r['x_fp32']:.2f}x** | {warned} |"
        )
    return lines


def weights_named(report: dict) -> str:
    weights = report.get("weights")
    if weights is None or Path(weights).name == "peer-full-bilm":
        return "full-size random weights (93.6M parameters, the peer's, converted)"
    return f"`{Path(weights).name}`"


def with_spread(figure: str, spread) -> str:
    return figure + (f" ({spread:.0%})" if spread is not None else "")


# --- int8 -----------------------------------------------------------------------------------------


def measure_int8(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    weight = torch.randn(*INT8_SHAPE) * 0.05
    ms, spread = {}, {}
    with torch.inference_mode():
        for rows in args.rows:
            figures = time_int8_kernels(weight, rows, args.repeats)
            ms[str(rows)] = {name: f if isinstance(f, str) else 1000 * f.median_s for name, f in figures.items()}
            spread[str(rows)] = {name: f.spread for name, f in figures.items() if not isinstance(f, str)}
    engine = torch.backends.quantized.engine
    return {"machine": machine(args.threads), "engine": engine, "repeats": args.repeats, "ms": ms, "spread": spread}


def int8_calls(weight, rows: int) -> dict:
    """Each kernel's call on ``rows`` rows of activations."""
    import torch

    from spacy_elmo.kernels import quantized

    x = torch.randn(rows, weight.shape[1])
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    calls = {"fp32 a @ w.t()": lambda: x @ weight.t(), "fp32 nn.Linear": lambda: linear(x)}
    for kernel in quantized.INT8_KERNELS.values():
        values, _ = quantized.quantize_rows(x, kernel.operand)
        packed = quantized.quantize_weight(weight, kernel)
        calls[kernel.title] = lambda values=values, packed=packed: quantized.channel_scaled_sums(values, packed)
    with warnings.catch_warnings():  # torch.ao's deprecation: it stays here as the reference it was
        warnings.simplefilter("ignore")
        dynamic = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, torch.qint8)
    calls["fbgemm dynamic int8 Linear (batch-dependent)"] = lambda: dynamic(x)
    return calls


def time_int8_kernels(weight, rows: int, repeats: int) -> dict:
    """kernel -> its Timing, or why this torch or CPU refused it. The first call of each is its
    warm-up; the kernels that ran are then timed in turn."""
    calls, refused = int8_calls(weight, rows), {}
    for name, call in list(calls.items()):
        try:
            call()
        except RuntimeError as err:
            refused[name] = f"refused: {str(err).splitlines()[0][:80]}"
            del calls[name]
    timings = timed_in_turn(calls, repeats, warmup=0)
    return {name: timings.get(name) or refused[name] for name in [*calls, *refused]}


def int8_section(report: dict) -> List[str]:
    cap = report["capped"]
    rows = list(report["ms"])
    spreads = report.get("spread", {})
    timed = (
        f"median of {report['repeats']} calls after a warm-up, the kernels timed in turn{SPREAD}"
        if "repeats" in report
        else "mean of 20 calls after a warm-up"
    )
    command = report.get("command") or "python bench/kernels.py int8" + (f" --cap {cap}" if cap else "")
    lines = [
        f"### int8 kernels against fp32, {'capped at ' + cap if cap else 'uncapped'} ({report['date']})",
        "",
        f"Machine: {report['machine']}; quantized engine {report['engine']}. A 16384 x 512 weight (the full-size "
        f"model's LSTM input projection), ms per call, {timed}. Command: `{command}`.",
        "",
        "| kernel | " + " | ".join(f"{n} row{'s' if n != '1' else ''}" for n in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for kernel in report["ms"][rows[0]]:
        cells = [int8_cell(report["ms"][n][kernel], spreads.get(n, {}).get(kernel)) for n in rows]
        lines.append(f"| {kernel} | " + " | ".join(cells) + " |")
    return lines


def int8_cell(ms, spread) -> str:
    return ms if isinstance(ms, str) else with_spread(f"{ms:.2f}", spread)


# --- both -----------------------------------------------------------------------------------------


def render(command: str, report: dict) -> None:
    name = result_name(
        "precisions-cpu" if command == "precisions" else "int8-cpu", report.get("label"), report["capped"]
    )
    lines = precisions_section(report) if command == "precisions" else int8_section(report)
    write_section(f"kernels:{name}", [*lines, ""])


def print_summary(command: str, report: dict) -> None:
    if command == "precisions":
        for r in report["rows"]:
            print(
                f"{r['workload']:>15} {r['precision']}: runs {r['runs']:4} {r['words_per_s']:9.1f} words/s "
                f"{r['x_fp32']:.2f}x"
            )
        return
    for rows, times in report["ms"].items():
        print(rows, {k: round(v, 3) if isinstance(v, float) else v for k, v in times.items()})


if __name__ == "__main__":
    main()
