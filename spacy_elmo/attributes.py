"""What users read off a Doc: the ELMo extensions and the vector hooks.

The ``elmo`` component stores every layer of every token in ``doc._.elmo_data`` (L+1, n, 2P) and
its mix in ``doc._.elmo_mix``; everything else is computed from them on access:

- ``token._.elmo_layers`` (L+1, 2P); ``token._.elmo`` (2P,): gamma * sum_j w_j * h_j, each layer's
  vector first standardized per token when ``layer_norm`` is on (``mix_layers``).
- ``span._.elmo``, ``doc._.elmo`` (2P,): the tokens' mixed vectors pooled (mean or max) over the
  tokens that are not whitespace (whitespace tokens are not shown to the biLM; they get zeros).
- vector hooks: ``token.vector``, ``span.vector``, ``doc.vector``, ``has_vector``, ``vector_norm``
  and ``.similarity`` (cosine) backed by the above. The hooks are module-level functions, so docs
  pickle; ``install_vector_hooks(doc)`` puts them back on docs rebuilt from bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from spacy.tokens import Doc, Span, Token

from .mix_settings import MixSettings


def mix_layers(layers: np.ndarray, mix: MixSettings) -> np.ndarray:
    """(L+1, n, 2P) -> (n, 2P): gamma * sum_j w_j * norm(layers[j]), where norm standardizes each
    token's vector of each layer (zero mean, unit variance over its 2P features) when
    ``layer_norm`` is on, so that no layer outweighs the others by sheer scale; otherwise identity."""
    if mix.layer_norm:
        mean = layers.mean(axis=-1, keepdims=True, dtype=np.float64)
        std = layers.std(axis=-1, keepdims=True, dtype=np.float64)
        layers = ((layers - mean) / (std + 1e-6)).astype(np.float32)
    weights = np.asarray(mix.layer_weights, dtype=np.float32) * np.float32(mix.gamma)
    return np.tensordot(weights, layers, axes=1).astype(np.float32, copy=False)


def register_extensions() -> None:
    """Add the extensions (once; an existing extension of the same name is left alone)."""
    for cls, name, kwargs in (
        (Doc, "elmo_data", {"default": None}),
        (Doc, "elmo_mix", {"default": None}),
        (Doc, "elmo", {"getter": doc_elmo}),
        (Span, "elmo", {"getter": span_elmo}),
        (Token, "elmo", {"getter": token_elmo}),
        (Token, "elmo_layers", {"getter": token_elmo_layers}),
    ):
        if not cls.has_extension(name):
            cls.set_extension(name, **kwargs)


def _data(doc: Doc) -> np.ndarray:
    layers = doc._.elmo_data
    if layers is None:
        raise ValueError(
            "This Doc has no ELMo layers: run it through a pipeline with the 'elmo' component "
            "(nlp.add_pipe('elmo', ...)), or keep user data when serializing it."
        )
    return layers


def _mix(doc: Doc, layers: np.ndarray) -> MixSettings:
    """The mix the component stored on the doc (as a dict), else the average of the layers."""
    stored = doc._.elmo_mix
    return MixSettings.from_dict(stored) if stored else MixSettings.average(layers.shape[0])


def token_elmo_layers(token: Token) -> np.ndarray:
    return _data(token.doc)[:, token.i]


def token_elmo(token: Token) -> np.ndarray:
    layers = _data(token.doc)
    return mix_layers(layers[:, token.i : token.i + 1], _mix(token.doc, layers))[0]


def span_elmo(span: Span) -> np.ndarray:
    return _pooled(span.doc, span.start, span.end)


def doc_elmo(doc: Doc) -> np.ndarray:
    return _pooled(doc, 0, len(doc))


def _pooled(doc: Doc, start: int, end: int) -> np.ndarray:
    layers = _data(doc)
    mix = _mix(doc, layers)
    keep = [i for i in range(start, end) if not doc[i].is_space]
    if not keep:
        return np.zeros(layers.shape[-1], dtype=np.float32)
    return mix.pool(mix_layers(layers[:, keep], mix))


# --- vector hooks -------------------------------------------------------------------------------


def install_vector_hooks(doc: Doc) -> Doc:
    """Make ``vector``, ``has_vector``, ``vector_norm`` and ``similarity`` of the doc, its spans and
    tokens use ELMo. (No span ``vector_norm`` hook: spaCy computes that one from the vector.)"""
    doc.user_hooks.update(vector=doc_elmo, has_vector=_doc_has_vector, vector_norm=_norm, similarity=_similarity)
    doc.user_span_hooks.update(vector=span_elmo, has_vector=_span_has_vector, similarity=_similarity)
    doc.user_token_hooks.update(
        vector=token_elmo, has_vector=_token_has_vector, vector_norm=_norm, similarity=_similarity
    )
    return doc


def _token_has_vector(token: Token) -> bool:
    return token.doc._.elmo_data is not None and not token.is_space


def _span_has_vector(span: Span) -> bool:
    return any(_token_has_vector(token) for token in span)


def _doc_has_vector(doc: Doc) -> bool:
    return any(_token_has_vector(token) for token in doc)


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
