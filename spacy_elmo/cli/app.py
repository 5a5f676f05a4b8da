"""Command line: python -m spacy_elmo models | download | package | convert | convert-efml | info | embed."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from wasabi import msg

from ..hub.catalogue import CATALOGUE, UnknownModelError
from ..hub.download import DownloadError
from ..network.config import ConfigError
from ..weights.native import WeightsError, load_bilm, save_bilm
from ..weights.original import import_original

_MODEL_ERRORS = (WeightsError, ConfigError, DownloadError, UnknownModelError, FileExistsError)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="ELMo biLMs for spaCy.")


@app.command()
def convert(
    options: Path = typer.Argument(..., help="The original release's options.json."),
    weights: Path = typer.Argument(..., help="The original release's weights .hdf5 file."),
    output: Path = typer.Argument(..., help="Directory for the native biLM (config.json + model.safetensors)."),
) -> None:
    """Convert original ELMo weights (options.json + hdf5) to the native format."""
    try:
        bilm = import_original(options, weights)
        save_bilm(bilm, output)
    except (WeightsError, ConfigError) as err:
        msg.fail("Conversion failed", str(err), exits=1)
    msg.good(f"Saved the biLM to {output}", _describe(bilm))


@app.command("convert-efml")
def convert_efml(
    model_dir: Path = typer.Argument(
        ..., help="An ELMoForManyLangs model directory (config.json, char.dic, encoder.pkl, ...)."
    ),
    output: Path = typer.Argument(..., help="Directory for the native biLM."),
) -> None:
    """Convert an ELMoForManyLangs model to the native format (its .pkl files are read without unpickling code)."""
    from ..files import atomic_directory
    from ..weights.elmo_for_many_langs import import_efml

    try:
        bilm = import_efml(model_dir)
        with atomic_directory(output) as temporary:
            save_bilm(bilm, temporary)
    except _MODEL_ERRORS as err:
        msg.fail("Conversion failed", str(err), exits=1)
    msg.good(f"Saved the biLM to {output}", _describe(bilm))


@app.command()
def models(
    language: str = typer.Option(None, "--language", "-l", help="Only this language (ISO code, e.g. de)."),
) -> None:
    """List the published models that `download`, `package` and the elmo component know by name."""
    rows = [
        (m.name, m.language, m.format, m.parameters or "?", m.trained_on[:60])
        for m in CATALOGUE.values()
        if language in (None, m.language)
    ]
    msg.table(rows, header=("name", "language", "format", "parameters", "trained on"), divider=True)


@app.command()
def download(
    name: str = typer.Argument(
        ...,
        help="A catalogue name (see `models`), a URL of a model archive, or, with --options/--weights, "
        "a label of your choice.",
    ),
    output: Path = typer.Argument(..., help="Directory for the native biLM (must not exist, or be empty)."),
    options: str = typer.Option(
        None, "--options", help="URL (http(s):// or file://) of a bilm-tf options.json not in the catalogue."
    ),
    weights: str = typer.Option(None, "--weights", help="URL of the matching weights .hdf5."),
    cache: Path = typer.Option(
        None, "--cache-dir", help="Cache directory (default: $SPACY_ELMO_CACHE or ~/.cache/spacy-elmo)."
    ),
) -> None:
    """Download, check, convert and write a published ELMo model as a native biLM directory.

    Files are cached: a second call downloads nothing, an interrupted download resumes. Offline,
    place the files in the cache by hand (the error names the path) or use file:// URLs."""
    from ..hub.cache import download_model

    try:
        download_model(name, output, options=options, weights=weights, cache=cache)
        bilm = load_bilm(output)
    except (*_MODEL_ERRORS, ValueError) as err:
        msg.fail("Download failed", str(err), exits=1)
    msg.good(f"Saved the biLM '{name}' to {output}", _describe(bilm))


@app.command()
def package(
    name: str = typer.Argument(..., help="A catalogue name (see `models`)."),
    output: Path = typer.Argument(..., help="Directory for the package (spacy package output)."),
    version: str = typer.Option("0.0.1", "--version", help="Package version."),
    lang: str = typer.Option(None, "--lang", help="spaCy language of the pipeline (default: the model's)."),
    centering_text: Path = typer.Option(
        None,
        "--centering-text",
        help="A .txt file or folder (one paragraph per line) of the text the common direction of the vectors is "
        "estimated from, so that token.vector and .similarity mean something (see README).",
    ),
) -> None:
    """Build an installable spaCy pipeline (e.g. en_elmo_original) from a published model."""
    from ..pipeline.assembly import package_published

    try:
        folder = package_published(name, output, version=version, lang=lang, centering_text=centering_text)
    except (*_MODEL_ERRORS, ImportError) as err:
        msg.fail("Packaging failed", str(err), exits=1)
    wheels = sorted(folder.glob("dist/*.whl"))
    msg.good(f"Packaged {folder.name}", f"pip install {wheels[0] if wheels else folder}")


