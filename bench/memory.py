"""Memory: over a long run, and what a doc keeps.

`long-run`: RSS of a process that sends tens of thousands of docs through the elmo component,
`nlp(text)` one at a time and then `nlp.pipe`, against the same docs through spaCy alone (a blank
pipeline with the sentencizer: its string store and vocabulary grow with every new word), each in its
own process. Lines are those of shared/data/corpus/train.txt, in order (new words keep arriving, as
in service); RSS, the string store's size and the component's caches every --every docs.

`storage`: by the elmo component's ``store`` and ``store_dtype`` settings, bytes per token of
``Doc.to_bytes`` and peak RSS of ``nlp.pipe`` with the docs kept. Random `small`-preset weights
(L+1 = 3 layers of 2P = 256), vector hooks on (the default); the first --lines non-empty lines of
shared/data/corpus/valid.txt; each configuration in its own process (its own peak RSS).

    python bench/memory.py long-run                       # fixture weights, 20,000 docs each way
    python bench/memory.py long-run --docs 60000
    python bench/memory.py long-run --onednn-cache 64     # a third run: oneDNN's primitive cache capped at 64
    python bench/memory.py storage [--lines 500]
    python bench/memory.py long-run --render-only         # (or storage) the section again, from the results
    python bench/memory.py --render-only                  # both sections, from the results there are

CPU only; no peer. Writes bench/results/memory-cpu.json and .png and the BENCHMARKS.md section
"memory:memory-cpu" (long-run); bench/results/storage-cpu.json and "memory:storage-cpu" (storage).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

from suite.report import (
    RESULTS,
    command_line,
    figure_link,
    figure_path,
    machine,
    read_results,
    result_name,
    run_worker,
    save_figure,
    worker_reply,
    write_results,
    write_section,
)
from suite.timing import timed
from suite.workloads import FIXTURE, corpus_lines, peak_rss_mb, random_weights

STORES = ("layers", "mix", "tensor")
DTYPES = ("float32", "float16")
PRESET = "small"
FIXTURE_WEIGHTS = "the fixture's ELMo weights"
BATCH = 25  # docs per nlp.pipe batch in `storage`: small, so that what the docs keep outweighs a batch's working memory


def blank_pipeline(elmo_config: Optional[Dict] = None):
    """blank English + sentencizer, + elmo with ``elmo_config`` where given."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    if elmo_config is not None:
        nlp.add_pipe("elmo", config=elmo_config)
        nlp.initialize()
    return nlp


# --- long-run ----------------------------------------------------------------------------------


