"""``embed``: every line of a corpus through an ELMo pipeline into a folder of HDF5 blocks (see
``corpus.embedding``)."""

from __future__ import annotations

from pathlib import Path

import typer
from wasabi import msg

from .app import app
from .failure import fail
from .languages import language_parameter

INPUT = typer.Argument(
    ..., help="UTF-8 text, one sentence or paragraph per line; a folder of such files; or .parquet files."
)
OUTPUT = typer.Argument(..., help="Folder to write: blocks/ (HDF5, a dataset per line) and index.json.")
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
    callback=language_parameter,
    help="With --weights: the spaCy language that tokenizes (default: a catalogue model's language, else en).",
)
LAYERS = typer.Option(
    "all", "--layers", help="all: (L+1, T, 2P) per line; top: the last layer; average: the layers' mean."
)
TOKENIZED = typer.Option(False, "--tokenized", help="Lines are already tokenized: split on whitespace.")
STORE_TOKENS = typer.Option(
    False, "--store-tokens", help="Keep each line's tokens beside its vectors (EmbeddedCorpus.tokens(line))."
)
BATCH_SIZE = typer.Option(64, "--batch-size", help="Lines per batch (nlp.pipe).")
PRECISION = typer.Option(
    None,
    "--precision",
    help=(
        "fp32 (exact), bf16 (faster on CPUs with AMX/AVX512_BF16) or int8 (int8 weights and activations, for "
        "CPUs with VNNI/AMX; the least exact); see the docs on speed and precision. Default: the pipeline's setting."
    ),
)
BLOCK_LINES = typer.Option(
    10000,
    "--block-lines",
    help="Lines per block: the unit of work, of output files, of progress and of resuming after a kill.",
)
TEXT_COLUMN = typer.Option("text", "--text-column", help="Parquet input: the column that holds the lines.")
GPU_ID = typer.Option(-1, "--gpu-id", help="Without Ray: the GPU to run on (spacy.require_gpu); -1: the CPU.")
RAY = typer.Option(False, "--ray", help="Run on a local Ray on this machine, started and stopped by the command.")
RAY_ADDRESS = typer.Option(
    None, "--ray-address", help="Run on the Ray cluster at this address (HOST:PORT of its head, or 'auto')."
)
WORKERS = typer.Option(1, "--workers", help="On Ray: actors, each holding the pipeline (an equal share of the CPUs).")
GPUS_PER_WORKER = typer.Option(0.0, "--gpus-per-worker", help="On Ray: GPUs per actor (1: one actor per GPU).")
MERGE_HDF5 = typer.Option(
    None, "--merge-hdf5", help="Also write every line into this one HDF5 file (the original allennlp elmo layout)."
)


@app.command()
def embed(
    input_path: Path = INPUT,
    output_folder: Path = OUTPUT,
    pipeline: str = PIPELINE,
    weights: str = WEIGHTS,
    lang: str = LANG,
    layers: str = LAYERS,
    tokenized: bool = TOKENIZED,
    store_tokens: bool = STORE_TOKENS,
    batch_size: int = BATCH_SIZE,
    precision: str = PRECISION,
    block_lines: int = BLOCK_LINES,
    text_column: str = TEXT_COLUMN,
    gpu_id: int = GPU_ID,
    ray: bool = RAY,
    ray_address: str = RAY_ADDRESS,
    workers: int = WORKERS,
    gpus_per_worker: float = GPUS_PER_WORKER,
    merge_hdf5: Path = MERGE_HDF5,
) -> None:
    """Embed every line of a text file (or a folder of them, or Parquet) with an ELMo pipeline, or with
    biLM weights alone, into a folder of HDF5 blocks and an index, here or on Ray.

    Blocks are written as they finish; after a kill, the same command computes only the missing ones.
    The files are the same bitwise however many workers made them."""
    from ..corpus.embedding import EmbedSettings, Workers, embed_corpus
    from ..extras import missing
    from ..kernels.precision import check_precision

    no_hdf5 = missing("h5", "h5py", "embed (it writes HDF5 blocks)")
    if no_hdf5:
        fail("Embedding cannot start", no_hdf5)

    try:
        settings = EmbedSettings(
            pipeline=pipeline,
            weights=weights,
            lang=lang,
            layers=layers,
            tokenized=tokenized,
            store_tokens=store_tokens,
            batch_size=batch_size,
            precision=precision and check_precision(precision),
            block_lines=block_lines,
            text_column=text_column,
        )
        place = Workers(bool(ray or ray_address), ray_address, workers, gpus_per_worker, gpu_id)
        report = embed_corpus(input_path, output_folder, settings, place, merge_into=merge_hdf5)
    except (OSError, ValueError, ImportError) as err:
        fail("Embedding failed", err)
    msg.good(
        f"Wrote {_count(report.lines, 'line')} in {_count(report.blocks, 'block')} to {output_folder} "
        f"({len(report.computed)} computed now, {report.blocks - len(report.computed)} there before)"
        + (f"; merged into {merge_hdf5}" if merge_hdf5 else "")
    )


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
