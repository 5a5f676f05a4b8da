"""How the elmo component runs its biLM over docs: each doc cut into sentences (or windows),
whitespace tokens left out; sentences seen before taken from the sentence cache, the others sorted
by length into batches under a token budget; the layers placed back at their tokens."""

from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple

import numpy as np
from spacy.tokens import Doc, Token
from thinc.api import Model, NumpyOps

from ..network.sentences import batches_by_length
from .sentence_cache import SentenceCache

# A segment of a doc the biLM reads as one sentence: (doc position, token indices).
Segment = Tuple[int, np.ndarray]


def doc_layers(
    model: Model,
    docs: Sequence[Doc],
    cache: SentenceCache,
    *,
    shape: Tuple[int, int],
    max_sentence_length: int,
    max_batch_tokens: int,
    token_string: Callable[[Token], str],
) -> List[np.ndarray]:
    """The layers of every token of ``docs`` from the biLM in ``model`` (spacy-elmo.BiLM.v1),
    ``shape`` = (L+1, 2P): one float32 array (L+1, len(doc), 2P) per doc, zeros at whitespace tokens.
    The biLM reads ``token_string(token)`` of each token (its text, or its lemma: ``token_input``)."""
    n_layers, width = shape
    outputs = [np.zeros((n_layers, len(doc), width), dtype=np.float32) for doc in docs]
    segments = [
        segment for position, doc in enumerate(docs) for segment in doc_segments(position, doc, max_sentence_length)
    ]
    words = [tuple(token_string(docs[position][int(i)]) for i in indices) for position, indices in segments]
    missing = []
    for index, sentence in enumerate(words):
        cached = cache.get(sentence)
        if cached is None:
            missing.append(index)
        else:
            _place(outputs, segments[index], cached)
    for batch in batches_by_length([words[i] for i in missing], max_batch_tokens):
        layers = _to_host(model, model.predict([list(words[missing[i]]) for i in batch]))
        for i, sentence_layers in zip(batch, layers):
            cache.put(words[missing[i]], sentence_layers)
            _place(outputs, segments[missing[i]], sentence_layers)
    return outputs


def doc_segments(position: int, doc: Doc, longest: int) -> List[Segment]:
    """The doc's sentences (or windows, without sentence boundaries), whitespace tokens left
    out, cut into pieces of at most ``longest`` tokens."""
    spans = doc.sents if doc.has_annotation("SENT_START") else [doc[:]]
    segments = []
    for span in spans:
        indices = np.array([token.i for token in span if not token.is_space], dtype=np.int64)
        for start in range(0, len(indices), longest):
            segments.append((position, indices[start : start + longest]))
    return segments


def _place(outputs: List[np.ndarray], segment: Segment, layers: np.ndarray) -> None:
    position, indices = segment
    outputs[position][:, indices] = layers


def _to_host(model: Model, layers: List[Any]) -> List[np.ndarray]:
    """Per-sentence arrays as numpy, with one device-to-host copy for the whole batch."""
    if isinstance(model.ops, NumpyOps) or not layers:
        return layers
    host = model.ops.to_numpy(model.ops.xp.concatenate(layers, axis=1))
    return np.split(host, np.cumsum([part.shape[1] for part in layers])[:-1], axis=1)
