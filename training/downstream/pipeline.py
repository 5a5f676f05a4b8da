"""The pipeline the task models train with in another precision. The workflow builds the pipeline
itself with ``python -m spacy_elmo pipeline`` (``spacy_elmo.tasks.source_pipeline``); spaCy takes a
sourced component as it was saved, dropping settings given beside ``source`` without a word, so a
precision goes into a copy of that pipeline (``with_precision``: what ``tasks --precision`` trains
with).
"""

from __future__ import annotations

from pathlib import Path

from spacy_elmo.files import atomic_directory
from spacy_elmo.kernels.precision import check_precision
from spacy_elmo.pipeline.assembly import elmo_component_names


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
