"""Where a call's time goes on a CUDA GPU: torch.profiler over the elmo component through
`nlp.pipe`, the host's share against the GPU's.

    python bench/profile_gpu.py PEER_DIR --label after [--precisions fp32 bf16] [--workloads 1 64 1000 10000]
        [--max-batch-tokens 4096] [--graph-tokens 256] [--python] [--syncs]

For each workload (1, 64, 1,000 or 10,000 sentences, as bench_gpu.py) and precision: one warm-up pass,
three timed (the fastest kept), then one profiled pass. Reports the timed and the profiled pass's
wall time, the GPU's busy time (the sum of its kernels' and copies' durations: one stream, so they
do not overlap), the host's share (the wall time the GPU spent idle, waiting for the host), kernel
launches, host-device synchronizations, and the top operators by GPU time and by host time. Writes
bench/results/profile-gpu-LABEL.json and prints a table. Uses only the public API (but
``--graph-tokens``, which sets ``gpu_graphs.MOST_TOKENS``), so it profiles any version of the
package on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench_peer import converted_weights, workload_sentences

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OUT = ROOT / "bench" / "out"
TOP = 12


def profile(
    weights: Path, sentences: list, precision: str, max_batch_tokens: int, python: bool = False, syncs: bool = False
) -> dict:
    import spacy
    import torch
    from spacy.tokens import Doc
    from thinc.api import set_gpu_allocator
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    set_gpu_allocator("pytorch")
    spacy.require_gpu()
    nlp = spacy.blank("en")
    config = {"weights": str(weights), "set_vector_hooks": False, "precision": precision}
    nlp.add_pipe("elmo", config={**config, "max_batch_tokens": max_batch_tokens})
    nlp.initialize()
    nlp.get_pipe("elmo").bilm.token_cache.capacity = 0

    def one_pass() -> float:
        docs = [Doc(nlp.vocab, words=s) for s in sentences]
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in nlp.pipe(docs, batch_size=1000):
            pass
        torch.cuda.synchronize()
        return time.perf_counter() - start

    one_pass()
    unprofiled = min(one_pass() for _ in range(3))
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wall = one_pass()
    report = {"unprofiled_s": unprofiled, "profiled_s": wall, **summarize(prof, wall)}
    report["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 1e6
    if python:
        report["python_top"] = python_profile(one_pass)
    if syncs:
        report["sync_sites"] = sync_sites(one_pass)
    return report


def sync_sites(one_pass) -> list:
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


def python_profile(one_pass) -> list:
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


def summarize(prof, wall: float) -> dict:
    """GPU busy time, launches, syncs and the top operators from a finished profile."""
    events = prof.key_averages()

    def device_us(event) -> float:
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))

    gpu = [e for e in events if "cuda" in str(getattr(e, "device_type", "")).lower() and device_us(e) > 0]
    busy = sum(device_us(e) for e in gpu) / 1e6
    host = {e.key: e for e in events}
    launches = sum(
        e.count for name, e in host.items() if name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx")
    )
    syncs = sum(e.count for name, e in host.items() if "Synchronize" in name)
    copies = sum(e.count for name, e in host.items() if name.startswith("cudaMemcpy"))
    by_gpu = sorted(gpu, key=device_us, reverse=True)[:TOP]
    by_host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP]
    return {
        "gpu_busy_s": busy,
        "host_share": max(0.0, 1 - busy / wall),
        "kernel_launches": launches,
        "syncs": syncs,
        "memcpy_calls": copies,
        "graph_launches": sum(e.count for name, e in host.items() if "GraphLaunch" in name),
        "top_gpu": [{"name": e.key[:90], "count": e.count, "ms": device_us(e) / 1e3} for e in by_gpu],
        "top_host": [{"name": e.key[:90], "count": e.count, "ms": e.self_cpu_time_total / 1e3} for e in by_host],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", type=Path, help="what ../shared/tools/peer-allennlp/setup.sh built (its weights)")
    parser.add_argument("--label", default="after")
    parser.add_argument("--precisions", nargs="+", default=["fp32"])
    parser.add_argument("--workloads", nargs="+", default=["1", "64", "1000"])
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument("--graph-tokens", type=int, help="replay CUDA graphs for calls up to this many tokens alone")
    parser.add_argument("--python", action="store_true", help="also profile the host's Python over one pass")
    parser.add_argument("--syncs", action="store_true", help="also list where a pass waits for the GPU")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        if spec.get("graph_tokens") is not None:
            from spacy_elmo.network import gpu_graphs

            gpu_graphs.MOST_TOKENS = spec["graph_tokens"]
        sentences = json.loads(Path(spec["sentences"]).read_text())
        arguments = (Path(spec["weights"]), sentences, spec["precision"], spec["budget"], spec["python"])
        print(json.dumps(profile(*arguments, syncs=spec.get("syncs", False))))
        return
    weights = converted_weights(args.peer)
    report = {"label": args.label, "max_batch_tokens": args.max_batch_tokens, "graph_tokens": args.graph_tokens}
    report["rows"] = []
    names = {"1": "1 sentence", "64": "64 sentences", "1000": "1,000 sentences", "10000": "10,000 sentences"}
    OUT.mkdir(parents=True, exist_ok=True)
    for workload in args.workloads:
        sentences = workload_sentences(names[workload])
        sentences_file = OUT / f"profile-{workload}.json"
        sentences_file.write_text(json.dumps(sentences))
        for precision in args.precisions:
            spec = {"weights": str(weights), "sentences": str(sentences_file), "precision": precision}
            spec.update(budget=args.max_batch_tokens, graph_tokens=args.graph_tokens, python=args.python)
            spec.update(syncs=args.syncs)
            row = {"workload": names[workload], "precision": precision, **run_worker(spec)}
            row["words"] = sum(len(s) for s in sentences)
            report["rows"].append(row)
            print(line(row), flush=True)
            RESULTS.mkdir(parents=True, exist_ok=True)  # after every row: a run cut short keeps what it measured
            (RESULTS / f"profile-gpu-{args.label}.json").write_text(json.dumps(report, indent=1))


def run_worker(spec: dict) -> dict:
    import subprocess

    done = subprocess.run([sys.executable, __file__, "x", "--worker", json.dumps(spec)], capture_output=True, text=True)
    if done.returncode:
        return {"failed": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def line(row: dict) -> str:
    head = f"{row['workload']:>16} {row['precision']}:"
    if "failed" in row:
        return f"{head} FAILED {row['failed'][-800:]}"
    top = "; ".join(f"{e['name'][:48]} {e['ms']:.1f} ms x{e['count']}" for e in row["top_gpu"][:4])
    host = "; ".join(f"{e['name'][:40]} {e['ms']:.1f} ms" for e in row["top_host"][:4])
    speed, wall, busy = row["words"] / row["unprofiled_s"], row["profiled_s"] * 1e3, row["gpu_busy_s"] * 1e3
    return (
        f"{head} {speed:,.0f} words/s unprofiled; profiled pass {wall:.1f} ms, "
        f"GPU busy {busy:.1f} ms (host share {row['host_share']:.0%}), {row['kernel_launches']} launches, "
        f"{row['graph_launches']} graph launches, {row['syncs']} syncs, {row['memcpy_calls']} memcpy, "
        f"peak GPU {row.get('peak_gpu_mb', 0):,.0f} MB\n"
        f"    GPU: {top}\n    host: {host}"
        + "".join(f"\n    waits: x{e['count']} {e['where']}" for e in row.get("sync_sites", []))
        + "".join(
            f"\n    python: {e['cumulative_ms']:8.1f} ms, own {e['own_ms']:7.1f} ms, x{e['calls']} {e['function']}"
            for e in row.get("python_top", [])
        )
    )


if __name__ == "__main__":
    main()
