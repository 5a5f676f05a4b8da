"""What a doc keeps, by the elmo component's ``store`` and ``store_dtype`` settings: bytes per token
of ``Doc.to_bytes`` and peak RSS of ``nlp.pipe`` with the docs kept.

    python bench/bench_storage.py [--lines 500]

The pipeline: blank English + sentencizer + elmo with random `small`-preset weights (L+1 = 3 layers
of 2P = 256), built once under bench/out; vector hooks on (the default). Input: the first --lines
non-empty lines of shared/data/corpus/valid.txt. Each configuration runs in its own process (its
own peak RSS). Writes bench/results/storage-cpu.json and the storage section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench_peer import CORPUS, OUT, RESULTS, machine
from report import write_section

STORES = ("layers", "mix", "tensor")
DTYPES = ("float32", "float16")
PRESET = "small"
BATCH = 25  # docs per nlp.pipe batch: small, so that what the docs keep outweighs a batch's working memory


def weights_dir() -> Path:
    """Random small-preset biLM weights (seeded), written once."""
    target = OUT / f"{PRESET}-random-bilm"
    if not (target / "config.json").is_file():
        import torch

        from spacy_elmo import BiLM, BiLMConfig, save_bilm

        torch.manual_seed(14)
        save_bilm(BiLM(BiLMConfig.preset(PRESET)), target)
    return target


def corpus_lines(count: int) -> list:
    lines = (CORPUS / "valid.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()][:count]


def measure(store: str, dtype: str, count: int) -> dict:
    """In a process of its own: run the pipeline over the lines, keep the docs, measure."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights_dir()), "store": store, "store_dtype": dtype})
    nlp.initialize()
    lines = corpus_lines(count)
    start = time.perf_counter()
    docs = list(nlp.pipe(lines, batch_size=BATCH))
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tokens = sum(len(doc) for doc in docs)
    kept = [array for doc in docs for array in (doc._.elmo_data, doc._.elmo_vectors, doc.tensor) if array is not None]
    total = sum(len(doc.to_bytes()) for doc in docs)
    with nlp.select_pipes(disable=["elmo"]):
        plain = sum(len(doc.to_bytes()) for doc in nlp.pipe(lines))
    return {
        "store": store,
        "dtype": dtype,
        "tokens": tokens,
        "seconds": seconds,
        "peak_rss_mb": peak_mb,
        "kept_mb": sum(array.nbytes for array in kept) / 2**20,
        "bytes_per_token": total / tokens,
        "elmo_bytes_per_token": (total - plain) / tokens,
    }


def run_separately(store: str, dtype: str, count: int) -> dict:
    command = [sys.executable, __file__, "--child", store, dtype, "--lines", str(count)]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--child", nargs=2, metavar=("STORE", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child, args.lines)))
        return
    weights_dir()  # once, before the children read it
    rows = []
    for store in STORES:
        for dtype in DTYPES:
            rows.append(run_separately(store, dtype, args.lines))
            row = rows[-1]
            print(
                f"{store:>6} {dtype}: {row['elmo_bytes_per_token']:8.1f} B/token added "
                f"({row['bytes_per_token']:.1f} in all), arrays kept {row['kept_mb']:.1f} MB, "
                f"peak RSS {row['peak_rss_mb']:.0f} MB",
                flush=True,
            )
    report = {
        "machine": machine(os.cpu_count() or 1),
        "date": time.strftime("%Y-%m-%d"),
        "preset": PRESET,
        "lines": args.lines,
        "tokens": rows[0]["tokens"],
        "rows": rows,
    }
    from spacy_elmo.files import atomic_write_json

    atomic_write_json(RESULTS / "storage-cpu.json", report)
    write_section("bench_storage:cpu", markdown(report))


def markdown(report: dict) -> list:
    from spacy_elmo.pipeline.storage import bytes_per_token

    lines = [
        f"### What a doc keeps: the `store` settings ({report['date']})",
        "",
        f"Machine: {report['machine']}. `{report['preset']}` preset (L+1 = 3 layers of 2P = 256), random weights, "
        f"vector hooks on; {report['lines']} lines of shared/data/corpus/valid.txt ({report['tokens']:,} tokens), "
        f"`nlp.pipe` (batches of {BATCH} docs) with every doc kept, each configuration in its own process. "
        "Bytes per token: of `Doc.to_bytes`, "
        "what the elmo component adds (over the same doc without it) and in all; formula: the arrays alone "
        "(`spacy_elmo.pipeline.storage.bytes_per_token`), for this preset and for the original model (3 x 1024). "
        "Command: `python bench/bench_storage.py`.",
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
    lines += [
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
    return lines


if __name__ == "__main__":
    main()
