"""The elmo component on a CUDA GPU: its speed against AllenNLP's `Elmo` on the same GPU, where a
call's time goes, how far the GPU's fp32 lands from the CPU's, and the host's own steps of a call.

    python bench/gpu.py component PEER_DIR [--label L] [--workloads 1 64 1000 10000] [--precisions fp32 bf16 int8]
        [--configurations fp32:4096 ...] [--peer-workloads 1 64] [--repeats 7] [--graphs-before]
    python bench/gpu.py component --device cpu [--threads 2] --weights DIR --workloads 1 --precisions fp32 \
        [--in-process]                                                     # on a CPU, no peer
    python bench/gpu.py profile PEER_DIR --label after [--precisions fp32 bf16] [--workloads 1 64 1000 10000]
        [--max-batch-tokens 4096] [--graph-tokens 256] [--python] [--syncs]
    python bench/gpu.py drift [--device cpu [--threads 2]] [--sentences 64]
    python bench/gpu.py host [--sentences 1000] [--rounds 15]
    python bench/gpu.py SUB-COMMAND --render-only [--label L] [--device cpu]   # again from the results file

component: the `elmo` component through `nlp.pipe` after `spacy.require_gpu()` (spaCy's Doc handling
and the copy of every layer back to the host included), token cache off, on the peer's full-size
random weights, converted (or --weights DIR): in exact fp32 and the opt-in bf16 and int8 at two
token budgets (`max_batch_tokens`), each with its error against fp32 and a batch-invariance check (a
workload's first sentences embedded alone and inside it, compared bit for bit). The peer
(../shared/tools/peer-allennlp/setup.sh PEER_DIR) runs `Elmo` in batches of 64 on the same device.
Workloads: 1 sentence of the fixture, 64, 1,000 and 10,000 of real text (bench/suite/workloads.py).
Each configuration runs in its own process (its own peak GPU memory: torch's allocator, which
thinc's cupy arrays share under spaCy's "pytorch" allocator; --in-process: all in this one, for a
quick look). Writes bench/results/gpu[-LABEL].json and .png and the section "gpu:gpu[-LABEL]" of
BENCHMARKS.md; with --device cpu the same measurement on this CPU (peak RSS for memory), under the
name component-cpu[-LABEL].

profile: torch.profiler over `nlp.pipe`, the host's share against the GPU's. Per workload and
precision: one warm-up pass, three timed (the fastest kept), one profiled pass: the wall times, the
GPU's busy time (its kernels' and copies' durations: one stream, they do not overlap), the host's
share (the wall time the GPU sat idle), kernel and graph launches, syncs, copies, the top operators
by GPU and by host time; --python adds cProfile's top functions, --syncs where a pass waits for the
GPU. Only the package's public API (but --graph-tokens, which sets `gpu_stacks.MOST_TOKENS`), so it
profiles any version of the package put first on PYTHONPATH. Writes
bench/results/profile-gpu-LABEL.json and prints the table (no BENCHMARKS.md section). With
--device cpu, CPU activity only: the GPU's figures are absent (null), not zero.

drift: exact fp32 on the GPU against this machine's CPU (docs/determinism.md, docs/promises.md):
the fixture's clipped model on its sentences (the step loop on both) and a random unclipped `mini`
model on --sentences of real text, through the step loop and through the fused (cuDNN) path on the
GPU. Per layer: max |GPU - CPU| and the largest |CPU| value. Without a GPU, --device cpu checks
what the CPU promises instead: every sentence alone on one thread against all of them in one call
on --threads (all the CPUs by default), which must be bitwise equal (exits 1 where not). Writes
bench/results/drift-cuda.json (drift-cpu.json) and prints one JSON line per model.

host: the host's work in one call apart from the biLM's arithmetic, on the CPU (what a GPU waits
for when the host is slower than its kernels): each step on --sentences of held-out text as docs,
the steps run in turn round by round (so that each sees the heap as the others leave it), with
layers of the original model's width (L+1 = 3, 2P = 1,024). Writes bench/results/host-cpu.json and
the section "gpu:host-cpu".

Needs: component, profile and drift at their defaults need a CUDA GPU; the peer's column needs
PEER_DIR. The test suite runs each on the CPU (`--device cpu`, the fixture's weights, no peer).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from suite.peer import peer_folder, run_peer
from suite.report import (
    OUT,
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
from suite.timing import timed, timed_in_turn
from suite.workloads import (
    FIXTURE,
    converted_weights,
    error_against_fp32,
    load_sentences,
    peak_rss_mb,
    time_pipe,
    workload_named,
    workload_sentences,
)

# (precision, max_batch_tokens): the component's default token budget per biLM call, and a larger one
CONFIGURATIONS = [("fp32", 4096), ("fp32", 32768), ("bf16", 4096), ("bf16", 32768), ("int8", 32768)]
REPEATS = 7
INVARIANCE_SENTENCES = 8  # sentences of a workload embedded alone and compared with their rows in it
GRAPHS_BEFORE = 256  # the calls that replayed CUDA graphs before every call could: up to 256 tokens
TOP = 12  # operators a profile lists


# What every sub-command shares.


def elmo_pipeline(weights: str, precision: str, max_batch_tokens: int):
    """A blank English pipeline with the elmo component alone, its token cache off."""
    import spacy

    nlp = spacy.blank("en")
    settings = {"weights": weights, "set_vector_hooks": False, "precision": precision}
    nlp.add_pipe("elmo", config={**settings, "max_batch_tokens": max_batch_tokens})
    nlp.initialize()
    nlp.get_pipe("elmo").runner.token_cache.capacity = 0
    return nlp


def on_gpu_with_torch_allocator() -> None:
    """spaCy on the GPU, thinc's cupy arrays allocated by torch (one pool, one peak to read)."""
    import spacy
    from thinc.api import set_gpu_allocator

    set_gpu_allocator("pytorch")
    spacy.require_gpu()


