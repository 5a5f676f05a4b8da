"""Command line: python -m spacy_elmo convert | info | embed."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from wasabi import msg

from .config import ConfigError
from .weights import WeightsError, import_original, load_bilm, save_bilm

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


@app.command()
def info(path: Path = typer.Argument(..., help="A native biLM directory.")) -> None:
    """Show a native biLM's configuration and size."""
    try:
        bilm = load_bilm(path)
    except (WeightsError, ConfigError) as err:
        msg.fail("Cannot load the biLM", str(err), exits=1)
    msg.info(_describe(bilm))
    print(json.dumps(bilm.config.to_dict(), indent=2))


@app.command()
def embed(
    input_file: Path = typer.Argument(..., help="UTF-8 text, one sentence or paragraph per line."),
    output_file: Path = typer.Argument(..., help="HDF5 file to write: a dataset per line + sentence_to_index."),
    pipeline: str = typer.Option(..., "--pipeline", "-p", help="A spaCy pipeline (directory or package) with an elmo component."),
    layers: str = typer.Option("all", "--layers", help="all: (L+1, T, 2P) per line; top: the last layer; average: the layers' mean."),
    tokenized: bool = typer.Option(False, "--tokenized", help="Lines are already tokenized: split on whitespace."),
    batch_size: int = typer.Option(64, "--batch-size", help="Lines per batch (nlp.pipe)."),
) -> None:
    """Embed every line of a text file with an ELMo pipeline into HDF5."""
    import spacy

    from .export import embed_file

    try:
        nlp = spacy.load(pipeline)
        count = embed_file(nlp, input_file, output_file, layers=layers, tokenized=tokenized, batch_size=batch_size)
    except (OSError, ValueError) as err:
        msg.fail("Embedding failed", str(err), exits=1)
    msg.good(f"Wrote {count} lines to {output_file}")


def _describe(bilm) -> str:
    config = bilm.config
    return (
        f"{bilm.parameter_count() / 1e6:.1f}M parameters; {config.n_layers} x {config.lstm_dim} cells "
        f"projected to {config.projection_dim}; {config.n_filters} char filters; "
        f"clipping {'on' if config.is_clipped else 'off'}; outputs {config.n_output_layers} x {config.output_dim}"
    )
