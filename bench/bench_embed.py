"""Embedding a corpus with `python -m spacy_elmo embed`: in this process, and on a local Ray with 1
and 2 workers; words/s (per worker too), Ray's start-up cost, memory per worker, output size per
token (the HDF5 blocks, and the same vectors as Parquet), and a check that all outputs are equal.

    python bench/bench_embed.py [--lines 400] [--peer PEER_DIR]
    python bench/bench_embed.py --lines 10000 --peer PEER_DIR --gpu-id 0   # against nlp.pipe on a GPU

The pipeline: blank English + sentencizer + elmo with full-size weights (the peer's converted
random weights when --peer is given, else random `original`-preset weights), built once under
bench/out. With --peer (../shared/tools/peer-allennlp/setup.sh PEER_DIR), AllenNLP's `Elmo` runs
the same sentences on the same weights in the same run, and the table gives ours against it.
Input: the first --lines lines of shared/data/corpus/valid.txt, in 8 blocks. Each way runs in a
fresh process, timed from its start to its end (loading the pipeline, and starting and stopping
Ray, included). Writes bench/results/embed-cpu.json and the embed section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from bench_peer import CORPUS, OUT, RESULTS, converted_weights, machine, run_peer
from report import write_section

WAYS = {
    "in this process": {},
    "Ray, 1 worker": {"ray": True, "workers": 1},
    "Ray, 2 workers": {"ray": True, "workers": 2},
}
RUN_ONE = """
import json, resource, sys, time
start = time.perf_counter()
from spacy_elmo.corpus.embedding import EmbedSettings, Workers, embed_corpus
source, output, pipeline, block_lines, workers = sys.argv[1:6]
report = embed_corpus(source, output, EmbedSettings(pipeline, block_lines=int(block_lines)),
                      Workers(**json.loads(workers)), progress=False)
