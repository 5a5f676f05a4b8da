"""Embedding a corpus with `python -m spacy_elmo embed` in 1 and 2 processes: wall time, words/s per
process, and a check that the sharded output equals the single-process one.

    python bench/bench_embed.py [--lines 400] [--peer PEER_DIR]

The pipeline: blank English + sentencizer + elmo with full-size weights (the peer's converted
random weights when --peer is given, else random `original`-preset weights), built once under
bench/out. Input: the first --lines lines of shared/data/corpus/valid.txt. Writes
bench/results/embed-cpu.json and the embed section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_peer import CORPUS, OUT, RESULTS, converted_weights, machine
from report import write_section


def pipeline_dir(peer) -> Path:
    import spacy

    target = OUT / "embed-pipeline"
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


def run(pipeline: Path, source: Path, output: Path, processes: int, shard_lines: int) -> float:
    output.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "spacy_elmo",
        "embed",
        str(source),
        str(output),
        "-p",
        str(pipeline),
        "--processes",
        str(processes),
        "--shard-lines",
        str(shard_lines),
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def same_file(a: Path, b: Path) -> bool:
    import h5py
    import numpy as np

    with h5py.File(a, "r") as left, h5py.File(b, "r") as right:
        return set(left) == set(right) and all(np.array_equal(left[k][()], right[k][()]) for k in left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--peer", help="use the peer's full-size weights (bench_peer.py)")
    args = parser.parse_args()
    import spacy

    lines = [line for line in (CORPUS / "valid.txt").read_text(encoding="utf-8").splitlines() if line.strip()][
        : args.lines
    ]
    source = OUT / "embed-input.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    words = sum(len(doc) for doc in spacy.blank("en").tokenizer.pipe(lines))
    pipeline = pipeline_dir(args.peer)
    shard_lines = max(1, args.lines // 8)
    rows = []
    for processes in (1, 2):
        seconds = run(pipeline, source, OUT / f"embed-{processes}.hdf5", processes, shard_lines)
        rows.append(
            {
                "processes": processes,
                "seconds": seconds,
                "words_per_s": words / seconds,
                "words_per_s_per_process": words / seconds / processes,
            }
        )
        print(f"{processes} process(es): {seconds:.1f} s, {words / seconds:.0f} words/s", flush=True)
    identical = same_file(OUT / "embed-1.hdf5", OUT / "embed-2.hdf5")
    report = {
        "machine": machine(os.cpu_count() or 1),
        "date": time.strftime("%Y-%m-%d"),
        "lines": len(lines),
        "words": words,
        "shard_lines": shard_lines,
        "rows": rows,
        "sharded_equals_single": identical,
    }
    from spacy_elmo.files import atomic_write_json

    atomic_write_json(RESULTS / "embed-cpu.json", report)
    update_markdown(report)
    print(f"outputs identical: {identical}")


def update_markdown(report: dict) -> None:
    one, two = report["rows"]
    lines = [
        f"### `embed` over a corpus, 1 and 2 processes ({report['date']})",
        "",
        f"Machine: {report['machine']}. Full-size weights (93.6M parameters), exact fp32; {report['lines']} lines "
        f"({report['words']:,} words) of shared/data/corpus/valid.txt in shards of {report['shard_lines']} lines; "
        "wall time of the whole command (loading the pipeline in each process and merging the shards included). "
        "Command: `python bench/bench_embed.py`.",
        "",
        "| processes | threads each | wall time (s) | words/s | words/s per process |",
        "|---:|---:|---:|---:|---:|",
        f"| 1 | {os.cpu_count()} | {one['seconds']:.1f} | {one['words_per_s']:,.0f} | "
        f"{one['words_per_s_per_process']:,.0f} |",
        f"| 2 | {max(1, (os.cpu_count() or 1) // 2)} | {two['seconds']:.1f} | {two['words_per_s']:,.0f} | "
        f"{two['words_per_s_per_process']:,.0f} |",
        "",
        f"The 2-process output equals the 1-process output bitwise: {report['sharded_equals_single']}.",
        "",
    ]
    write_section("bench_embed:cpu", lines)


if __name__ == "__main__":
    main()
