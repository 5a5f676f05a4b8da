"""The Typer app, and the commands on models and weights: models, download, package, convert, convert-efml.
The other commands register themselves on ``app`` from their own modules (``info``, ``embed``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from wasabi import msg

from ..hub.catalogue import CATALOGUE, PublishedModel, UnknownModelError, models_for_language
from ..hub.download import DownloadError, RemoteFile
from ..network.config import ConfigError
from ..weights.native import WeightsError, load_bilm, save_bilm
from ..weights.original import import_original
from .failure import VERBOSE, fail, show_tracebacks
from .languages import language_parameter

if TYPE_CHECKING:
    from ..network.bilm import BiLM

# What the commands on models report as a failure, with its message (not a traceback)
MODEL_ERRORS = (WeightsError, ConfigError, DownloadError, UnknownModelError, FileExistsError)

# Help in click's plain layout, which wraps at the terminal's width where rich's tables cut long option
# names ("--max-concurrent-reque…" in 80 columns); tracebacks without their locals, which hold API keys.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="ELMo biLMs for spaCy.",
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def main(verbose: bool = VERBOSE) -> None:
    """Options of every command (before its name: python -m spacy_elmo --verbose serve ...)."""
    show_tracebacks(verbose)


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
        fail("Conversion failed", err)
    msg.good(f"Saved the biLM to {output}", describe_bilm(bilm))


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
    except MODEL_ERRORS as err:
        fail("Conversion failed", err)
    msg.good(f"Saved the biLM to {output}", describe_bilm(bilm))


@app.command()
def models(
    language: str = typer.Option(None, "--language", "-l", help="Only this language (ISO code, e.g. de; no: nb + nn)."),
    files: bool = typer.Option(
        False, "--files", help="Also each model's files: URL, size and sha256 with their source."
    ),
) -> None:
    """List the published models that `download`, `package` and the elmo component know by name.

    input: what a model reads of a token, the text (ORTH) or lemmas (LEMMA, from a lemmatizer)."""
    chosen = models_for_language(language) if language else list(CATALOGUE.values())
    if not chosen:
        languages = ", ".join(sorted({model.language for model in CATALOGUE.values()}))
        fail(f"No published model in the language {language!r}", fix=f"The catalogue's languages: {languages}.")
    rows = [(m.name, m.language, m.format, m.input_attr, m.parameters or "?", m.trained_on[:60]) for m in chosen]
    msg.table(rows, header=("name", "language", "format", "input", "parameters", "trained on"), divider=True)
    if files:
        for model in chosen:
            for remote in model.files:
                msg.text(f"{model.name}: {remote.url} {_pin_of(model, remote)}")


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
    except (*MODEL_ERRORS, ValueError) as err:
        fail("Download failed", err)
    msg.good(f"Saved the biLM '{name}' to {output}", describe_bilm(bilm))


@app.command()
def package(
    weights: str = typer.Argument(
        ...,
        help="What the elmo component's weights take: a catalogue name (see `models`), a URL, a biLM folder "
        "(spacy_elmo.training.pretrain's RUN/bilm) or an original release folder (options.json and weights.hdf5).",
    ),
    output: Path = typer.Argument(..., help="Directory for the package (made where it does not exist)."),
    version: str = typer.Option("0.0.1", "--version", help="Package version."),
    lang: str = typer.Option(
        None,
        "--lang",
        callback=language_parameter,
        help="spaCy language of the pipeline (default: the model's, else en).",
    ),
    name: str = typer.Option(None, "--name", help="The pipeline's name, elmo_NAME (default: the model's or folder's)."),
    centering_text: Path = typer.Option(
        None,
        "--centering-text",
        help="A .txt file or folder (one paragraph per line) of the text the common direction of the vectors is "
        "estimated from, so that token.vector and .similarity mean something (see the docs: centred "
        "similarity).",
    ),
) -> None:
    """Build an installable spaCy pipeline around a published model or a biLM of your own (such as
    en_elmo_original)."""
    from ..pipeline.assembly import package_weights

    try:
        folder = package_weights(weights, output, version, lang, name, centering_text)
    except (*MODEL_ERRORS, ImportError, ValueError) as err:
        fail("Packaging failed", err)
    wheels = sorted(folder.glob("dist/*.whl"))
    msg.good(f"Packaged {folder.name}", f"pip install {wheels[0] if wheels else folder}")


def _pin_of(model: PublishedModel, remote: RemoteFile) -> str:
    """What a published file is checked against: its pinned size and sha256, the shape its model's
    name states (an options.json), or the sha256 its first download records."""
    if remote.sha256:
        return f"{remote.size:,} bytes, sha256 {remote.sha256} ({remote.pinned_by})"
    if model.shape is not None and remote.filename == "options.json":
        return f"(held to the shape its name states: {model.shape}; the first download's sha256 is recorded)"
    return "(not pinned: the first download is recorded)"


def describe_bilm(bilm: BiLM) -> str:
    """One line on a biLM's size and shape, for the commands' reports."""
    config = bilm.config
    return (
        f"{bilm.parameter_count() / 1e6:.1f}M parameters; {config.n_layers} x {config.lstm_dim} cells "
        f"projected to {config.projection_dim}; {config.n_filters} char filters; "
        f"clipping {'on' if config.is_clipped else 'off'}; outputs {config.n_output_layers} x {config.output_dim}"
    )
