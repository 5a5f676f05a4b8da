"""``conllu``, ``pipeline``, ``config``: the steps before ``spacy train`` of a task model with ELMo
(docs/training.md walks them): the data, the pipeline the config sources, the config."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import spacy
import typer
from spacy.tokens import DocBin
from wasabi import msg

from ..files import atomic_write
from ..kernels.precision import check_precision
from ..pipeline.component import Elmo
from ..tasks.conllu import ConlluError, conllu_docs
from ..tasks.shipped_configs import config_names, write_config
from ..tasks.source_pipeline import SENTENCE_CACHE_TOKENS, save_source_pipeline
from .app import MODEL_ERRORS, app
from .failure import fail
from .languages import language_parameter


def precision_parameter(precision: str) -> str:
    """check_precision for a command-line option: a bad name is a usage error that names the choices."""
    try:
        return check_precision(precision)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


@app.command()
def conllu(
    source: Path = typer.Argument(..., help="A Universal Dependencies CoNLL-U file (.conllu)."),
    output: Path = typer.Argument(..., help="The .spacy file (DocBin) to write."),
    lang: str = typer.Option(
        "en", "--lang", callback=language_parameter, help="The language whose vocabulary the docs use."
    ),
) -> None:
    """Convert a CoNLL-U file for a UPOS tagger: one doc per sentence, each word's UPOS as its tag_
    (`spacy convert` puts the XPOS there), multiword token lines skipped."""
    try:
        docs = conllu_docs(source, spacy.blank(lang).vocab)
    except OSError as err:
        fail("Cannot read the CoNLL-U file", err, fix="Give the path of a Universal Dependencies file (.conllu).")
    except ConlluError as err:
        fail("Cannot read the CoNLL-U file", err)
    if not docs:
        fail(f"{source} holds no sentence", fix="Give a CoNLL-U file with at least one sentence.")
    atomic_write(output, DocBin(docs=docs).to_disk)
    msg.good(f"Wrote {output}: {len(docs):,} sentences, {sum(len(doc) for doc in docs):,} words")


@app.command()
def pipeline(
    weights: str = typer.Argument(
        ..., help="The biLM: a native biLM directory, an original release folder, a catalogue name or a URL."
    ),
    output: Path = typer.Argument(..., help="Directory for the pipeline (nlp.to_disk)."),
    lang: str = typer.Option(
        None, "--lang", callback=language_parameter, help="Its language (default: a catalogue model's, else en)."
    ),
    sentence_cache_tokens: int = typer.Option(
        SENTENCE_CACHE_TOKENS, "--sentence-cache-tokens", help="Tokens of layers the sentence cache keeps."
    ),
    precision: str = typer.Option(
        "fp32", "--precision", callback=precision_parameter, help="The frozen biLM's precision: fp32, bf16 or int8."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing pipeline at OUTPUT."),
) -> None:
    """Build the pipeline a task config sources: blank + sentencizer + elmo, with a sentence cache."""
    try:
        nlp = save_source_pipeline(weights, output, lang, sentence_cache_tokens, precision, overwrite)
    except (*MODEL_ERRORS, ValueError) as err:
        fail("Cannot build the pipeline", err)
    config = cast(Elmo, nlp.get_pipe("elmo")).bilm.config
    msg.good(
        f"Saved {output}: {' + '.join(nlp.pipe_names)}, layers {config.n_output_layers} x {config.output_dim}, "
        f"precision {precision}"
    )


@app.command()
def config(
    name: str = typer.Argument(..., help=f"The shipped config: {', '.join(config_names())}."),
    output: Path = typer.Argument(..., help="Where to write it (.cfg)."),
) -> None:
    """Write a shipped training config: -elmo sources the elmo component from --paths.elmo."""
    try:
        write_config(name, output)
    except (ValueError, FileExistsError) as err:
        fail("Cannot write the config", err)
    msg.good(f"Wrote {output}", "Set --paths.train, --paths.dev (and --paths.elmo for an -elmo config).")
