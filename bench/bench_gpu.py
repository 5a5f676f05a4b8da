"""The elmo component on a CUDA GPU against AllenNLP's `Elmo` on the same GPU, same weights, same
sentences, same run.

    python bench/bench_gpu.py PEER_DIR          # PEER_DIR: what ../shared/tools/peer-allennlp/setup.sh built

Workloads: one sentence of 20 words (the fixture's, as in bench_peer.py), 64 and 1,000 sentences of
real text (shared/data/corpus/valid.txt, spaCy's tokenizer). Ours is the `elmo` component through
`nlp.pipe` after `spacy.require_gpu()` (spaCy's Doc handling and the copy of every layer back to the
host included) on the peer's full-size random weights, converted: in exact fp32 and in the opt-in
bf16 and int8, each with its error against fp32 and a batch-invariance check (sentences of the
workload embedded alone and inside it, compared bit for bit). The peer runs `Elmo` in batches of 64
on the same GPU. Each configuration runs in its own process (its own peak GPU memory: torch's
allocator, which thinc's cupy arrays share under spaCy's "pytorch" allocator). Writes
bench/results/gpu.json and .png and the GPU section of BENCHMARKS.md, naming the GPU, its driver,
torch and CUDA.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from bench_peer import converted_weights, error_against_fp32, run_peer, time_pipe, workload_sentences
from report import write_section

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"

WORKLOADS = ["1 sentence", "64 sentences", "1,000 sentences", "10,000 sentences"]
# (precision, max_batch_tokens): the component's default token budget per biLM call, and a larger one
CONFIGURATIONS = [("fp32", 4096), ("fp32", 32768), ("bf16", 4096), ("bf16", 32768), ("int8", 32768)]
REPEATS = 7
INVARIANCE_SENTENCES = 8  # sentences of a workload embedded alone and compared with their rows in it


def ours(spec: dict) -> dict:
    """One configuration, in this process, on the GPU: words/s of nlp.pipe over the workload, peak
    GPU memory, error against fp32, and whether sentences alone get their bits in the batch."""
    import spacy
    import torch
    from thinc.api import set_gpu_allocator

    set_gpu_allocator("pytorch")
    spacy.require_gpu()
    step_tiles = json.loads(os.environ.get("BENCH_FP32_STEP_TILES", "null"))
    if step_tiles:
        use_fp32_step_tiles(step_tiles)
    graph_tokens = replay_graphs_up_to(spec.get("graph_tokens"))
    sentences = json.loads(Path(spec["sentences"]).read_text())
    nlp = spacy.blank("en")
    settings = {"weights": spec["weights"], "set_vector_hooks": False, "precision": spec["precision"]}
    nlp.add_pipe("elmo", config={**settings, "max_batch_tokens": spec["max_batch_tokens"]})
    nlp.initialize()
    bilm = nlp.get_pipe("elmo").bilm
    bilm.token_cache.capacity = 0
    report = {
        **time_pipe(nlp, sentences, spec["repeats"], torch.cuda.synchronize),
        "peak_gpu_mb": torch.cuda.max_memory_allocated() / 1e6,
        "runs": bilm.precision,
        "kernel": bilm.precision_choice.kernel,
        "batch_invariant": batch_invariant(bilm, sentences, spec["max_batch_tokens"]),
        "graph_tokens": graph_tokens,
    }
    if step_tiles:
        report["fp32_step_tiles"] = step_tiles
    if spec["precision"] != "fp32":
        report["error"] = error_against_fp32(bilm, sentences, spec["precision"], spec["max_batch_tokens"])
    return report


def use_fp32_step_tiles(tiles: dict) -> None:
    """Run the fp32 step kernels with ``tiles`` ({"recurrent": (rows, cols, depth, warps, stages,
    piece), "projection": ...}, bench_fp32_steps.py's choice: the same bits) instead of the package's."""
    import dataclasses

    from spacy_elmo.kernels import triton_ops

    chosen = {kernel: triton_ops.Tiles(*option) for kernel, option in tiles.items()}
    triton_ops.TILES["fp32"] = dataclasses.replace(triton_ops.TILES["fp32"], **chosen)
    triton_ops._ops.cache_clear()


def replay_graphs_up_to(tokens: Optional[int]) -> int:
    """Calls of up to ``tokens`` tokens replay CUDA graphs (None: the package's limit); 256 is
    the limit before every call could replay one (``--graphs-before``). Returns the limit."""
    from spacy_elmo.network import gpu_graphs

    if tokens is not None:
        gpu_graphs.MOST_TOKENS = tokens
    return gpu_graphs.MOST_TOKENS


def batch_invariant(bilm, sentences: list, max_batch_tokens: int) -> dict:
    """Of the first ``INVARIANCE_SENTENCES`` sentences, how many get bitwise the same layers alone
    as inside the whole workload."""
    import numpy as np

    from spacy_elmo import embed_sentences

    together = embed_sentences(bilm, sentences, max_batch_tokens=max_batch_tokens)
    checked = sentences[:INVARIANCE_SENTENCES]
    same = sum(
        bool(np.array_equal(embed_sentences(bilm, [sentence])[0], together[i])) for i, sentence in enumerate(checked)
    )
    return {"checked": len(checked), "bitwise_equal": same}


def run_ours(spec: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
    if done.returncode:
        return {"failed": done.stderr[-3000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def device_description() -> dict:
    """The GPU, its driver, torch and CUDA, as this process sees them."""
    import torch

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


GRAPHS_BEFORE = 256  # the calls that replayed CUDA graphs before every call could: up to 256 tokens


def run_all(
    peer: Path,
    workloads: list,
    configurations: list = CONFIGURATIONS,
    repeats: int = REPEATS,
    graph_limits: Optional[list] = None,
    peer_workloads: Optional[list] = None,
) -> None:
    """Measure every workload and configuration (each at each of ``graph_limits``, None the
    package's), writing the outputs after each row (a run cut short keeps what it measured)."""
    weights = converted_weights(peer)
    OUT.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": device_description(), "date": time.strftime("%Y-%m-%d"), "repeats": repeats, "rows": []}
    for workload in workloads:
        sentences_file = OUT / f"gpu-{workload.split()[0].replace(',', '')}.json"
        sentences_file.write_text(json.dumps(workload_sentences(workload)))
        try:
            if peer_workloads is not None and workload not in peer_workloads:
                theirs = {"failed": "not run (--peer-workloads)"}
            else:
                theirs = run_peer(peer, sentences_file, "plain", repeats, threads=1, device="cuda")
        except SystemExit as failure:
            theirs = {"failed": str(failure)[-3000:]}
        for (precision, batch_tokens), graph_tokens in itertools.product(configurations, graph_limits or [None]):
            spec = {
                "weights": str(weights),
                "sentences": str(sentences_file),
                "precision": precision,
                "max_batch_tokens": batch_tokens,
                "repeats": repeats,
                "graph_tokens": graph_tokens,
            }
            mine = run_ours(spec)
            row = {"workload": workload, "precision": precision, "max_batch_tokens": batch_tokens}
            row.update(ours=mine, peer=theirs, measured=time.strftime("%Y-%m-%d %H:%M"))
            if "words_per_s" in mine and "words_per_s" in theirs:
                row["ratio"] = mine["words_per_s"] / theirs["words_per_s"]
            report["rows"].append(row)
            print(summary(row), flush=True)
            write_outputs(report)


def summary(row: dict) -> str:
    mine, theirs = row["ours"], row["peer"]
    head = f"{row['workload']:>16} {row['precision']} budget {row['max_batch_tokens']:>5}"
    head += f" graphs up to {mine['graph_tokens']} tokens:" if "graph_tokens" in mine else ":"
    if "failed" in mine:
        return f"{head} ours FAILED: {mine['failed'][-600:]}"
    peer = f"{theirs['words_per_s']:10.1f}" if "words_per_s" in theirs else "  (failed)"
    ratio = f" -> {row['ratio']:.2f}x" if "ratio" in row else ""
    invariant = mine["batch_invariant"]
    return (
        f"{head} ours {mine['words_per_s']:10.1f} words/s ({mine['peak_gpu_mb']:,.0f} MB), AllenNLP {peer}{ratio}; "
        f"batch-invariant {invariant['bitwise_equal']}/{invariant['checked']}"
    )


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / "gpu.json", report)
    plot(report, RESULTS / "gpu.png")
    update_markdown(report)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if "words_per_s" in r["ours"]]
    labels = [f"{r['workload']}\n{r['precision']}, {r['max_batch_tokens']}\n{graphs_label(r['ours'])}" for r in rows]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    positions = range(len(rows))
    ax.bar([p - 0.2 for p in positions], [r["ours"]["words_per_s"] for r in rows], width=0.4, label="elmo component")
    peer = [r["peer"].get("words_per_s", 0) for r in rows]
    ax.bar([p + 0.2 for p in positions], peer, width=0.4, label="AllenNLP Elmo (fp32, batches of 64)")
    ax.set_xticks(list(positions), labels, fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("words/s (log scale)")
    device = report["device"]
    ax.set_title(f"elmo component vs AllenNLP Elmo on {device['gpu']} (torch {device['torch']})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def update_markdown(report: dict) -> None:
    device = report["device"]
    measured = ", ".join(sorted({r["measured"] for r in report["rows"]}))
    lines = [
        f"### On a GPU: the component against the peer ({report['date']})",
        "",
        f"Device: {device['gpu']}, driver {device['driver']}, torch {device['torch']}, CUDA {device['cuda']}, cuDNN "
        f"{device['cudnn']}. Full-size random weights (93.6M parameters, clipping on) from "
        "../shared/tools/peer-allennlp, converted for ours; ours is the `elmo` component through `nlp.pipe` after "
        "`spacy.require_gpu()`, token cache off, each layer copied back to the host; the peer `Elmo` (fp32) in "
        "batches of 64 on the same GPU. budget: the component's `max_batch_tokens` (4096 is the default). words/s: "
        f"median of {report.get('repeats', REPEATS)} runs after a warm-up (beside it the slowest and the fastest "
        "run's), each configuration in its own process. "
        "Peak GPU memory: torch's "
        "allocator. Batch-invariant: of the workload's first sentences, how many get bitwise the same layers "
        f"alone as inside it. Rows measured {measured}; a row's two sides ran in the same run. Command: "
        "`python bench/bench_gpu.py PEER_DIR`.",
        "",
        "| workload | precision | budget | graphs | ours (words/s) | ours, slowest-fastest run | AllenNLP (words/s) | "
        "ratio | ours peak GPU MB | AllenNLP peak GPU MB | batch-invariant | error vs fp32 (layers 0 / 1 / 2) |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in report["rows"]:
        mine, theirs = r["ours"], r["peer"]
        if "failed" in mine:
            lines.append(f"| {r['workload']} | {r['precision']} | {r['max_batch_tokens']} | | failed | | | | | | | |")
            continue
        error = " / ".join(f"{e['max_abs']:.1e}, cos {e['min_cosine']:.5f}" for e in mine.get("error", []))
        invariant = mine["batch_invariant"]
        lines.append(
            f"| {r['workload']} | {mine['runs']} ({mine['kernel']}) | {r['max_batch_tokens']} | "
            f"{graphs_label(mine)} | {mine['words_per_s']:,.0f} | {spread(mine)} | "
            f"{theirs.get('words_per_s', 0):,.0f} | "
            f"**{r.get('ratio', 0):.2f}x** | "
            f"{mine['peak_gpu_mb']:,.0f} | {theirs.get('peak_gpu_mb', 0):,.0f} | "
            f"{invariant['bitwise_equal']}/{invariant['checked']} | {error or '-'} |"
        )
    lines += ["", "![on the GPU](bench/results/gpu.png)", ""]
    write_section("bench_gpu:cuda", lines)


def spread(mine: dict) -> str:
    """words/s of the slowest and the fastest timed run ("-" where a run kept only the median)."""
    runs = mine.get("runs_s")
    if not runs:
        return "-"
    return f"{mine['words'] / max(runs):,.0f}-{mine['words'] / min(runs):,.0f}"


def graphs_label(mine: dict) -> str:
    tokens = mine.get("graph_tokens")
    return "-" if tokens is None else f"up to {tokens:,} tokens"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", nargs="?", help="the folder setup.sh built (venv/ and full/)")
    parser.add_argument(
        "--workloads", nargs="+", default=["1", "64", "1000"], help="sentence counts: 1, 64, 1000, 10000"
    )
    parser.add_argument("--peer-workloads", nargs="+", help="the workloads the peer runs too (default: all)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"], help="of: fp32, bf16, int8")
    parser.add_argument(
        "--configurations", nargs="+", help="PRECISION:BUDGET pairs of CONFIGURATIONS to run (default: all)"
    )
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed runs after the warm-up")
    parser.add_argument(
        "--graphs-before",
        action="store_true",
        help=f"each configuration also with CUDA graphs for calls up to {GRAPHS_BEFORE} tokens alone, as before",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(ours(json.loads(args.worker))))
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py measures on a CUDA GPU, and torch sees none here.")
    if not args.peer or not (Path(args.peer) / "full").is_dir():
        raise SystemExit("Give the peer's folder: bash ../shared/tools/peer-allennlp/setup.sh PEER_DIR.")
    by_count = {w.split()[0].replace(",", ""): w for w in WORKLOADS}
    unknown = sorted(set(args.workloads) - set(by_count))
    if unknown:
        raise SystemExit(f"Unknown workloads {unknown}; choose sentence counts from {list(by_count)}.")
    configurations = [c for c in CONFIGURATIONS if c[0] in args.precisions]
    if args.configurations:
        configurations = [c for c in configurations if f"{c[0]}:{c[1]}" in args.configurations]
    workloads = [by_count[w] for w in by_count if w in args.workloads]
    limits = [GRAPHS_BEFORE, None] if args.graphs_before else None
    peer_workloads = [by_count[w] for w in args.peer_workloads if w in by_count] if args.peer_workloads else None
    run_all(Path(args.peer), workloads, configurations, args.repeats, limits, peer_workloads)
    print("Wrote BENCHMARKS.md and bench/results/gpu.json/.png")


if __name__ == "__main__":
    main()
