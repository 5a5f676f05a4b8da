"""Assemble a spaCy pipeline around a trained biLM: a blank pipeline of the corpus' language, a
sentencizer (the sentence splitter the corpus was cut with) and the ``elmo`` component.

    python -m spacy_elmo.training.packaging.assemble runs/elmo/bilm pipelines/elmo --lang en --name elmo_sample \
        --version 0.0.1 \
        --centering-corpus corpus/train

With ``--centering-corpus`` the elmo component estimates the common direction of its vectors from
the first sentences of that corpus and its vector hooks remove it (``center_vectors``;
spacy_elmo.pipeline.centering): token.vector and .similarity then compare centred vectors.

The pipeline the task models train with (``python -m spacy_elmo pipeline``) is assembled by the same
``spacy_elmo.pipeline.assembly.assemble_pipeline``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional

import typer
from spacy.language import Language
from spacy.tokens import Doc

from spacy_elmo.pipeline.assembly import assemble_pipeline

from ..corpus import read_sentences, shard_paths


def assemble(
    weights: Path,
    output: Path,
    lang: str = "en",
    name: str = "elmo",
    version: str = "0.0.1",
    perplexity: Optional[Path] = None,
    elmo_config: Optional[Dict[str, Any]] = None,
    centering_corpus: Optional[Path] = None,
):
    """The pipeline, saved to ``output``; ``perplexity``: the evaluate step's JSON, recorded in
    meta.json; ``elmo_config``: more settings of the elmo component; ``centering_corpus``: corpus
    shards whose sentences the common direction of the vectors is estimated from, for the vector
    hooks to remove (``center_vectors`` on)."""
    meta = {"description": f"ELMo contextual vectors from a biLM pretrained with spacy-elmo ({weights})."}
    if perplexity and Path(perplexity).is_file():
        meta["performance"] = {"bilm_perplexity": json.loads(Path(perplexity).read_text())["perplexity"]}
    docs = corpus_docs(centering_corpus) if centering_corpus else None
    nlp = assemble_pipeline(weights, lang, name, version, meta, elmo_config, docs)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(output)
    return nlp


def corpus_docs(corpus: Path) -> Callable[[Language], Iterator[Doc]]:
    """The sentences of corpus shards, one doc each, in the pipeline's vocab."""
    shard_paths(corpus)  # no shards: say so now

    def docs(nlp: Language) -> Iterator[Doc]:
        for words in read_sentences(corpus):
            yield Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1))

    return docs


def main(
    weights: Path = typer.Argument(..., help="The trained biLM (RUN/bilm)."),
    output: Path = typer.Argument(..., help="Directory for the pipeline (nlp.to_disk)."),
    lang: str = typer.Option("en", help="Language of the blank pipeline."),
    name: str = typer.Option("elmo", help="Package name (meta.json)."),
    version: str = typer.Option("0.0.1", help="Package version (meta.json)."),
    perplexity: Path = typer.Option(None, help="The evaluate step's JSON, recorded in meta.json."),
    centering_corpus: Path = typer.Option(
        None, help="Corpus shards (corpus/train) to estimate the common direction of the vectors from."
    ),
) -> None:
    nlp = assemble(weights, output, lang, name, version, perplexity, centering_corpus=centering_corpus)
    typer.echo(f"Saved {nlp.pipe_names} to {output}")


if __name__ == "__main__":
    typer.run(main)
