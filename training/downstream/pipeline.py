"""The pipeline the task models train with: the biLM as a frozen elmo component (blank pipeline of
the language + sentencizer + elmo, assembled as for packaging), with the sentence cache on.

    python -m training.downstream.pipeline runs/elmo-task/bilm pipelines/elmo-downstream --lang en

A training config sources the component (``source = ${paths.elmo}``), and spaCy takes a sourced
component as it was saved: settings given beside ``source`` (``--components.elmo.precision int8``
on the ``spacy train`` command line) are dropped without a word. Settings of the frozen component
therefore go into the pipeline itself: ``--precision`` here, or ``with_precision`` for a copy of a
saved pipeline (what ``tasks --precision`` trains with).
"""

from __future__ import annotations

from pathlib import Path

import typer

from spacy_elmo.files import atomic_directory
from spacy_elmo.kernels.precision import check_precision
from spacy_elmo.pipeline.assembly import elmo_component_names

from ..packaging.assemble import assemble


def with_precision(pipeline: Path, precision: str, output: Path) -> Path:
    """A copy of the saved ``pipeline`` (same biLM weights, same settings) whose elmo components
    run in ``precision``, saved to ``output`` (written atomically, replacing what was there): the
    pipeline to source for a task model in that precision. The setting is in its config.cfg, so a
    model trained with it, and ``spacy evaluate`` of that model, run the biLM in that precision."""
    import spacy

    check_precision(precision)
    names = elmo_component_names(pipeline)
    if not names:
        raise ValueError(f"{pipeline} has no elmo component to set the precision of.")
    nlp = spacy.load(pipeline, config={"components": {name: {"precision": precision} for name in names}})
    for name in names:
        if nlp.get_pipe(name).settings.precision != precision:
            raise RuntimeError(f"{pipeline}: the '{name}' component did not take precision {precision!r}.")
    with atomic_directory(output, replace=True) as temporary:
        nlp.to_disk(temporary)
    return Path(output)


def precision_parameter(precision: str) -> str:
    """check_precision for a command-line option: a bad name is a usage error that names the choices."""
    try:
        return check_precision(precision)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


def main(
    bilm: Path = typer.Argument(..., help="The trained biLM (RUN/bilm)."),
    output: Path = typer.Argument(..., help="Directory for the pipeline (nlp.to_disk)."),
    lang: str = typer.Option("en", help="Language of the blank pipeline (the tasks' language)."),
    cache_tokens: int = typer.Option(500000, help="Sentence cache of the frozen elmo component."),
    precision: str = typer.Option(
        "fp32", callback=precision_parameter, help="The frozen elmo component's matmul precision: fp32, bf16 or int8."
    ),
) -> None:
    elmo_config = {"sentence_cache_tokens": cache_tokens, "precision": precision}
    nlp = assemble(bilm, output, lang, name="elmo_downstream", elmo_config=elmo_config)
    config = nlp.get_pipe("elmo").bilm.config
    typer.echo(f"Saved {output}: layers {config.n_output_layers} x {config.output_dim}, precision {precision}")


if __name__ == "__main__":
    typer.run(main)