print(json.dumps({"seconds": time.perf_counter() - start, "computed": report.computed,
                  "driver_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
PIPE_ONE = """
import json, sys, time
start = time.perf_counter()
import spacy
source, pipeline, gpu_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
spacy.require_gpu(gpu_id)
nlp = spacy.load(pipeline)
lines = [line for line in open(source, encoding="utf-8").read().splitlines() if line.strip()]
loaded = time.perf_counter()
tokens = sum(len(doc) for doc in nlp.pipe(lines))
done = time.perf_counter()
print(json.dumps({"seconds": done - start, "pipe_seconds": done - loaded, "tokens": tokens}))
"""
RAY_START = """
import time
start = time.perf_counter()
import ray
ray.init(include_dashboard=False)
ray.get(ray.remote(lambda: 1).remote())
started = time.perf_counter()
ray.shutdown()
print(started - start, time.perf_counter() - started)
"""


def pipeline_dir(peer) -> Path:
    import spacy

    target = OUT / ("embed-pipeline-peer-weights" if peer else "embed-pipeline")
    if not (target / "config.cfg").is_file():
        if peer:
            weights = converted_weights(Path(peer))
        else:
            from spacy_elmo import BiLM, BiLMConfig, save_bilm

            weights = save_bilm(BiLM(BiLMConfig.preset("original")), OUT / "original-random-bilm")
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        nlp.add_pipe("elmo", config={"weights": str(weights)})
        nlp.initialize()
        nlp.to_disk(target)
    return target


def run_way(pipeline: Path, source: Path, output: Path, block_lines: int, workers: Dict) -> Dict:
    shutil.rmtree(output, ignore_errors=True)
    arguments = [str(source), str(output), str(pipeline), str(block_lines), json.dumps(workers)]
    done = subprocess.run([sys.executable, "-c", RUN_ONE, *arguments], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


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
        hdf5 = sum(OUT.joinpath(output, block["file"]).stat().st_size for block in corpus.index["blocks"])
    columns = {
        f"layer_{k}": pa.array(
            [array[k].tolist() for array in arrays], type=pa.list_(pa.list_(pa.float32(), arrays[0].shape[2]))
        )
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
        "ours_in_blocks_over_peer": ours["words_per_s_in_blocks"] / result["words_per_s"],
    }


def same_outputs(folders: List[Path]) -> bool:
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


def on_gpu(pipeline: Path, source: Path, gpu_id: int, lines: int) -> None:
    """`embed --gpu-id` against `nlp.pipe` of the same lines through the same pipeline on the same
    GPU, each in a fresh process, in turn (embed, pipe, embed, pipe): words/s after loading."""
    rows = []
    for round_ in range(2):
        folder = OUT / "embed-gpu"
        embedded = summarize("embed --gpu-id", run_way(pipeline, source, folder, 10000, {"gpu_id": gpu_id}), 1)
        arguments = [str(source), str(pipeline), str(gpu_id)]
        done = subprocess.run([sys.executable, "-c", PIPE_ONE, *arguments], check=True, capture_output=True, text=True)
        piped = json.loads(done.stdout.strip().splitlines()[-1])
        row = {
            "round": round_,
            "embed_words_per_s_in_blocks": embedded["words_per_s_in_blocks"],
            "embed_seconds": embedded["seconds"],
            "pipe_words_per_s": piped["tokens"] / piped["pipe_seconds"],
            "pipe_seconds": piped["seconds"],
            "tokens": piped["tokens"],
        }
        row["embed_over_pipe"] = row["embed_words_per_s_in_blocks"] / row["pipe_words_per_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    import torch

    from spacy_elmo.files import atomic_write_json

    report = {"gpu": torch.cuda.get_device_name(gpu_id), "torch": torch.__version__, "lines": lines, "rows": rows}
    report["date"] = time.strftime("%Y-%m-%d %H:%M")
    atomic_write_json(RESULTS / "embed-gpu.json", report)


def input_lines(count: int) -> List[str]:
    """The first ``count`` lines of the corpus's held-out text, then its test and training text."""
    lines: List[str] = []
    for name in ("valid.txt", "test.txt", "train.txt"):
        lines += [line for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line.strip()]
        if len(lines) >= count:
            break
    return lines[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--peer", help="the peer's folder (setup.sh): its weights, and the peer itself beside ours")
    parser.add_argument("--gpu-id", type=int, help="embed --gpu-id against nlp.pipe on that GPU (alone)")
    args = parser.parse_args()
    lines = input_lines(args.lines)
    OUT.mkdir(parents=True, exist_ok=True)
    source = OUT / "embed-input.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pipeline = pipeline_dir(args.peer)
    if args.gpu_id is not None:
        on_gpu(pipeline, source, args.gpu_id, args.lines)
        return
    block_lines = max(1, args.lines // 8)
    rows, folders = [], []
    for name, workers in WAYS.items():
        folders.append(OUT / f"embed-{name.replace(' ', '-').replace(',', '')}")
        rows.append(
            summarize(name, run_way(pipeline, source, folders[-1], block_lines, workers), workers.get("workers", 1))
        )
        print(f"{name}: {rows[-1]['seconds']:.1f} s, {rows[-1]['words_per_s']:.0f} words/s", flush=True)
    start, stop = map(
        float,
        subprocess.run([sys.executable, "-c", RAY_START], check=True, capture_output=True, text=True).stdout.split(),
    )
    peer = peer_row(Path(args.peer), lines, rows[0]) if args.peer else None
    report = {
        "machine": machine(os.cpu_count() or 1),
        "weights": "the peer's full-size random weights, converted" if args.peer else "random original preset",
        "peer": peer,
        "date": time.strftime("%Y-%m-%d"),
        "lines": args.lines,
        "block_lines": block_lines,
        "rows": rows,
        "ray_start_s": start,
        "ray_stop_s": stop,
        "bytes_per_token": sizes(folders[0]),
        "all_outputs_equal": same_outputs(folders),
    }
    from spacy_elmo.files import atomic_write_json

    atomic_write_json(RESULTS / "embed-cpu.json", report)
    update_markdown(report)
    print(json.dumps(report, indent=2))


def _over_peer(report: dict, row: dict) -> str:
    peer = report.get("peer")
    return f"{row['words_per_s_in_blocks'] / peer['peer_words_per_s']:.2f}x" if peer else "no peer"


def peer_lines(report: dict) -> List[str]:
    peer = report.get("peer")
    if not peer:
        return ["No peer in this run (`--peer PEER_DIR` adds AllenNLP's `Elmo` on the same sentences).", ""]
    return [
        f"The peer in the same run: AllenNLP's `Elmo` on the same {peer['peer_words']:,} words (cut into sentences "
        f"and tokenized as our pipeline does), the same weights and {os.cpu_count()} threads, batches of 64, "
        f"loading excluded: {peer['peer_words_per_s']:,.0f} words/s. Ours in this process, inside its blocks "
        f"(loading excluded; reading, spaCy and writing HDF5 included): "
        f"{report['rows'][0]['words_per_s_in_blocks']:,.0f} words/s, "
        f"{peer['ours_in_blocks_over_peer']:.2f}x the peer's.",
        "",
    ]


def update_markdown(report: dict) -> None:
    sizes = report["bytes_per_token"]
    lines = [
        f"### `embed` over a corpus: in this process and on Ray ({report['date']})",
        "",
        f"Machine: {report['machine']}. Full-size weights (93.6M parameters; {report['weights']}), exact fp32, "
        "every layer; "
        f"{report['lines']} lines ({report['rows'][0]['tokens']:,} tokens) of shared/data/corpus/valid.txt in blocks "
        f"of {report['block_lines']} lines; wall time of a fresh process doing the whole run (loading the pipeline "
        "in each worker, starting and stopping the local Ray). Command: `python bench/bench_embed.py"
        + (" --peer PEER_DIR`." if report.get("peer") else "`."),
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
        f"Ray's own cost: {report['ray_start_s']:.1f} s to start a local Ray and run a first task, "
        f"{report['ray_stop_s']:.1f} s to stop it. All outputs equal bitwise: {report['all_outputs_equal']}.",
        "",
        f"Output size per token (every layer, {sizes['float32_bytes_per_token']:,.0f} bytes of float32): HDF5 blocks "
        f"{sizes['hdf5_blocks']:,.0f} as written (uncompressed), {sizes['hdf5_gzip']:,.0f} with gzip; the same "
        f"vectors as Parquet, a list column per layer: {sizes['parquet_none']:,.0f} uncompressed, "
        f"{sizes['parquet_snappy']:,.0f} snappy, {sizes['parquet_zstd']:,.0f} zstd.",
        "",
    ]
    write_section("bench_embed:cpu", lines)


if __name__ == "__main__":
    main()
