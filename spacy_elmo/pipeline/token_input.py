"""What the biLM reads of each token: its text (``ORTH``), or its ``LEMMA``, ``LOWER`` or ``NORM``.

A biLM reads the form of the words it was trained on. Most read the text as it is; some published
models (NLPL's lemma models) were trained on lemmatized text and give vectors for the wrong input
when fed surface forms. The catalogue records such models' input, the converted model keeps it
(``source.json``), and the elmo component's ``input_attr`` setting follows it unless set.

Lemmas come from the pipeline: a component before elmo must set them (spaCy's ``lemmatizer``).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional

from spacy.tokens import Doc, Token

from ..choices import choose
from ..extras import install_command

if TYPE_CHECKING:
    from spacy.language import Language

ORTH, LEMMA, LOWER, NORM = "ORTH", "LEMMA", "LOWER", "NORM"
TOKEN_STRINGS: Dict[str, Callable[[Token], str]] = {
    ORTH: lambda token: token.text,
    LEMMA: lambda token: token.lemma_,
    LOWER: lambda token: token.lower_,
    NORM: lambda token: token.norm_,
}


def check_input_attr(value: Optional[str]) -> Optional[str]:
    """``value`` if it is one of ``TOKEN_STRINGS`` or None (the weights' own); a clear error otherwise."""
    if value is not None:
        choose(TOKEN_STRINGS, "input_attr", value)
    return value


def token_string(attr: str) -> Callable[[Token], str]:
    """The function that reads ``attr`` (one of ``TOKEN_STRINGS``) off a token."""
    return TOKEN_STRINGS[attr]


def check_docs_have(docs: Iterable[Doc], attr: str, component: str) -> None:
    """Refuse docs that lack the annotation ``attr`` needs (lemmas), rather than feed empty strings."""
    if attr != LEMMA:
        return
    for doc in docs:
        if any(not token.is_space for token in doc) and not doc.has_annotation("LEMMA"):
            raise ValueError(
                f"'{component}' (elmo) reads lemmas (input_attr LEMMA: its biLM was trained on lemmatized text), "
                f"but a doc has none: {doc.text[:60]!r}. {_ADD_LEMMATIZER.format(component=component)}"
            )


def require_lemmatizer(nlp: Language, component: str) -> None:
    """At initialize: a component before ``component`` must assign ``token.lemma``."""
    before = nlp.pipe_names[: nlp.pipe_names.index(component)] if component in nlp.pipe_names else nlp.pipe_names
    if any("token.lemma" in nlp.get_pipe_meta(name).assigns for name in before):
        return
    raise ValueError(
        f"'{component}' (elmo) reads lemmas (input_attr LEMMA: its biLM was trained on lemmatized text), but no "
        f"component before it sets them (the pipeline is {nlp.pipe_names}). "
        + _ADD_LEMMATIZER.format(component=component)
    )


LEMMA_TABLE = "lemma_lookup"


def lookup_lemmatizer_config(lang: str) -> Dict[str, Any]:
    """The config of spaCy's lemmatizer in lookup mode for ``lang``: it needs no tagger, and its
    table (from spacy-lookups-data, needed to build the pipeline) is saved inside the pipeline.
    A clear error where the data package is missing or has no lemma table for ``lang``."""
    from spacy.util import registry

    if importlib.util.find_spec("spacy_lookups_data") is None:
        raise ValueError(
            f"A pipeline for a model that reads lemmas gets spaCy's lemmatizer, whose {lang!r} table comes from "
            f"spacy-lookups-data: {install_command('lemmas')}, and run it again."
        )
    if lang not in registry.lookups or LEMMA_TABLE not in registry.lookups.get(lang):
        raise ValueError(
            f"spaCy has no lemmatizer data for the language {lang!r} (spacy-lookups-data holds no {LEMMA_TABLE} "
            "table for it), and this model reads lemmas. Build the pipeline yourself with a lemmatizer for it "
            "before 'elmo' (a trained pipeline's, or your own component that sets token.lemma_)."
        )
    return {"mode": "lookup"}


_ADD_LEMMATIZER = (
    "Add a lemmatizer before it, e.g. nlp.add_pipe('lemmatizer', config={{'mode': 'lookup'}}, "
    "before='{component}') with `pip install spacy-lookups-data` (or a trained pipeline's lemmatizer), "
    "or set input_attr to 'ORTH' to feed the text (vectors for input the model was not trained on)."
)
