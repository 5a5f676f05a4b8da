"""Embedding a corpus with `python -m spacy_elmo embed`: in this process, and on a local Ray with 1
and 2 workers; words/s (per worker too), Ray's start-up cost, memory per worker, output size per
token (the HDF5 blocks, and the same vectors as Parquet), and a check that all outputs are equal.

    python bench/embed.py [--lines 400] [--peer PEER_DIR]
    python bench/embed.py --ways process --weights ../shared/fixtures/elmo-allennlp --lines 8  # a quick look
    python bench/embed.py --lines 10000 --peer PEER_DIR --gpu-id 0   # embed --gpu-id against nlp.pipe on a GPU
    python bench/embed.py --render-only [--gpu-id 0]                 # the section again, from the results

The pipeline: blank English + sentencizer + elmo with full-size weights (the peer's converted
random weights when --peer is given, else random `original`-preset weights, or --weights), built
once under bench/out. With --peer (../shared/tools/peer-allennlp/setup.sh PEER_DIR), AllenNLP's
`Elmo` runs the same sentences on the same weights in the same run, and the table gives ours
against it. Input: the first --lines lines of shared/data/corpus/valid.txt, in 8 blocks. Each way
runs in a fresh process, timed from its start to its end (loading the pipeline, and starting and
stopping Ray, included). Needs: Ray for the Ray ways (`--ways process` leaves it out), the peer's
venv for --peer, a CUDA GPU for --gpu-id. Writes bench/results/embed-cpu.json and the BENCHMARKS.md
section "embed:embed-cpu" (with --gpu-id: embed-gpu.json and "embed:embed-gpu").
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # a worker's wall time counts from here, before its heavy imports

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Optional  # noqa: E402

from suite.peer import peer_folder, run_peer  # noqa: E402
from suite.report import (  # noqa: E402
    OUT,
    command_line,
    machine,
    read_results,
    result_name,
    run_worker,
    worker_reply,
    write_results,
    write_section,
)
from suite.timing import timed_in_turn  # noqa: E402
from suite.workloads import converted_weights, corpus_lines, random_weights  # noqa: E402

WAYS = {
    "process": ("in this process", {}),
    "ray-1": ("Ray, 1 worker", {"ray": True, "workers": 1}),
    "ray-2": ("Ray, 2 workers", {"ray": True, "workers": 2}),
}


# --- what a worker process runs ----------------------------------------------------------------


def embed_worker(spec: Dict) -> Dict:
    """`embed` over the source into the output, from this process's start to its end."""
    import resource

    from spacy_elmo.corpus.embedding import EmbedSettings, Workers, embed_corpus

    settings = EmbedSettings(spec["pipeline"], block_lines=spec["block_lines"])
    report = embed_corpus(spec["source"], spec["output"], settings, Workers(**spec["workers"]), progress=False)
    return {
        "seconds": time.perf_counter() - STARTED,
        "computed": report.computed,
        "driver_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def pipe_worker(spec: Dict) -> Dict:
    """`nlp.pipe` over the source's lines on a GPU: the process's seconds, and those after loading."""
    import spacy

    spacy.require_gpu(spec["gpu_id"])
    nlp = spacy.load(spec["pipeline"])
    lines = corpus_file_lines(Path(spec["source"]))
    loaded = time.perf_counter()
    tokens = sum(len(doc) for doc in nlp.pipe(lines))
    done = time.perf_counter()
    return {"seconds": done - STARTED, "pipe_seconds": done - loaded, "tokens": tokens}


def ray_worker(spec: Dict) -> Dict:
    """A local Ray started (and a first task run), then stopped: each step's seconds, one of each."""
    import ray

    ray.init(include_dashboard=False)
    ray.get(ray.remote(lambda: 1).remote())
    started = time.perf_counter()
    ray.shutdown()
    return {"start_s": started - STARTED, "stop_s": time.perf_counter() - started}


WORKERS = {"embed": embed_worker, "pipe": pipe_worker, "ray": ray_worker}


# --- the ways ----------------------------------------------------------------------------------


def corpus_file_lines(path: Path) -> List[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def input_lines(count: int) -> List[str]:
    """The first ``count`` lines of the corpus's held-out text, then its test and training text."""
    lines: List[str] = []
    for name in ("valid.txt", "test.txt", "train.txt"):
        lines += corpus_lines(name)
        if len(lines) >= count:
            break
    return lines[:count]


def pipeline_dir(peer: Optional[Path], weights: Optional[Path]) -> Path:
    """blank English + sentencizer + elmo on the run's weights, built once under bench/out."""
    import spacy

    name = f"embed-pipeline-{weights.name}" if weights else "embed-pipeline-peer-weights" if peer else "embed-pipeline"
    target = OUT / name
    if not (target / "config.cfg").is_file():
        chosen = weights or (converted_weights(peer) if peer else random_weights("original"))
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        nlp.add_pipe("elmo", config={"weights": str(chosen)})
        nlp.initialize()
        nlp.to_disk(target)
    return target


def run_way(pipeline: Path, source: Path, output: Path, block_lines: int, workers: Dict) -> Dict:
    shutil.rmtree(output, ignore_errors=True)
    spec = {"source": str(source), "output": str(output), "pipeline": str(pipeline), "block_lines": block_lines}
    return run_worker(__file__, {"task": "embed", **spec, "workers": workers})


def summarize(name: str, result: Dict, workers: int) -> Dict:
    """Wall-clock figures, and the blocks' own: each worker's time in its blocks (the busiest bounds
    the run) against what came before and after (start-up, loading, Ray, the index)."""
    tokens = sum(figures["tokens"] for figures in result["computed"])
    peaks: Dict[int, float] = {}
    busy: Dict[int, float] = {}
    for figures in result["computed"]:
        peaks[figures["pid"]] = max(peaks.get(figures["pid"], 0.0), figures["peak_rss_mib"])
        busy[figures["pid"]] = busy.get(figures["pid"], 0.0) + figures["seconds"]
    return {
        "way": name,
        "workers": workers,
        "seconds": result["seconds"],
        "tokens": tokens,
        "words_per_s": tokens / result["seconds"],
        "words_per_s_per_worker": tokens / result["seconds"] / workers,
        "busiest_worker_block_seconds": max(busy.values()),
        "words_per_s_in_blocks": tokens / max(busy.values()),
        "words_per_s_in_blocks_per_worker": tokens / sum(busy.values()),
        "seconds_outside_blocks": result["seconds"] - max(busy.values()),
        "peak_rss_mib_per_worker": max(peaks.values()),
        "processes_that_embedded": len(peaks),
    }


def sizes(output: Path) -> Dict[str, float]:
    """Bytes per token: the HDF5 blocks as written, and the same vectors as Parquet (a list column per
    layer: each line's tokens' vectors), with and without compression."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spacy_elmo.corpus.output_folder import EmbeddedCorpus

    with EmbeddedCorpus(output) as corpus:
        arrays = [corpus[line] for line in range(len(corpus))]
        tokens = sum(array.shape[1] for array in arrays)
        hdf5 = sum((output / block["file"]).stat().st_size for block in corpus.index["blocks"])
    width = arrays[0].shape[2]
    columns = {
        f"layer_{k}": pa.array([array[k].tolist() for array in arrays], type=pa.list_(pa.list_(pa.float32(), width)))
        for k in range(arrays[0].shape[0])
    }
    result = {
        "tokens": tokens,
        "float32_bytes_per_token": float(np.prod(arrays[0].shape[::2]) * 4),
        "hdf5_blocks": hdf5 / tokens,
    }
    for compression in ("none", "snappy", "zstd"):
        path = OUT / f"embed-vectors-{compression}.parquet"
        pq.write_table(pa.table(columns), path, compression=compression)
        result[f"parquet_{compression}"] = path.stat().st_size / tokens
    result["hdf5_gzip"] = hdf5_gzip_size(arrays) / tokens
    return result


def hdf5_gzip_size(arrays: List) -> int:
    """The same datasets in one HDF5 file with gzip (level 4, one chunk per dataset): what
    compressing the blocks would save."""
    import h5py

    path = OUT / "embed-vectors-gzip.hdf5"
    with h5py.File(path, "w") as handle:
        for line, array in enumerate(arrays):
            handle.create_dataset(str(line), data=array, compression="gzip" if array.size else None)
    return path.stat().st_size


def peer_row(peer: Path, lines: List[str], ours: Dict) -> Dict:
    """AllenNLP's `Elmo` on the same sentences (as our pipeline cuts and tokenizes them), same weights,
    same threads, in its own process: words/s, the median of 3 runs after a warm-up, loading excluded;
    set against ours inside its blocks (loading excluded too; reading, spaCy and writing included)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    sentences = [[token.text for token in sent] for doc in nlp.pipe(lines) for sent in doc.sents]
    sentences_file = OUT / "embed-peer-sentences.json"
    sentences_file.write_text(json.dumps(sentences))
    result = run_peer(peer, sentences_file, "plain", 3, os.cpu_count() or 1)
    return {
        "peer_words_per_s": result["words_per_s"],
        "peer_words": sum(map(len, sentences)),
        "peer_threads": os.cpu_count() or 1,
        "ours_in_blocks_over_peer": ours["words_per_s_in_blocks"] / result["words_per_s"],
    }


def same_outputs(folders: List[Path]) -> bool:
    """Whether the output folders hold the same index and, bitwise, the same blocks."""
    import h5py
    import numpy as np

    def read(folder: Path) -> Dict:
        found = {"index": (folder / "index.json").read_text()}
        for path in sorted((folder / "blocks").glob("*.hdf5")):
            with h5py.File(path, "r") as handle:
                found.update({f"{path.name}/{k}": handle[k][()] for k in handle})
        return found

    first = read(folders[0])
    for other in map(read, folders[1:]):
        if first.keys() != other.keys() or not all(np.array_equal(first[k], other[k]) for k in first if k != "index"):
            return False
        if first["index"] != other["index"]:
            return False
    return True


# --- the runs ----------------------------------------------------------------------------------


def on_cpu(args, pipeline: Path, source: Path, lines: List[str]) -> Dict:
    block_lines = max(1, args.lines // 8)
    rows, folders = [], []
    for way in args.ways:
        name, workers = WAYS[way]
        folders.append(OUT / f"embed-{name.replace(' ', '-').replace(',', '')}")
        result = run_way(pipeline, source, folders[-1], block_lines, workers)
        rows.append(summarize(name, result, workers.get("workers", 1)))
        print(f"{name}: {rows[-1]['seconds']:.1f} s, {rows[-1]['words_per_s']:.0f} words/s", flush=True)
    ray = run_worker(__file__, {"task": "ray"}) if any(WAYS[way][1].get("ray") for way in args.ways) else None
    return {
        "machine": machine(os.cpu_count() or 1),
        "weights": weights_said(args),
        "peer": peer_row(args.peer, lines, rows[0]) if args.peer else None,
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("embed.py", peer=args.peer),
        "lines": args.lines,
        "block_lines": block_lines,
        "rows": rows,
        "ray_start_s": ray["start_s"] if ray else None,
        "ray_stop_s": ray["stop_s"] if ray else None,
        "bytes_per_token": sizes(folders[0]),
        "all_outputs_equal": same_outputs(folders) if len(folders) > 1 else None,
    }


def weights_said(args) -> str:
    if args.weights:
        return f"the weights in {args.weights}"
    return "the peer's full-size random weights, converted" if args.peer else "random original preset"


def on_gpu(args, pipeline: Path, source: Path) -> Dict:
    """`embed --gpu-id` against `nlp.pipe` of the same lines through the same pipeline on the same
    GPU, each in a fresh process, in turn (embed, pipe, embed, pipe): words/s after loading."""
    embedded: List[Dict] = []
    piped: List[Dict] = []
    folder = OUT / "embed-gpu"
    spec = {"source": str(source), "pipeline": str(pipeline), "gpu_id": args.gpu_id}
    calls = {
        "embed": lambda: embedded.append(run_way(pipeline, source, folder, 10000, {"gpu_id": args.gpu_id})),
        "pipe": lambda: piped.append(run_worker(__file__, {"task": "pipe", **spec})),
    }
    processes = timed_in_turn(calls, repeats=2, warmup=0)
    rows = []
    for round_, (embed_result, pipe_result) in enumerate(zip(embedded, piped, strict=True)):
        ours = summarize("embed --gpu-id", embed_result, 1)
        row = {
            "round": round_,
            "embed_words_per_s_in_blocks": ours["words_per_s_in_blocks"],
            "embed_seconds": ours["seconds"],
            "pipe_words_per_s": pipe_result["tokens"] / pipe_result["pipe_seconds"],
            "pipe_seconds": pipe_result["seconds"],
            "tokens": pipe_result["tokens"],
        }
        row["embed_over_pipe"] = row["embed_words_per_s_in_blocks"] / row["pipe_words_per_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {
        "gpu": machine(1, "cuda"),
        "lines": args.lines,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": command_line("embed.py", peer=args.peer),
        "processes_s": {name: timing.summary() for name, timing in processes.items()},
        "rows": rows,
    }


# --- the sections ------------------------------------------------------------------------------


def _over_peer(report: dict, row: dict) -> str:
    peer = report.get("peer")
    return f"{row['words_per_s_in_blocks'] / peer['peer_words_per_s']:.2f}x" if peer else "no peer"


def peer_lines(report: dict) -> List[str]:
    peer = report.get("peer")
    if not peer:
        return ["No peer in this run (`--peer PEER_DIR` adds AllenNLP's `Elmo` on the same sentences).", ""]
    threads = peer.get("peer_threads") or report["machine"].split(" threads")[0].rsplit(" ", 1)[-1]
    return [
        f"The peer in the same run: AllenNLP's `Elmo` on the same {peer['peer_words']:,} words (cut into sentences "
        f"and tokenized as our pipeline does), the same weights and {threads} threads, batches of 64, "
        f"loading excluded: {peer['peer_words_per_s']:,.0f} words/s. Ours in this process, inside its blocks "
        f"(loading excluded; reading, spaCy and writing HDF5 included): "
        f"{report['rows'][0]['words_per_s_in_blocks']:,.0f} words/s, "
        f"{peer['ours_in_blocks_over_peer']:.2f}x the peer's.",
        "",
    ]


def command_of(report: dict) -> str:
    """The run's command line (older results did not keep it: theirs, as it was)."""
    return report.get("command") or "python bench/embed.py" + (" --peer PEER_DIR" if report.get("peer") else "")


def ray_lines(report: dict) -> List[str]:
    if report.get("ray_start_s") is None:
        return ["No Ray in this run."]
    equal = report.get("all_outputs_equal")
    return [
        f"Ray's own cost: {report['ray_start_s']:.1f} s to start a local Ray and run a first task, "
        f"{report['ray_stop_s']:.1f} s to stop it. All outputs equal bitwise: {equal}."
    ]


def weights_line(weights: str) -> str:
    if weights.startswith("the weights in"):
        return "The weights in " + weights[len("the weights in ") :]
    return f"Full-size weights (93.6M parameters; {weights})"


def cpu_markdown(report: dict) -> List[str]:
    sizes = report["bytes_per_token"]
    return [
        f"### `embed` over a corpus: in this process and on Ray ({report['date']})",
        "",
        f"Machine: {report['machine']}. {weights_line(report['weights'])}, exact fp32, every layer; "
        f"{report['lines']} lines ({report['rows'][0]['tokens']:,} tokens) of shared/data/corpus/valid.txt "
        f"in blocks of {report['block_lines']} lines; wall time of a fresh process doing the whole run (loading "
        "the pipeline in each worker, starting and stopping the local Ray), one run of each way. Command: "
        f"`{command_of(report)}`.",
        "",
        "| way | workers | wall time (s) | words/s | words/s per worker | in blocks: words/s | in blocks: "
        "words/s per worker | in blocks / peer | outside blocks (s) | peak memory per worker (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['way']} | {r['workers']} | {r['seconds']:.1f} | {r['words_per_s']:,.0f} | "
            f"{r['words_per_s_per_worker']:,.0f} | {r['words_per_s_in_blocks']:,.0f} | "
            f"{r['words_per_s_in_blocks_per_worker']:,.0f} | {_over_peer(report, r)} | "
            f"{r['seconds_outside_blocks']:.1f} | {r['peak_rss_mib_per_worker']:,.0f} |"
            for r in report["rows"]
        ),
        "",
        "In blocks: tokens over the busiest worker's time inside its blocks (reading, embedding, writing), "
        "per worker: over all workers' time there. Outside blocks: the rest of the wall time (start-up, "
        "loading the pipeline, Ray, planning, the index).",
        "",
        *peer_lines(report),
        *ray_lines(report),
        "",
        f"Output size per token (every layer, {sizes['float32_bytes_per_token']:,.0f} bytes of float32): HDF5 blocks "
        f"{sizes['hdf5_blocks']:,.0f} as written (uncompressed), {sizes['hdf5_gzip']:,.0f} with gzip; the same "
        f"vectors as Parquet, a list column per layer: {sizes['parquet_none']:,.0f} uncompressed, "
        f"{sizes['parquet_snappy']:,.0f} snappy, {sizes['parquet_zstd']:,.0f} zstd.",
        "",
    ]


def gpu_markdown(report: dict) -> List[str]:
    spread = {name: figures.get("spread") for name, figures in report.get("processes_s", {}).items()}
    lines = [
        f"### `embed --gpu-id` against `nlp.pipe` on a GPU ({report['date']})",
        "",
        f"GPU: {report['gpu']}. {report['lines']:,} lines of the corpus through the same pipeline, each way in a "
        "fresh process, in turn (embed, pipe, embed, pipe); words/s after loading (embed: inside its blocks). "
        f"Command: `{command_of(report)}`."
        + (
            f" Spread of the processes' wall times: embed {spread['embed']:.0%}, pipe {spread['pipe']:.0%}."
            if spread
            else ""
        ),
        "",
        "| round | embed words/s | nlp.pipe words/s | embed / pipe | tokens |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['round']} | {row['embed_words_per_s_in_blocks']:,.0f} | {row['pipe_words_per_s']:,.0f} | "
            f"{row['embed_over_pipe']:.2f}x | {row['tokens']:,} |"
        )
    return lines + [""]


def render(name: str, report: dict) -> None:
    write_section(f"embed:{name}", (gpu_markdown if "gpu" in name else cpu_markdown)(report))


# --- the command line --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--peer", help="the peer's folder (setup.sh): its weights, and the peer itself beside ours")
    parser.add_argument("--weights", type=Path, help="biLM weights for the pipeline (default: see above)")
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=list(WAYS), help="the ways to embed")
    parser.add_argument("--gpu-id", type=int, help="embed --gpu-id against nlp.pipe on that GPU (alone)")
    parser.add_argument("--render-only", action="store_true", help="the section again from the results file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        worker_reply(WORKERS[spec["task"]](spec))
        return
    name = result_name("embed-gpu" if args.gpu_id is not None else "embed-cpu")
    if args.render_only:
        render(name, read_results(name))
        return
    args.peer = peer_folder(args.peer)
    lines = input_lines(args.lines)
    OUT.mkdir(parents=True, exist_ok=True)
    source = OUT / "embed-input.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pipeline = pipeline_dir(args.peer, args.weights)
    report = on_gpu(args, pipeline, source) if args.gpu_id is not None else on_cpu(args, pipeline, source, lines)
    write_results(name, report)
    render(name, report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