def device_description(device: str, threads: int) -> dict:
    """The GPU, its driver, torch, CUDA and cuDNN; or on a CPU, the machine as every CPU result names it."""
    import subprocess

    import torch

    if device != "cuda":
        return {"cpu": machine(threads, "cpu"), "threads": threads, "torch": torch.__version__}
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "gpu": torch.cuda.get_device_name(0),
        "driver": driver or "unknown",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


def described(device: dict) -> str:
    if "gpu" not in device:
        return f"Machine: {device['cpu']}"
    return (
        f"Device: {device['gpu']}, driver {device['driver']}, torch {device['torch']}, CUDA {device['cuda']}, "
        f"cuDNN {device['cudnn']}"
    )


def weights_for(peer: Optional[Path], weights: Optional[str]) -> Path:
    """The weights ours runs on: the peer's, converted, or --weights (without a peer)."""
    if peer is not None and weights:
        raise SystemExit("Give PEER_DIR or --weights, not both: with the peer, ours runs on the peer's weights.")
    if peer is None and not weights:
        raise SystemExit("Give the peer's folder (PEER_DIR, from ../shared/tools/peer-allennlp/setup.sh) or --weights.")
    return Path(weights) if weights else converted_weights(peer)


def require_cuda(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("This measures on a CUDA GPU, and torch sees none here (--device cpu runs it on the CPU).")


def write_sentences(name: str, sentences: list) -> Path:
    """A workload's sentences as a file for a worker or the peer."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    path.write_text(json.dumps(sentences))
    return path


def workload_file(prefix: str, workload: str) -> Path:
    return write_sentences(f"{prefix}-{workload.split()[0].replace(',', '')}.json", workload_sentences(workload))


# component: ours against the peer.


def component_worker(spec: dict) -> dict:
    """One configuration, in this process: words/s of nlp.pipe over the workload, peak memory, error
    against fp32, and whether sentences alone get their bits in the batch."""
    import torch

    device = spec.get("device", "cuda")
    sync, extra = None, {}
    if device == "cuda":
        on_gpu_with_torch_allocator()
        sync, extra = torch.cuda.synchronize, {"graph_tokens": replay_graphs_up_to(spec.get("graph_tokens"))}
    else:
        torch.set_num_threads(spec["threads"])
    sentences = json.loads(Path(spec["sentences"]).read_text())
    nlp = elmo_pipeline(spec["weights"], spec["precision"], spec["max_batch_tokens"])
    runner = nlp.get_pipe("elmo").runner
    report = {**time_pipe(nlp, sentences, spec["repeats"], sync)}
    if device == "cuda":
        report["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 1e6
    else:
        report["peak_rss_mb"] = peak_rss_mb()
    report.update(runs=runner.precision, kernel=runner.choice.kernel, **extra)
    report["batch_invariant"] = batch_invariant(runner, sentences, spec["max_batch_tokens"])
    if spec["precision"] != "fp32":
        report["error"] = error_against_fp32(runner, sentences, spec["precision"], spec["max_batch_tokens"])
    return report


def replay_graphs_up_to(tokens: Optional[int]) -> int:
    """Calls of up to ``tokens`` tokens replay CUDA graphs (None: the package's limit); 256 is
    the limit before every call could replay one (``--graphs-before``). Returns the limit."""
    from spacy_elmo.kernels import gpu_stacks

    if tokens is not None:
        gpu_stacks.MOST_TOKENS = tokens
    return gpu_stacks.MOST_TOKENS


def batch_invariant(runner, sentences: list, max_batch_tokens: int) -> dict:
    """Of the first ``INVARIANCE_SENTENCES`` sentences, how many get bitwise the same layers alone
    as inside the whole workload, through ``runner`` (the component's)."""
    import numpy as np

    from spacy_elmo import embed_sentences

    together = embed_sentences(runner, sentences, max_batch_tokens=max_batch_tokens)
    checked = sentences[:INVARIANCE_SENTENCES]
    same = sum(
        bool(np.array_equal(embed_sentences(runner, [sentence])[0], together[i])) for i, sentence in enumerate(checked)
    )
    return {"checked": len(checked), "bitwise_equal": same}


def in_a_worker(sub_command: str, spec: dict, in_process: bool = False) -> dict:
    """A worker's result, or why it failed (the run goes on with the next configuration); with
    ``in_process``, this process's (a quick run: its peak memory is the whole run's)."""
    if in_process:
        return {"component": component_worker, "profile": profile_worker}[sub_command](spec)
    try:
        return run_worker(__file__, spec, arguments=[sub_command])
    except SystemExit as failure:
        return {"failed": str(failure)[-3000:]}


def peer_side(peer: Optional[Path], sentences_file: Path, repeats: int, device: str, threads: int) -> Optional[dict]:
    """The peer's result on a workload (None: no peer in this run)."""
    if peer is None:
        return None
    try:  # on a GPU the peer's host side runs on one thread, as before
        return run_peer(peer, sentences_file, "plain", repeats, 1 if device == "cuda" else threads, device=device)
    except SystemExit as failure:
        return {"failed": str(failure)[-3000:]}


def run_component(args: argparse.Namespace, name: str, command: str) -> None:
    """Every workload and configuration (each at each graph limit), writing the outputs after each
    row (a run cut short keeps what it measured)."""
    require_cuda(args.device)
    peer = peer_folder(args.peer)
    weights = weights_for(peer, args.weights)
    report: dict = {"device": device_description(args.device, args.threads), "date": time.strftime("%Y-%m-%d")}
    report.update(repeats=args.repeats, command=command, weights="peer" if peer else str(weights), rows=[])
    report.update({"label": args.label} if args.label else {})
    report.update({"in_process": True} if args.in_process else {})
    limits = [GRAPHS_BEFORE, None] if args.graphs_before else [None]
    for workload in [workload_named(count) for count in args.workloads]:
        sentences_file = workload_file("gpu" if args.device == "cuda" else "component-cpu", workload)
        runs_peer = args.peer_workloads is None or workload in [workload_named(c) for c in args.peer_workloads]
        theirs = peer_side(peer, sentences_file, args.repeats, args.device, args.threads) if runs_peer else None
        for (precision, budget), graph_tokens in itertools.product(configurations(args), limits):
            spec = {"weights": str(weights), "sentences": str(sentences_file), "precision": precision}
            spec.update(max_batch_tokens=budget, repeats=args.repeats, graph_tokens=graph_tokens)
            spec.update(device=args.device, threads=args.threads)
            mine = in_a_worker("component", spec, args.in_process)
            row = {"workload": workload, "precision": precision, "max_batch_tokens": budget}
            row.update(ours=mine, peer=theirs, measured=time.strftime("%Y-%m-%d %H:%M"))
            if "words_per_s" in mine and theirs and "words_per_s" in theirs:
                row["ratio"] = mine["words_per_s"] / theirs["words_per_s"]
            report["rows"].append(row)
            print(component_summary(row), flush=True)
            write_results(name, report)
            write_component_outputs(report, name)


def configurations(args: argparse.Namespace) -> list:
    chosen = [c for c in CONFIGURATIONS if c[0] in args.precisions]
    if args.configurations:
        chosen = [c for c in chosen if f"{c[0]}:{c[1]}" in args.configurations]
    if not chosen:
        raise SystemExit("No configuration left: --precisions and --configurations exclude every one.")
    return chosen


def component_summary(row: dict) -> str:
    mine, theirs = row["ours"], row["peer"] or {}
    head = f"{row['workload']:>16} {row['precision']} budget {row['max_batch_tokens']:>5}"
    head += f" graphs up to {mine['graph_tokens']} tokens:" if "graph_tokens" in mine else ":"
    if "failed" in mine:
        return f"{head} ours FAILED: {mine['failed'][-600:]}"
    peer = f"{theirs['words_per_s']:10.1f}" if "words_per_s" in theirs else "  (none)"
    ratio = f" -> {row['ratio']:.2f}x" if "ratio" in row else ""
    invariant = mine["batch_invariant"]
    return (
        f"{head} ours {mine['words_per_s']:10.1f} words/s ({peak_mb(mine)} MB), AllenNLP {peer}{ratio}; "
        f"batch-invariant {invariant['bitwise_equal']}/{invariant['checked']}"
    )


def peak_mb(figures: Optional[dict]) -> str:
    """Peak GPU memory on a GPU, peak RSS on a CPU ("-" where none was recorded)."""
    figures = figures or {}
    peak = figures.get("peak_gpu_mb", figures.get("peak_rss_mb"))
    return "-" if peak is None else f"{peak:,.0f}"


def write_component_outputs(report: dict, name: str) -> None:
    plot_component(report, name)
    write_section(f"gpu:{name}", component_lines(report, name))


def plot_component(report: dict, name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if "words_per_s" in r["ours"]]
    labels = [f"{r['workload']}\n{r['precision']}, {r['max_batch_tokens']}\n{graphs_label(r['ours'])}" for r in rows]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    positions = range(len(rows))
    ax.bar([p - 0.2 for p in positions], [r["ours"]["words_per_s"] for r in rows], width=0.4, label="elmo component")
    peer = [(r["peer"] or {}).get("words_per_s", 0) for r in rows]
    ax.bar([p + 0.2 for p in positions], peer, width=0.4, label="AllenNLP Elmo (fp32, batches of 64)")
    ax.set_xticks(list(positions), labels, fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("words/s (log scale)")
    device = report["device"]
    where = device.get("gpu") or device["cpu"]
    ax.set_title(f"elmo component vs AllenNLP Elmo on {where} (torch {device['torch']})", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, figure_path(name))


def component_lines(report: dict, name: str) -> list:
    device = report["device"]
    on_gpu = "gpu" in device
    measured = ", ".join(sorted({r["measured"] for r in report["rows"]}))
    weights = report.get("weights", "peer")
    peak_source = "Peak GPU memory: torch's allocator" if on_gpu else "Peak memory: the process's peak RSS"
    processes = "all in one process" if report.get("in_process") else "each configuration in its own process"
    lines = [
        f"### On a {'GPU' if on_gpu else 'CPU'}: the component against the peer ({report['date']})",
        "",
        f"{described(device)}. "
        + (
            "Full-size random weights (93.6M parameters, clipping on) from ../shared/tools/peer-allennlp, converted "
            "for ours"
            if weights == "peer"
            else f"Weights: {weights}, no peer"
        )
        + "; ours is the `elmo` component through `nlp.pipe`"
        + (" after `spacy.require_gpu()`" if on_gpu else "")
        + ", token cache off, each layer copied back to the host; the peer `Elmo` (fp32) in batches of 64 on the "
        "same device. budget: the component's `max_batch_tokens` (4096 is the default). words/s: median of "
        f"{report.get('repeats', REPEATS)} runs after a warm-up (beside it the slowest and the fastest run's), "
        f"{processes}. {peak_source}. "
        "Batch-invariant: of the workload's first sentences, how many get bitwise the same layers alone as inside "
        f"it. Rows measured {measured}; a row's two sides ran in the same run. Command: "
        f"`{report.get('command', f'python bench/gpu.py component PEER_DIR{label_option(name)}')}`.",
        "",
        f"| workload | precision | budget | graphs | ours (words/s) | ours, slowest-fastest run | AllenNLP (words/s) | "
        f"AllenNLP, slowest-fastest run | ratio | ours peak {'GPU' if on_gpu else 'RSS'} MB | AllenNLP peak "
        f"{'GPU' if on_gpu else 'RSS'} MB | batch-invariant | error vs fp32 (layers 0 / 1 / 2) |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    lines += [component_row(row) for row in report["rows"]]
    return lines + ["", figure_link(name), ""]


def label_option(name: str) -> str:
    """The --label a results file's name carries (results from before the command was recorded)."""
    label = name.partition("-")[2]
    return f" --label {label}" if label else ""


def component_row(row: dict) -> str:
    mine, theirs = row["ours"], row["peer"] or {}
    if "failed" in mine:
        return f"| {row['workload']} | {row['precision']} | {row['max_batch_tokens']} | | failed | | | | | | | | |"
    error = " / ".join(f"{e['max_abs']:.1e}, cos {e['min_cosine']:.5f}" for e in mine.get("error", []))
    invariant = mine["batch_invariant"]
    peer_rate = f"{theirs['words_per_s']:,.0f}" if "words_per_s" in theirs else "-"
    ratio = f"**{row['ratio']:.2f}x**" if "ratio" in row else "-"
    return (
        f"| {row['workload']} | {mine['runs']} ({mine['kernel']}) | {row['max_batch_tokens']} | "
        f"{graphs_label(mine)} | {mine['words_per_s']:,.0f} | {run_range(mine)} | {peer_rate} | "
        f"{run_range(theirs)} | {ratio} | {peak_mb(mine)} | {peak_mb(theirs) if theirs else '-'} | "
        f"{invariant['bitwise_equal']}/{invariant['checked']} | {error or '-'} |"
    )


def run_range(figures: dict) -> str:
    """words/s of the slowest and the fastest timed run ("-" where a run kept only the median);
    the peer's older results call the runs times_s."""
    runs = figures.get("runs_s", figures.get("times_s"))
    if not runs or "words" not in figures:
        return "-"
    return f"{figures['words'] / max(runs):,.0f}-{figures['words'] / min(runs):,.0f}"


def graphs_label(mine: dict) -> str:
    tokens = mine.get("graph_tokens")
    return "-" if tokens is None else f"up to {tokens:,} tokens"


# profile: where a call's time goes.


def profile_worker(spec: dict) -> dict:
    """Profile one workload and precision in this process (see the module's docstring)."""
    import torch
    from spacy.tokens import Doc
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    on_gpu = spec.get("device", "cuda") == "cuda"
    if on_gpu:
        on_gpu_with_torch_allocator()
        if spec.get("graph_tokens") is not None:
            replay_graphs_up_to(spec["graph_tokens"])
    else:
        torch.set_num_threads(spec["threads"])
    sentences = json.loads(Path(spec["sentences"]).read_text())
    nlp = elmo_pipeline(spec["weights"], spec["precision"], spec["budget"])

    def one_pass(docs) -> None:
        for _ in nlp.pipe(docs, batch_size=1000):
            pass

    def fresh_docs() -> list:
        return [Doc(nlp.vocab, words=s) for s in sentences]

    sync = {"sync": torch.cuda.synchronize} if on_gpu else {}
    unprofiled = timed(one_pass, 3, warmup=1, prepare=fresh_docs, **sync).best_s
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_gpu else [ProfilerActivity.CPU]
    with torch_profile(activities=activities) as prof:
        wall = timed(one_pass, 1, warmup=0, prepare=fresh_docs, **sync).best_s
    report = {"unprofiled_s": unprofiled, "profiled_s": wall, **summarize(prof, wall, on_gpu)}
    report["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 1e6 if on_gpu else None
    report["peak_rss_mb"] = peak_rss_mb()

    def whole_pass() -> None:  # as a caller sees it: the docs made, the pass, the wait for the GPU
        one_pass(fresh_docs())
        if on_gpu:
            torch.cuda.synchronize()

    if spec.get("python"):
        report["python_top"] = python_profile(whole_pass)
    if spec.get("syncs") and on_gpu:
        report["sync_sites"] = sync_sites(whole_pass)
    return report


def sync_sites(one_pass: Callable[[], None]) -> list:
    """Where one more pass makes the host wait for the GPU, by the innermost frame of spacy_elmo or
    thinc: torch's sync debug mode warns at each synchronizing call it knows (``.item()``, ``nonzero``,
    copies to the host). Uploads staged through pageable memory also wait, unseen by it: the
    profile's ``Memcpy HtoD (Pageable -> Device)`` rows count those."""
    import collections
    import traceback
    import warnings

    import torch

    sites: collections.Counter = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message):
            return
        ours = [f for f in traceback.extract_stack()[:-1] if "spacy_elmo" in f.filename or "thinc" in f.filename]
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} {ours[-1].name}" if ours else f"{filename}:{lineno}"
        sites[where] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            one_pass()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [{"where": where, "count": count} for where, count in sites.most_common()]


def python_profile(one_pass: Callable[[], None]) -> list:
    """The host's Python functions over one more pass (cProfile), by cumulative time: where the
    host's share goes, which torch's profiler does not show."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(one_pass)
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive, own s, cumulative s, callers)
    top = sorted(stats.items(), key=lambda item: item[1][3], reverse=True)[: 3 * TOP]
    return [
        {
            "function": f"{Path(file).name}:{line} {name}",
            "calls": calls,
            "own_ms": own * 1e3,
            "cumulative_ms": cum * 1e3,
        }
        for (file, line, name), (calls, _, own, cum, _) in top
    ]


def summarize(prof, wall: float, on_gpu: bool) -> dict:
    """GPU busy time, launches, syncs and the top operators from a finished profile; without the
    GPU's activity its figures are None (absent, not zero)."""
    events = prof.key_averages()

    def device_us(event) -> float:
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))

    by_host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP]
    report = {"top_host": [{"name": e.key[:90], "count": e.count, "ms": e.self_cpu_time_total / 1e3} for e in by_host]}
    if not on_gpu:
        gpu_figures = ("gpu_busy_s", "host_share", "kernel_launches", "syncs", "memcpy_calls", "graph_launches")
        return {**dict.fromkeys(gpu_figures), "top_gpu": None, **report}
    gpu = [e for e in events if "cuda" in str(getattr(e, "device_type", "")).lower() and device_us(e) > 0]
    busy = sum(device_us(e) for e in gpu) / 1e6
    host = {e.key: e for e in events}
    launches = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx")
    return {
        "gpu_busy_s": busy,
        "host_share": max(0.0, 1 - busy / wall),
        "kernel_launches": sum(e.count for name, e in host.items() if name in launches),
        "syncs": sum(e.count for name, e in host.items() if "Synchronize" in name),
        "memcpy_calls": sum(e.count for name, e in host.items() if name.startswith("cudaMemcpy")),
        "graph_launches": sum(e.count for name, e in host.items() if "GraphLaunch" in name),
        "top_gpu": [
            {"name": e.key[:90], "count": e.count, "ms": device_us(e) / 1e3} for e in busiest_on_gpu(gpu, device_us)
        ],
        **report,
    }


def busiest_on_gpu(events: list, device_us: Callable) -> list:
    return sorted(events, key=device_us, reverse=True)[:TOP]


def run_profile(args: argparse.Namespace, name: str) -> None:
    require_cuda(args.device)
    if args.syncs and args.device != "cuda":
        raise SystemExit("--syncs lists where a pass waits for the GPU: it needs --device cuda.")
    weights = weights_for(peer_folder(args.peer), args.weights)
    report = {"label": args.label, "max_batch_tokens": args.max_batch_tokens, "graph_tokens": args.graph_tokens}
    report.update(device=device_description(args.device, args.threads), date=time.strftime("%Y-%m-%d"), rows=[])
    for workload in [workload_named(count) for count in args.workloads]:
        sentences = workload_sentences(workload)
        sentences_file = write_sentences(f"profile-{workload.split()[0].replace(',', '')}.json", sentences)
        for precision in args.precisions:
            spec = {"weights": str(weights), "sentences": str(sentences_file), "precision": precision}
            spec.update(budget=args.max_batch_tokens, graph_tokens=args.graph_tokens, python=args.python)
            spec.update(syncs=args.syncs, device=args.device, threads=args.threads)
            row = {"workload": workload, "precision": precision, **in_a_worker("profile", spec, args.in_process)}
            row["words"] = sum(len(s) for s in sentences)
            report["rows"].append(row)
            print(profile_line(row), flush=True)
            write_results(name, report)  # after every row: a run cut short keeps what it measured


def profile_line(row: dict) -> str:
    head = f"{row['workload']:>16} {row['precision']}:"
    if "failed" in row:
        return f"{head} FAILED {row['failed'][-800:]}"
    speed, wall = row["words"] / row["unprofiled_s"], row["profiled_s"] * 1e3
    host = "; ".join(f"{e['name'][:40]} {e['ms']:.1f} ms" for e in row["top_host"][:4])
    if row.get("gpu_busy_s") is None:
        gpu_part, top = "no GPU activity recorded (a CPU run)", ""
    else:
        top = "\n    GPU: " + "; ".join(f"{e['name'][:48]} {e['ms']:.1f} ms x{e['count']}" for e in row["top_gpu"][:4])
        gpu_part = (
            f"GPU busy {row['gpu_busy_s'] * 1e3:.1f} ms (host share {row['host_share']:.0%}), "
            f"{row['kernel_launches']} launches, {row['graph_launches']} graph launches, {row['syncs']} syncs, "
            f"{row['memcpy_calls']} memcpy, peak GPU {peak_mb({'peak_gpu_mb': row.get('peak_gpu_mb')})} MB"
        )
    return (
        f"{head} {speed:,.0f} words/s unprofiled; profiled pass {wall:.1f} ms, {gpu_part}{top}\n    host: {host}"
        + "".join(f"\n    waits: x{e['count']} {e['where']}" for e in row.get("sync_sites", []))
        + "".join(
            f"\n    python: {e['cumulative_ms']:8.1f} ms, own {e['own_ms']:7.1f} ms, x{e['calls']} {e['function']}"
            for e in row.get("python_top", [])
        )
    )


# drift: exact fp32 on the GPU against the CPU.


def gpu_drift(bilm, sentences: list, path: str = "auto") -> list:
    """Per layer: max |cuda - cpu| over every token, and max |cpu|."""
    from spacy_elmo import BiLMRunner, embed_sentences

    on_cpu = embed_sentences(BiLMRunner(bilm.cpu(), lstm_path="step", warm=False), sentences)
    on_gpu = embed_sentences(BiLMRunner(bilm.cuda(), lstm_path=path, warm=False), sentences)
    bilm.cpu()
    return layer_drift(on_cpu, on_gpu)


def cpu_drift(bilm, sentences: list, threads: int) -> list:
    """Per layer: max |each sentence alone on one thread - all of them in one call on ``threads``|
    (and max |value|): 0 where the CPU's promises hold."""
    import torch

    from spacy_elmo import BiLMRunner, embed_sentences

    runner = BiLMRunner(bilm, lstm_path="step", warm=False)
    torch.set_num_threads(threads)
    together = embed_sentences(runner, sentences)
    torch.set_num_threads(1)
    alone = [embed_sentences(runner, [sentence])[0] for sentence in sentences]
    torch.set_num_threads(threads)
    return layer_drift(together, alone)


def layer_drift(reference: list, other: list) -> list:
    import numpy as np

    reference, other = np.concatenate(reference, axis=1), np.concatenate(other, axis=1)
    return [
        {"max_abs_diff": float(np.abs(other[j] - reference[j]).max()), "max_abs": float(np.abs(reference[j]).max())}
        for j in range(reference.shape[0])
    ]


def run_drift(args: argparse.Namespace, name: str) -> None:
    import torch

    from spacy_elmo import BiLM, BiLMConfig, import_original

    require_cuda(args.device)
    fixture = import_original(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5")
    streams = json.loads((FIXTURE / "sentences.json").read_text())
    fixture_sentences = [s.split() for s in streams[0]]
    torch.manual_seed(0)
    mini = BiLM(BiLMConfig.preset("mini", cell_clip=None, proj_clip=None)).eval()
    sentences = load_sentences(args.sentences)[0]
    report = {"device": device_description(args.device, args.threads), "date": time.strftime("%Y-%m-%d")}
    report["models"] = []
    if args.device == "cuda":
        measured = [("fixture (clipped)", gpu_drift(fixture, fixture_sentences))]
        for path in ("step", "fused"):
            measured.append((f"random mini, unclipped, GPU {path}", gpu_drift(mini, sentences, path)))
    else:
        measured = [("fixture (clipped)", cpu_drift(fixture, fixture_sentences, args.threads))]
        model = f"random mini, unclipped, {len(sentences)} sentences"
        measured.append((model, cpu_drift(mini, sentences, args.threads)))
    for model, layers in measured:
        report["models"].append({"model": model, "layers": layers})
        print(json.dumps({"model": model, "layers": layers}))
    write_results(name, report)
    if args.device == "cpu" and any(layer["max_abs_diff"] for m in report["models"] for layer in m["layers"]):
        raise SystemExit("On the CPU a sentence alone on one thread is not bitwise what it is in a batch.")


# host: the host's steps of one call.


SHAPE = (3, 1024)  # the original model's L+1 layers of 2P
PAGE_BYTES = 4096


def host_steps(sentences: list) -> Dict[str, Callable[[], object]]:
    """Each measured step as a function of nothing, over docs of ``sentences``."""
    import numpy as np
    import spacy
    import torch
    from spacy.tokens import Doc

    from spacy_elmo.kernels.gpu_stacks import Schedule
    from spacy_elmo.network.char_encoder import CharEncoder
    from spacy_elmo.network.chars import TokenIndexer
    from spacy_elmo.network.config import BiLMConfig
    from spacy_elmo.pipeline import sentence_runs
    from spacy_elmo.pipeline.mix_settings import MixSettings
    from spacy_elmo.pipeline.storage import Storage

    nlp = spacy.blank("en")
    docs = [Doc(nlp.vocab, words=sentence) for sentence in sentences]
    cut = sentence_runs.doc_segments
    segments = [segment for position, doc in enumerate(docs) for segment in cut(position, doc, 4096)]
    text = lambda token: token.text  # noqa: E731 (the component's ORTH reader)
    words = sentence_runs.segment_words(docs, segments, text)
    distinct = list(dict.fromkeys(token for sentence in words for token in ("<S>", *sentence, "</S>")))
    indexer = TokenIndexer()
    chars = indexer.encode(distinct)[0]
    encoder = CharEncoder(BiLMConfig.preset("small"))  # the original model's filters, widest 7
    rng = np.random.default_rng(0)
    layers = [rng.standard_normal((SHAPE[0], len(sentence), SHAPE[1]), dtype=np.float32) for sentence in words]
    storage, mix = Storage(), MixSettings.average(SHAPE[0])
    return {
        **placements(docs, segments, layers),
        "cut docs into sentences": lambda: [cut(position, doc, 4096) for position, doc in enumerate(docs)],
        "token strings (each doc's once)": lambda: sentence_runs.segment_words(docs, segments, text),
        "token strings (per token through the doc, before)": lambda: [
            tuple(text(docs[position][int(i)]) for i in indices) for position, indices in segments
        ],
        "char ids of the distinct tokens": lambda: indexer.encode(distinct),
        "cut their characters (NumPy, as the component does)": lambda: encoder.cut_characters(chars),
        "cut their characters (the same in torch, on the CPU)": lambda: encoder.trim(torch.from_numpy(chars)),
        "lane schedule (GPU, host tables)": lambda: Schedule.build([len(s) + 2 for s in words]),
        "keep each doc's layers (set_annotations)": lambda: [
            storage.keep(doc, layers[i], mix, with_tensor=False) for i, doc in enumerate(docs)
        ],
    }


def placements(docs: list, segments: list, layers: list) -> Dict[str, Callable[[], object]]:
    """The placement steps: the layers (one array per segment) into fresh per-doc arrays, with and
    without first writing once to each of their pages, against one copy of the same bytes."""
    import numpy as np

    from spacy_elmo.pipeline import sentence_runs

    packed = np.concatenate(layers, axis=1)
    touched = np.empty_like(packed)
    halves = [sentence_layers.astype(np.float16) for sentence_layers in layers]
    kept: list = []

    def fresh_outputs(dtype: type = np.float32) -> list:
        kept[:] = []  # the last round's arrays go as the new ones come, as docs a caller let go
        kept.append(sentence_runs.empty_outputs(docs, segments, SHAPE, dtype))
        return kept[-1]

    def one_buffer() -> list:  # tried, not kept: one allocation for all the docs, a view each
        kept[:] = []
        sizes = [SHAPE[0] * len(doc) * SHAPE[1] for doc in docs]
        buffer = np.empty(sum(sizes), dtype=np.float32)
        ends = np.cumsum(sizes)
        kept.append(
            [buffer[end - size : end].reshape(SHAPE[0], -1, SHAPE[1]) for end, size in zip(ends, sizes, strict=True)]
        )
        return kept[-1]

    def place(outputs: list, source: list = layers) -> list:
        for segment, sentence_layers in zip(segments, source, strict=True):
            sentence_runs._place(outputs, segment, sentence_layers)
        return outputs

    def touch(outputs: list) -> list:  # one write a page, keeping its value
        for array in outputs:
            array.reshape(-1).view(np.uint32)[:: PAGE_BYTES // 4] |= 0
        return outputs

    return {
        "place layers into fresh arrays per doc": lambda: place(fresh_outputs()),
        "one copy of the same bytes into touched memory": lambda: np.copyto(touched, packed),
        "touch each page of fresh arrays per doc": lambda: touch(fresh_outputs()),
        "touch each page of fresh arrays, then place": lambda: place(touch(fresh_outputs())),
        "place into one buffer for all the docs (tried, not kept)": lambda: place(one_buffer()),
        "float16 kept: placed as float32, each doc's array rounded": lambda: [
            array.astype(np.float16) for array in place(fresh_outputs())
        ],
        "float16 kept: float16 layers placed (as from a GPU)": lambda: place(fresh_outputs(np.float16), halves),
    }


def run_host(args: argparse.Namespace, name: str, command: str) -> dict:
    import torch

    sentences = load_sentences(args.sentences)[0]
    # no warm-up round: every round is kept, as the first records were (the heap's state is the point)
    timings = timed_in_turn(host_steps(sentences), args.rounds, warmup=0)
    report = {"machine": machine(torch.get_num_threads(), "cpu"), "date": time.strftime("%Y-%m-%d")}
    report.update(sentences=len(sentences), words=sum(len(s) for s in sentences), rounds=args.rounds, command=command)
    report["steps"] = {step: timing.summary() for step, timing in timings.items()}
    write_results(name, report)
    return report


def host_rows(report: dict) -> list:
    """(step, fastest ms, median ms, spread or None), from this script's results or the first ones (ms)."""
    if "steps" in report:
        return [(step, t["best_s"] * 1e3, t["median_s"] * 1e3, t.get("spread")) for step, t in report["steps"].items()]
    return [(step, ms["fastest"], ms["median"], None) for step, ms in report["ms"].items()]


def host_lines(report: dict) -> list:
    date = f" ({report['date']})" if "date" in report else ""
    return [
        f"### The host's work in one call{date}",
        "",
        f"Machine: {report.get('machine', report.get('cpu'))}. {report['sentences']:,} sentences "
        f"({report['words']:,} words) of held-out text as docs; each step run {report['rounds']} times, the steps in "
        "turn round by round, layers of the original model's width. Spread: (slowest - fastest) / median. Command: "
        f"`{report.get('command', 'python bench/gpu.py host')}`.",
        "",
        "| step | fastest (ms) | median (ms) | spread |",
        "|---|---:|---:|---:|",
        *(
            f"| {step} | {fastest:.1f} | {median:.1f} | {'-' if spread is None else f'{spread:.0%}'} |"
            for step, fastest, median, spread in host_rows(report)
        ),
        "",
    ]


# The command line.


def parse_arguments(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--render-only", action="store_true", help="the section (or table) again from the results")
    shared.add_argument("--worker", help=argparse.SUPPRESS)
    on_device = argparse.ArgumentParser(add_help=False, parents=[shared])
    on_device.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    on_device.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch's, on a CPU")
    pipe = argparse.ArgumentParser(add_help=False, parents=[on_device])
    pipe.add_argument("peer", nargs="?", help="the folder setup.sh built (venv/ and full/); none: ours alone")
    pipe.add_argument("--weights", help="ours on these weights, without a peer (default: the peer's, converted)")
    pipe.add_argument(
        "--in-process",
        action="store_true",
        help="configurations in this process, not one each (peak memory: the run's)",
    )
    component = commands.add_parser("component", parents=[pipe], help="ours against the peer on one device")
    component.add_argument("--label", help="this run's results under their own name (gpu-LABEL), e.g. h100")
    component.add_argument("--workloads", nargs="+", default=["1", "64", "1000"], help="of: 1, 64, 1000, 10000")
    component.add_argument("--peer-workloads", nargs="+", help="the workloads the peer runs too (default: all)")
    component.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"], help="of: fp32, bf16, int8")
    component.add_argument("--configurations", nargs="+", help="PRECISION:BUDGET pairs to run (default: all)")
    component.add_argument("--repeats", type=int, default=REPEATS, help="timed runs after the warm-up")
    component.add_argument(
        "--graphs-before", action="store_true", help=f"also with CUDA graphs up to {GRAPHS_BEFORE} tokens alone"
    )
    profile = commands.add_parser("profile", parents=[pipe], help="torch.profiler over nlp.pipe")
    profile.add_argument("--label", default="after", help="names the results (profile-gpu-LABEL)")
    profile.add_argument("--precisions", nargs="+", default=["fp32"])
    profile.add_argument("--workloads", nargs="+", default=["1", "64", "1000"])
    profile.add_argument("--max-batch-tokens", type=int, default=4096)
    profile.add_argument("--graph-tokens", type=int, help="replay CUDA graphs for calls up to this many tokens alone")
    profile.add_argument("--python", action="store_true", help="also profile the host's Python over one pass")
    profile.add_argument("--syncs", action="store_true", help="also list where a pass waits for the GPU")
    drift = commands.add_parser("drift", parents=[on_device], help="fp32 on the GPU against the CPU")
    drift.add_argument("--sentences", type=int, default=64, help="sentences of real text for the mini model")
    host = commands.add_parser("host", parents=[shared], help="the host's steps of one call (CPU)")
    host.add_argument("--sentences", type=int, default=1000, help="sentences of held-out text")
    host.add_argument("--rounds", type=int, default=15, help="runs of each step")
    return parser.parse_args(argv)


def results_name(args: argparse.Namespace) -> str:
    on_cpu = getattr(args, "device", "cpu") == "cpu"
    if args.command == "component":
        return result_name("component-cpu" if on_cpu else "gpu", args.label)
    if args.command == "profile":
        return result_name("profile-cpu" if on_cpu else "profile-gpu", args.label)
    if args.command == "drift":
        return "drift-cpu" if on_cpu else "drift-cuda"
    return "host-cpu"


def render(command: str, name: str) -> None:
    """A sub-command's outputs again from its results file, measuring nothing."""
    report = read_results(name)
    if command == "component":
        write_component_outputs(report, name)
    elif command == "host":
        write_section(f"gpu:{name}", host_lines(report))
    elif command == "profile":
        print("\n".join(profile_line(row) for row in report["rows"]))
    else:
        print("\n".join(json.dumps(model) for model in report["models"]))
    print(f"Rendered {name} from its results.")


def main() -> None:
    argv = sys.argv[1:]
    args = parse_arguments(argv)
    if args.worker:
        worker = {"component": component_worker, "profile": profile_worker}[args.command]
        worker_reply(worker(json.loads(args.worker)))
        return
    name = results_name(args)
    if args.render_only:
        render(args.command, name)
        return
    command = command_line("gpu.py", peer=getattr(args, "peer", None))
    if args.command == "component":
        run_component(args, name, command)
    elif args.command == "profile":
        run_profile(args, name)
    elif args.command == "drift":
        run_drift(args, name)
    else:
        report = run_host(args, name, command)
        for step, fastest, median, _ in host_rows(report):
            print(f"{step:>60}: fastest {fastest:8.1f} ms, median {median:8.1f} ms")
        write_section(f"gpu:{name}", host_lines(report))
    print(f"Wrote bench/results/{name}.json" + ("" if args.command in ("profile", "drift") else f", gpu:{name}"))


if __name__ == "__main__":
    main()
