"""The pipeline the task models train with: the biLM as a frozen elmo component (blank pipeline of
the language + sentencizer + elmo, assembled as for packaging), with the sentence cache on.

    python -m training.downstream.pipeline runs/elmo-task/bilm pipelines/elmo-downstream --lang en
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..packaging.assemble import assemble


def main(
    bilm: Path = typer.Argument(..., help="The trained biLM (RUN/bilm)."),
    output: Path = typer.Argument(..., help="Directory for the pipeline (nlp.to_disk)."),
    lang: str = typer.Option("en", help="Language of the blank pipeline (the tasks' language)."),
    cache_tokens: int = typer.Option(500000, help="Sentence cache of the frozen elmo component."),
) -> None:
    nlp = assemble(bilm, output, lang, name="elmo_downstream", elmo_config={"sentence_cache_tokens": cache_tokens})
    config = nlp.get_pipe("elmo").bilm.config
    typer.echo(f"Saved {output}: layers {config.n_output_layers} x {config.output_dim}")


if __name__ == "__main__":
    typer.run(main)
