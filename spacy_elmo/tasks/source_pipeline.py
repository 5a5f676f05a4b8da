"""The pipeline a task config sources: a blank pipeline of the task's language, a sentencizer and
the ``elmo`` component (``pipeline.assembly``), with a sentence cache so that the frozen biLM
computes each training sentence once, not once an epoch.

A config sources the component (``source = ${paths.elmo}``), and spaCy takes a sourced component
as it was saved: settings given beside ``source`` (``--components.elmo.precision int8`` on the
``spacy train`` command line) are dropped without a word. The frozen component's settings, its
precision among them, therefore go into this pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from spacy.language import Language

from ..files import atomic_directory
from ..pipeline.assembly import assemble_pipeline
from ..pipeline.settings import ElmoSettings

SENTENCE_CACHE_TOKENS = 500_000  # tokens of layers kept: UD English-EWT's training set has 204,577 words


def save_source_pipeline(
    weights: str,
    output: Path,
    lang: Optional[str] = None,
    sentence_cache_tokens: int = SENTENCE_CACHE_TOKENS,
    precision: str = "fp32",
    overwrite: bool = False,
) -> Language:
    """blank(lang) + sentencizer + elmo reading ``weights`` (a biLM directory, an original release
    folder, a catalogue name or a URL), saved to ``output`` atomically; an existing ``output`` is
    replaced only with ``overwrite``."""
    # the component's own checks, made before the weights are fetched
    settings = ElmoSettings(sentence_cache_tokens=sentence_cache_tokens, precision=precision)
    elmo_config = {"sentence_cache_tokens": settings.sentence_cache_tokens, "precision": settings.precision}
    nlp = assemble_pipeline(weights, lang, name="elmo_source", elmo_config=elmo_config)
    with atomic_directory(output, replace=overwrite) as temporary:
        nlp.to_disk(temporary)
    return nlp
