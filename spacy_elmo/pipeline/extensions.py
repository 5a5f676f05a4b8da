"""What users read off a Doc: the ELMo extensions and the vector hooks.

The ``elmo`` component keeps what its ``store`` setting says (see ``storage``: every layer in
``doc._.elmo_data`` (L+1, n, 2P), or only the mixed vectors) and its mix in ``doc._.elmo_mix``;
everything else is computed from them on access, as float32:

- ``token._.elmo_layers`` (L+1, 2P), with the "layers" store only; ``token._.elmo`` (2P,):
  gamma * sum_j w_j * h_j, each layer's vector first standardized per token when ``layer_norm``
  is on (``mix_settings.mix_layers``).
- ``span._.elmo``, ``doc._.elmo`` (2P,): the tokens' mixed vectors pooled (mean or max) over the
  tokens that are not whitespace (whitespace tokens are not shown to the biLM; they get zeros).
- vector hooks: ``token.vector``, ``span.vector``, ``doc.vector``, ``has_vector``, ``vector_norm``
  and ``.similarity`` (cosine) backed by the mixed vectors with the common direction(s) removed
  as ``doc._.elmo_centering`` says (``centering``; the component's ``center_vectors``), tokens
  centred before pooling; without a centering they are the extensions above. The hooks are
  module-level functions, so docs pickle; ``install_vector_hooks(doc)`` puts them back on docs
  rebuilt from bytes.

The extensions are registered when ``spacy_elmo`` is imported, so that a fresh process can read
docs rebuilt from bytes: ``import spacy_elmo; spacy_elmo.install_vector_hooks(doc)``.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
from spacy.tokens import Doc, Span, Token

from .centering import Centering
from .storage import mix_of, mixed_vectors, store_of, stored_layers, vector_width


def register_extensions() -> None:
    """Add the extensions. Idempotent: an extension of the same name that exists (ours, or a
    user's own) is left alone, never redefined with ``force``, and no doc's data is touched."""
    for cls, name, kwargs in (
        (Doc, "elmo_data", {"default": None}),
        (Doc, "elmo_vectors", {"default": None}),
        (Doc, "elmo_mix", {"default": None}),
        (Doc, "elmo_centering", {"default": None}),
        (Doc, "elmo", {"getter": doc_elmo}),
        (Span, "elmo", {"getter": span_elmo}),
        (Token, "elmo", {"getter": token_elmo}),
        (Token, "elmo_layers", {"getter": token_elmo_layers}),
    ):
        if not cls.has_extension(name):
            cls.set_extension(name, **kwargs)


def token_elmo_layers(token: Token) -> np.ndarray:
    return np.asarray(stored_layers(token.doc)[:, token.i], dtype=np.float32)


def token_elmo(token: Token) -> np.ndarray:
    return mixed_vectors(token.doc, slice(token.i, token.i + 1))[0]


def span_elmo(span: Span) -> np.ndarray:
    return _pooled(span.doc, span.start, span.end)


def doc_elmo(doc: Doc) -> np.ndarray:
    return _pooled(doc, 0, len(doc))


def pooled(doc: Doc, start: int, end: int, mixed: Optional[np.ndarray] = None) -> np.ndarray:
    """(2P,): ``span._.elmo`` of doc[start:end], the mixed vectors of its tokens that are not
    whitespace pooled. ``mixed``: the doc's mixed vectors (n, 2P) where a caller pooling several
    spans computed them once (a token's mix does not depend on the others: the same numbers)."""
    return _pooled(doc, start, end, mixed=mixed)


def _pooled(doc: Doc, start: int, end: int, centred: bool = False, mixed: Optional[np.ndarray] = None) -> np.ndarray:
    keep = [i for i in range(start, end) if not doc[i].is_space]
    if not keep:
        return np.zeros(vector_width(doc), dtype=np.float32)
    vectors = mixed_vectors(doc, keep) if mixed is None else mixed[keep]
    return mix_of(doc).pool(_centred(doc, vectors) if centred else vectors)


def _centred(doc: Doc, vectors: np.ndarray) -> np.ndarray:
    centering = Centering.from_value(doc._.elmo_centering)
    return vectors if centering is None else centering.apply(vectors)


def token_vector(token: Token) -> np.ndarray:
    """token.vector: the mixed vector, centred as the doc's centering says (if it has one)."""
    if token.is_space:
        return np.zeros(vector_width(token.doc), dtype=np.float32)
    return _centred(token.doc, mixed_vectors(token.doc, slice(token.i, token.i + 1)))[0]


def span_vector(span: Span) -> np.ndarray:
    """span.vector: the pooled centred vectors of its tokens that are not whitespace."""
    return _pooled(span.doc, span.start, span.end, centred=True)


def doc_vector(doc: Doc) -> np.ndarray:
    return _pooled(doc, 0, len(doc), centred=True)


# --- vector hooks -------------------------------------------------------------------------------


def install_vector_hooks(doc: Doc) -> Doc:
    """Make ``vector``, ``has_vector``, ``vector_norm`` and ``similarity`` of the doc, its spans and
    tokens use ELMo. (No span ``vector_norm`` hook: spaCy computes that one from the vector.)"""
    _quiet_unsaved_hooks_warning()
    doc.user_hooks.update(vector=doc_vector, has_vector=_doc_has_vector, vector_norm=_norm, similarity=_similarity)
    doc.user_span_hooks.update(vector=span_vector, has_vector=_span_has_vector, similarity=_similarity)
    doc.user_token_hooks.update(
        vector=token_vector, has_vector=_token_has_vector, vector_norm=_norm, similarity=_similarity
    )
    return doc


# spaCy warns (W109) on every Doc.to_bytes of a doc with user hooks that they are not saved. For
# ours that is expected: what they read is saved (user data, doc.tensor) and install_vector_hooks
# puts them back. spaCy's only per-call switch, to_bytes(exclude=["user_hooks"]), is not passed by
# the callers that matter (nlp.pipe(n_process=...) serializes every doc in its workers), so we use
# the mechanism spaCy documents for its warnings, a filter on the code, added the first time this
# process puts ELMo hooks on a doc: a process that never does keeps the warning. (Added only when
# missing: every change to the filters resets which warnings were already shown.)
_UNSAVED_HOOKS = r"\[W109\]"


def _quiet_unsaved_hooks_warning() -> None:
    for action, message, *_ in warnings.filters:
        if action == "ignore" and message is not None and message.pattern == _UNSAVED_HOOKS:
            return
    warnings.filterwarnings("ignore", message=_UNSAVED_HOOKS, category=UserWarning)


def _token_has_vector(token: Token) -> bool:
    return store_of(token.doc) is not None and not token.is_space


def _span_has_vector(span: Span) -> bool:
    return store_of(span.doc) is not None and any(not token.is_space for token in span)


def _doc_has_vector(doc: Doc) -> bool:
    return store_of(doc) is not None and any(not token.is_space for token in doc)


def _norm(obj: Any) -> float:
    return float(np.linalg.norm(obj.vector))


def _similarity(obj: Any, other: Any) -> float:
    """Cosine similarity of the two objects' vectors; 0.0 when either is all zeros."""
    mine, theirs = np.asarray(obj.vector), np.asarray(other.vector)
    if mine.shape != theirs.shape:
        raise ValueError(
            f"Cannot compare a {mine.shape[0]}-dimensional ELMo vector with a {theirs.shape[0]}-dimensional "
            f"vector of {type(other).__name__} {str(other)[:30]!r} (from another pipeline?)."
        )
    norms = float(np.linalg.norm(mine)) * float(np.linalg.norm(theirs))
    return float(np.dot(mine, theirs) / norms) if norms else 0.0