@app.command()
def info(
    path: Path = typer.Argument(None, help="A native biLM directory."),
    machine: bool = typer.Option(
        False, "--machine", help="What this machine runs for each precision: the kernel, why, and the CPU features."
    ),
) -> None:
    """Show a native biLM's configuration and size, or (--machine) what each precision runs here."""
    if machine:
        _machine_report()
    if path is None:
        if not machine:
            msg.fail("Give a biLM directory, or --machine", exits=1)
        return
    try:
        bilm = load_bilm(path)
    except (WeightsError, ConfigError) as err:
        msg.fail("Cannot load the biLM", str(err), exits=1)
    msg.info(_describe(bilm))
    print(json.dumps(bilm.config.to_dict(), indent=2))


def _machine_report() -> None:
    """One row per precision (and device): what runs, through which kernel, why, on which features."""
    import warnings

    import torch

    from ..kernels import kernel_choice
    from ..kernels.machine import cpu_description

    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernel_choice.PrecisionFallback)  # the table says it
        for device in devices:
            for precision in ("fp32", "bf16", "int8"):
                choice = kernel_choice.choose(precision, device)
                runs = choice.runs if not choice.fell_back else "fp32 (fallback)"
                rows.append(
                    (device.type, precision, runs, choice.kernel, ", ".join(choice.features) or "-", choice.reason)
                )
    msg.info(f"{cpu_description()}; torch {torch.__version__}")
    msg.table(rows, header=("device", "precision", "runs", "kernel", "CPU features", "why"), divider=True)


@app.command()
def embed(
    input_file: Path = typer.Argument(..., help="UTF-8 text, one sentence or paragraph per line."),
    output_file: Path = typer.Argument(..., help="HDF5 file to write: a dataset per line + sentence_to_index."),
    pipeline: str = typer.Option(
        None, "--pipeline", "-p", help="A spaCy pipeline (directory or package) with an elmo component."
    ),
    weights: str = typer.Option(
        None,
        "--weights",
        "-w",
        help="Instead of --pipeline: biLM weights (a native biLM directory, a catalogue name, see `models`, or "
        "a URL), read by blank(--lang) + sentencizer + elmo.",
    ),
    lang: str = typer.Option(None, "--lang", help="With --weights: the spaCy language that tokenizes (default: en)."),
    layers: str = typer.Option(
        "all", "--layers", help="all: (L+1, T, 2P) per line; top: the last layer; average: the layers' mean."
    ),
    tokenized: bool = typer.Option(False, "--tokenized", help="Lines are already tokenized: split on whitespace."),
    batch_size: int = typer.Option(64, "--batch-size", help="Lines per batch (nlp.pipe)."),
    precision: str = typer.Option(
        None,
        "--precision",
        help=(
            "fp32 (exact), bf16 (faster on CPUs with AMX/AVX512_BF16) or int8 (int8 weights and activations, for "
            "CPUs with VNNI/AMX; the least exact); see README. Default: the pipeline's setting."
        ),
    ),
    processes: int = typer.Option(
        1, "--processes", help="Worker processes, each with its own copy of the pipeline and cores/processes threads."
    ),
    shard_lines: int = typer.Option(
        10000, "--shard-lines", help="Lines per shard: the unit of work, of progress and of resuming after a kill."
    ),
    gpu_id: str = typer.Option(
        "-1",
        "--gpu-id",
        help="The GPU to run on (spacy.require_gpu), or GPUs separated by commas (0,1): one worker "
        "process on each; -1: the CPU.",
    ),
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


def _describe(bilm) -> str:
    config = bilm.config
    return (
        f"{bilm.parameter_count() / 1e6:.1f}M parameters; {config.n_layers} x {config.lstm_dim} cells "
        f"projected to {config.projection_dim}; {config.n_filters} char filters; "
        f"clipping {'on' if config.is_clipped else 'off'}; outputs {config.n_output_layers} x {config.output_dim}"
    )