def rss_mb() -> float:
    """This process's resident memory now."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def training_lines(count: int) -> List[str]:
    """The first ``count`` lines of the training text (again from the start where it has fewer)."""
    found = corpus_lines("train.txt", count)
    return (found * (count // len(found) + 1))[:count]


def long_run_worker(spec: Dict) -> Dict:
    """RSS and sizes every ``every`` docs: first ``nlp(text)`` one at a time, then ``nlp.pipe``."""
    import torch

    torch.set_num_threads(spec["threads"])
    nlp = blank_pipeline({"weights": spec["weights"]} if spec["with_elmo"] else None)
    texts, every = training_lines(spec["docs"]), spec["every"]
    curve = [sample(nlp, 0, "start")]
    for i, text in enumerate(texts, 1):
        nlp(text)
        if i % every == 0:
            curve.append(sample(nlp, i, "nlp(text)"))
    for i, _ in enumerate(nlp.pipe(texts, batch_size=64), 1):
        if i % every == 0:
            curve.append(sample(nlp, spec["docs"] + i, "nlp.pipe"))
    cache = os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    return {"with_elmo": spec["with_elmo"], "onednn_cache": int(cache) if cache else None, "curve": curve}


def sample(nlp, docs: int, phase: str) -> Dict:
    point = {"docs": docs, "phase": phase, "rss_mb": rss_mb(), "strings": len(nlp.vocab.strings)}
    if "elmo" in nlp.pipe_names:
        elmo = nlp.get_pipe("elmo")
        point["token_cache_rows"] = len(elmo.runner.token_cache)
        point["sentence_cache_tokens"] = elmo._sentences._tokens
    return point


def long_run(args) -> Dict:
    variants = [(False, {}), (True, {})]
    if args.onednn_cache is not None:
        variants.append((True, {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(args.onednn_cache)}))
    spec = {"task": "long-run", "docs": args.docs, "every": args.every, "threads": args.threads}
    spec["weights"] = str(args.weights)
    runs = []
    for with_elmo, env in variants:
        runs.append(run_worker(__file__, {**spec, "with_elmo": with_elmo}, env={**os.environ, **env}))
        for phase in ("nlp(text)", "nlp.pipe"):
            print(label(runs[-1]), phase, [round(x, 1) for x in growth(runs[-1]["curve"], phase)], flush=True)
    return {
        "machine": machine(args.threads),
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("memory.py"),
        "docs": args.docs,
        "every": args.every,
        "weights": FIXTURE_WEIGHTS if Path(args.weights) == FIXTURE else f"the weights in {args.weights}",
        "runs": runs,
    }


def label(run: Dict) -> str:
    if not run["with_elmo"]:
        return "spaCy alone (blank + sentencizer)"
    cache = run.get("onednn_cache")
    return "spaCy + elmo" + (f", ONEDNN_PRIMITIVE_CACHE_CAPACITY={cache}" if cache is not None else "")


def growth(curve: List[Dict], phase: str) -> tuple:
    """RSS at the phase's first and last sample, and over its second half."""
    points = [p for p in curve if p["phase"] == phase]
    half = points[len(points) // 2]
    return points[0]["rss_mb"], points[-1]["rss_mb"], points[-1]["rss_mb"] - half["rss_mb"]


def plot_long_run(report: Dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for run in report["runs"]:
        curve = run["curve"]
        ax.plot([p["docs"] for p in curve], [p["rss_mb"] for p in curve], label=label(run))
    ax.axvline(report["docs"], color="#888888", linewidth=1, linestyle=":")
    ax.text(report["docs"], ax.get_ylim()[0], " nlp.pipe from here", fontsize=7, va="bottom")
    ax.set_xlabel("docs processed (nlp(text) one at a time, then nlp.pipe)")
    ax.set_ylabel("RSS (MB)")
    ax.set_title(f"memory over a long run, {report['machine'].split(' (')[0]}", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def long_run_command(report: Dict) -> str:
    """The run's command line (older results did not keep it: rebuilt from their figures)."""
    if report.get("command"):
        return report["command"]
    caps = [run["onednn_cache"] for run in report["runs"] if run.get("onednn_cache") is not None]
    return f"python bench/memory.py long-run --docs {report['docs']}" + (f" --onednn-cache {caps[0]}" if caps else "")


def upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def long_run_markdown(report: Dict, name: str) -> List[str]:
    lines = [
        f"### Memory over a long run ({report['date']})",
        "",
        f"Machine: {report['machine']}. {upper_first(report.get('weights', FIXTURE_WEIGHTS))}; "
        f"{report['docs']:,} lines of shared/data/corpus/train.txt through `nlp(text)` one at a time, then the same "
        "lines through `nlp.pipe` (batches of 64); each pipeline in its own process; RSS every "
        f"{report.get('every', 500):,} docs. spaCy alone is a blank English pipeline with the sentencizer: its "
        f"string store grows with every new word. Command: `{long_run_command(report)}`.",
        "",
        "| pipeline | phase | RSS first -> last (MB) | growth over the phase's second half (MB) | strings at the end |",
        "|---|---|---|---:|---:|",
    ]
    for run in report["runs"]:
        for phase in ("nlp(text)", "nlp.pipe"):
            first, last, late = growth(run["curve"], phase)
            strings = [p["strings"] for p in run["curve"] if p["phase"] == phase][-1]
            lines.append(f"| {label(run)} | {phase} | {first:,.0f} -> {last:,.0f} | {late:+.1f} | {strings:,} |")
    lines += [
        "",
        "oneDNN compiles and keeps a kernel for each matmul shape it meets; the component runs its matmuls at a few "
        "row counts (`bucket_rows` in `spacy_elmo/kernels/onednn.py`), so docs of new lengths bring no new shapes once "
        "the common ones are met, and RSS levels off.",
    ]
    if any(run.get("onednn_cache") is not None for run in report["runs"]):
        lines += [
            "",
            "The third run caps oneDNN's primitive cache (`ONEDNN_PRIMITIVE_CACHE_CAPACITY`, read when torch starts): "
            "oneDNN keeps one compiled kernel for each matmul shape it meets, up to 1,024 by default, and docs of "
            "new lengths bring new shapes.",
        ]
    return lines + ["", figure_link(name), ""]


# --- storage -----------------------------------------------------------------------------------


def storage_worker(spec: Dict) -> Dict:
    """In a process of its own: the pipeline over the lines with every doc kept; what they keep."""
    config = {"weights": spec["weights"], "store": spec["store"], "store_dtype": spec["dtype"]}
    nlp = blank_pipeline(config)
    lines = corpus_lines("valid.txt", spec["lines"])
    docs: list = []
    timing = timed(lambda: docs.extend(nlp.pipe(lines, batch_size=BATCH)), repeats=1, warmup=0)
    peak_mb = peak_rss_mb()
    tokens = sum(len(doc) for doc in docs)
    kept = [array for doc in docs for array in (doc._.elmo_data, doc._.elmo_vectors, doc.tensor) if array is not None]
    total = sum(len(doc.to_bytes()) for doc in docs)
    with nlp.select_pipes(disable=["elmo"]):
        plain = sum(len(doc.to_bytes()) for doc in nlp.pipe(lines))
    return {
        "store": spec["store"],
        "dtype": spec["dtype"],
        "tokens": tokens,
        "seconds": timing.median_s,
        "peak_rss_mb": peak_mb,
        "kept_mb": sum(array.nbytes for array in kept) / 2**20,
        "bytes_per_token": total / tokens,
        "elmo_bytes_per_token": (total - plain) / tokens,
    }


def storage(args) -> Dict:
    weights = random_weights(PRESET)  # once, before the workers read it
    rows = []
    for store in args.stores:
        for dtype in args.dtypes:
            spec = {"task": "storage", "store": store, "dtype": dtype, "lines": args.lines, "weights": str(weights)}
            rows.append(run_worker(__file__, spec))
            row = rows[-1]
            print(
                f"{store:>6} {dtype}: {row['elmo_bytes_per_token']:8.1f} B/token added "
                f"({row['bytes_per_token']:.1f} in all), arrays kept {row['kept_mb']:.1f} MB, "
                f"peak RSS {row['peak_rss_mb']:.0f} MB",
                flush=True,
            )
    return {
        "machine": machine(os.cpu_count() or 1),
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("memory.py"),
        "preset": PRESET,
        "lines": args.lines,
        "tokens": rows[0]["tokens"],
        "rows": rows,
    }


def storage_markdown(report: Dict, name: str) -> List[str]:
    from spacy_elmo.pipeline.storage import bytes_per_token

    command = report.get("command") or "python bench/memory.py storage"
    lines = [
        f"### What a doc keeps: the `store` settings ({report['date']})",
        "",
        f"Machine: {report['machine']}. `{report['preset']}` preset (L+1 = 3 layers of 2P = 256), random weights, "
        f"vector hooks on; {report['lines']} lines of shared/data/corpus/valid.txt ({report['tokens']:,} tokens), "
        f"`nlp.pipe` (batches of {BATCH} docs) with every doc kept, each configuration in its own process. "
        "Bytes per token: of `Doc.to_bytes`, what the elmo component adds (over the same doc without it) and in "
        "all; formula: the arrays alone (`spacy_elmo.pipeline.storage.bytes_per_token`), for this preset and for "
        f"the original model (3 x 1024). Command: `{command}`.",
        "",
        "| store | store_dtype | added B/token | formula | all B/token | original model, formula | arrays kept (MB) "
        "| peak RSS (MB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        store, dtype = row["store"], row["dtype"]
        lines.append(
            f"| `{store}` | {dtype} | {row['elmo_bytes_per_token']:,.0f} | {bytes_per_token(store, dtype, 3, 256):,} | "
            f"{row['bytes_per_token']:,.0f} | {bytes_per_token(store, dtype, 3, 1024):,} | {row['kept_mb']:.1f} | "
            f"{row['peak_rss_mb']:,.0f} |"
        )
    return lines + [
        "",
        "Peak RSS is mostly the biLM and a batch's working memory; what the kept docs add is the arrays column. At "
        "the original model's sizes a million tokens keep 16 GB (`layers`, float32), 4 GB (`mix` or `tensor`) or 2 GB "
        "(float16).",
        "",
        "`layers` also writes the mixed vectors to `doc.tensor` while vector hooks are on: 3 + 1 rows of 2P per "
        "token (12 KB + 4 KB for the original model in float32). `tensor` keeps no per-token user data; "
        "DocBin does not save `doc.tensor`.",
        "",
    ]


# --- the command line --------------------------------------------------------------------------

COMMANDS = {
    # sub-command: (results kind, measure, plot or None, section)
    "long-run": ("memory-cpu", long_run, plot_long_run, long_run_markdown),
    "storage": ("storage-cpu", storage, None, storage_markdown),
}
WORKERS = {"long-run": long_run_worker, "storage": storage_worker}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--render-only", action="store_true", help="every sub-command's section whose results exist")
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("long-run", help="RSS over tens of thousands of docs, against spaCy alone")
    run.add_argument("--docs", type=int, default=20000, help="docs each way (nlp(text), then nlp.pipe)")
    run.add_argument("--every", type=int, default=500, help="docs between two samples")
    run.add_argument("--threads", type=int, default=2)
    run.add_argument("--weights", type=Path, default=FIXTURE, help="biLM weights (default: the fixture's)")
    run.add_argument("--onednn-cache", type=int, help="also run with oneDNN's primitive cache capped at this size")
    keep = commands.add_parser("storage", help="what a doc keeps, by store and store_dtype")
    keep.add_argument("--lines", type=int, default=500)
    keep.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    keep.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    for sub in (run, keep):
        sub.add_argument("--render-only", action="store_true", help="the section again from the results file")
    args = parser.parse_args()
    if args.command is None and not (args.worker or args.render_only):
        parser.error("choose a sub-command: long-run or storage (or --render-only, every section)")
    return args


def render(command: str, report: Dict) -> None:
    kind, _, plot, markdown = COMMANDS[command]
    name = result_name(kind)
    if plot is not None:
        plot(report, figure_path(name))
    write_section(f"memory:{name}", markdown(report, name))


def main() -> None:
    args = parse_arguments()
    if args.worker:
        spec = json.loads(args.worker)
        worker_reply(WORKERS[spec["task"]](spec))
        return
    if args.command is None:  # --render-only, every section whose results exist
        for command, (kind, _, _, _) in COMMANDS.items():
            if (RESULTS / f"{result_name(kind)}.json").is_file():
                render(command, read_results(result_name(kind)))
        return
    kind, measure, _, _ = COMMANDS[args.command]
    if args.render_only:
        render(args.command, read_results(result_name(kind)))
        return
    report = measure(args)
    write_results(result_name(kind), report)
    render(args.command, report)


if __name__ == "__main__":
    main()
