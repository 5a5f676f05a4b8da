"""``embed``: every line of a text file through an ELMo pipeline into HDF5 (see ``corpus``)."""

from __future__ import annotations

from pathlib import Path

import typer
from wasabi import msg

from .app import app

INPUT = typer.Argument(..., help="UTF-8 text, one sentence or paragraph per line.")
OUTPUT = typer.Argument(..., help="HDF5 file to write: a dataset per line + sentence_to_index.")
PIPELINE = typer.Option(
    None, "--pipeline", "-p", help="A spaCy pipeline (directory or package) with an elmo component."
)
WEIGHTS = typer.Option(
    None,
    "--weights",
    "-w",
    help="Instead of --pipeline: biLM weights (a native biLM directory, a catalogue name, see `models`, or "
    "a URL), read by blank(--lang) + sentencizer + elmo.",
)
LANG = typer.Option(
    None,
    "--lang",
    help="With --weights: the spaCy language that tokenizes (default: a catalogue model's language, else en).",
)
LAYERS = typer.Option(
    "all", "--layers", help="all: (L+1, T, 2P) per line; top: the last layer; average: the layers' mean."
)
TOKENIZED = typer.Option(False, "--tokenized", help="Lines are already tokenized: split on whitespace.")
BATCH_SIZE = typer.Option(64, "--batch-size", help="Lines per batch (nlp.pipe).")
PRECISION = typer.Option(
    None,
    "--precision",
    help=(
        "fp32 (exact), bf16 (faster on CPUs with AMX/AVX512_BF16) or int8 (int8 weights and activations, for "
        "CPUs with VNNI/AMX; the least exact); see the docs on speed and precision. Default: the pipeline's setting."
    ),
)
PROCESSES = typer.Option(
    1, "--processes", help="Worker processes, each with its own copy of the pipeline and cores/processes threads."
)
SHARD_LINES = typer.Option(
    10000, "--shard-lines", help="Lines per shard: the unit of work, of progress and of resuming after a kill."
)
GPU_ID = typer.Option(
    "-1",
    "--gpu-id",
    help="The GPU to run on (spacy.require_gpu), or GPUs separated by commas (0,1): one worker "
    "process on each; -1: the CPU.",
)


@app.command()
def embed(
    input_file: Path = INPUT,
    output_file: Path = OUTPUT,
    pipeline: str = PIPELINE,
    weights: str = WEIGHTS,
    lang: str = LANG,
    layers: str = LAYERS,
    tokenized: bool = TOKENIZED,
    batch_size: int = BATCH_SIZE,
    precision: str = PRECISION,
    processes: int = PROCESSES,
    shard_lines: int = SHARD_LINES,
    gpu_id: str = GPU_ID,
) -> None:
    """Embed every line of a text file with an ELMo pipeline, or with biLM weights alone, into HDF5.

    Shards are written to OUTPUT.shards/ as they finish; after a kill, the same command computes only
    the missing ones. The merged file equals a single-process run."""
    from ..corpus.embedding import EmbedSettings, embed_corpus, parse_gpu_ids
    from ..kernels.precision import check_precision

    try:
        settings = EmbedSettings(
            pipeline=pipeline,
            weights=weights,
            lang=lang,
            layers=layers,
            tokenized=tokenized,
            batch_size=batch_size,
            precision=precision and check_precision(precision),
            shard_lines=shard_lines,
            gpu_ids=parse_gpu_ids(gpu_id),
        )
        count = embed_corpus(input_file, output_file, settings, processes=processes)
    except (OSError, ValueError, ImportError) as err:
        msg.fail("Embedding failed", str(err), exits=1)
    msg.good(f"Wrote {count} lines to {output_file}")
