"""How the elmo component runs its biLM over docs: each doc cut into sentences (or windows),
whitespace tokens left out; sentences seen before taken from the sentence cache, the others sorted
by length into batches under a token budget; the layers placed back at their tokens."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
from spacy.tokens import Doc, Token
from thinc.api import CupyOps, Model, NumpyOps

from ..network.runner import batches_by_length
from .sentence_cache import SentenceCache

# A segment of a doc the biLM reads as one sentence: (doc position, token indices).
Segment = Tuple[int, np.ndarray]


def doc_layers(
    model: Model,
    docs: Sequence[Doc],
    cache: SentenceCache,
    *,
    shape: Tuple[int, int],
    dtype: type = np.float32,
    max_sentence_length: int,
    max_batch_tokens: int,
    token_string: Callable[[Token], str],
) -> List[np.ndarray]:
    """The layers of every token of ``docs`` from the biLM in ``model`` (spacy-elmo.BiLM.v1),
    ``shape`` = (L+1, 2P): one array (L+1, len(doc), 2P) of ``dtype`` (float32, or float16: then
    rounded on the GPU before the copy back) per doc, zeros at whitespace tokens.
    The biLM reads ``token_string(token)`` of each token (its text, or its lemma: ``token_input``)."""
    segments = [
        segment for position, doc in enumerate(docs) for segment in doc_segments(position, doc, max_sentence_length)
    ]
    outputs = empty_outputs(docs, segments, shape, dtype)
    words = segment_words(docs, segments, token_string)
    missing = []
    for index, sentence in enumerate(words):
        cached = cache.get(sentence)
        if cached is None:
            missing.append(index)
        else:
            _place(outputs, segments[index], cached)
    # On a GPU nothing in a batch's call waits for the GPU: the host queues batch k's kernels and its
    # copy back, then places batch k-1's layers while the GPU runs batch k (two batches in pinned
    # memory at a time). On a CPU the same order, one after the other.
    previous: Optional[Tuple[List[int], HostCopy]] = None
    for batch in batches_by_length([words[i] for i in missing], max_batch_tokens):
        sentences = [missing[i] for i in batch]
        copy = HostCopy.start(model, model.predict([list(words[i]) for i in sentences]), dtype)
        if previous is not None:
            _store(outputs, cache, words, segments, previous[0], previous[1].wait())
        previous = (sentences, copy)
    if previous is not None:
        _store(outputs, cache, words, segments, previous[0], previous[1].wait())
    return outputs


def _store(
    outputs: List[np.ndarray],
    cache: SentenceCache,
    words: List[tuple],
    segments: List[Segment],
    sentences: List[int],
    layers: List[np.ndarray],
) -> None:
    """A batch's layers (one array per sentence of ``sentences``) into the cache and the docs."""
    for index, sentence_layers in zip(sentences, layers, strict=True):
        cache.put(words[index], sentence_layers)
        _place(outputs, segments[index], sentence_layers)


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


def empty_outputs(
    docs: Sequence[Doc], segments: List[Segment], shape: Tuple[int, int], dtype: type = np.float32
) -> List[np.ndarray]:
    """One array (L+1, len(doc), 2P) of ``dtype`` per doc, ``shape`` = (L+1, 2P): zeros where a doc
    has tokens no segment covers (whitespace), else left unset (every token gets its layers written).
    One allocation per doc, not one for all: freed, arrays of this size go back to the C heap and
    the next call's reuse its pages, where one buffer for the whole call (hundreds of MB) is mapped
    afresh each time (BENCHMARKS.md, "The output path on a GPU")."""
    covered = np.zeros(len(docs), dtype=np.int64)
    for position, indices in segments:
        covered[position] += len(indices)
    return [
        (np.empty if covered[i] == len(doc) else np.zeros)((shape[0], len(doc), shape[1]), dtype=dtype)
        for i, doc in enumerate(docs)
    ]


def segment_words(docs: Sequence[Doc], segments: List[Segment], token_string: Callable[[Token], str]) -> List[tuple]:
    """The strings the biLM reads for each segment's tokens; each doc's tokens are read once."""
    strings = [[token_string(token) for token in doc] for doc in docs]
    words = []
    for position, indices in segments:
        if _is_run(indices):
            words.append(tuple(strings[position][indices[0] : indices[-1] + 1]))
        else:
            words.append(tuple(strings[position][int(i)] for i in indices))
    return words


def _place(outputs: List[np.ndarray], segment: Segment, layers: np.ndarray) -> None:
    position, indices = segment
    if _is_run(indices):  # one copy
        outputs[position][:, indices[0] : indices[-1] + 1] = layers
    else:
        outputs[position][:, indices] = layers


def _is_run(indices: np.ndarray) -> bool:
    """Whether ``indices`` are consecutive tokens."""
    return bool(len(indices)) and indices[-1] - indices[0] + 1 == len(indices)


class HostCopy:
    """A batch's per-sentence layers on their way to the host. On a CUDA GPU one copy of the whole
    batch (rounded to ``dtype`` first where that is float16: half the bytes to copy, and what the
    doc keeps) into pinned (page-locked) memory, queued behind the batch's kernels (from pinned memory,
    several times faster than into pageable memory, and the host need not wait for it); ``wait``
    returns the per-sentence arrays (views of that copy: the caller copies them out, ``_place`` and
    the cache). On a CPU the arrays themselves."""

    def __init__(self, layers: List[np.ndarray], done: Any = None, keep: Any = None) -> None:
        self._layers = layers
        self._done = done  # the CUDA event recorded after the copy; None where nothing is in flight
        self._keep = keep  # the device array being copied, alive until the copy has run

    @classmethod
    def start(cls, model: Model, layers: List[Any], dtype: type = np.float32) -> "HostCopy":
        """Queue the copy of ``layers`` (one (L+1, T_i, 2P) float32 array per sentence, as
        ``model.predict`` returns them) to the host; on a CPU they stay float32 (``_place`` rounds
        them into the doc's array, to the same bits)."""
        if isinstance(model.ops, NumpyOps) or not layers:
            return cls(layers)
        if not isinstance(model.ops, CupyOps):
            return cls([model.ops.to_numpy(part) for part in layers])
        import torch

        packed = model.ops.xp.concatenate(layers, axis=1)
        device = torch.from_dlpack(packed if dtype == np.float32 else packed.astype(dtype))
        host = torch.empty(device.shape, dtype=device.dtype, pin_memory=True)
        host.copy_(device, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        parts = np.split(host.numpy(), np.cumsum([part.shape[1] for part in layers])[:-1], axis=1)
        return cls(parts, done, device)

    def wait(self) -> List[np.ndarray]:
        """The per-sentence arrays, once the copy has run."""
        if self._done is not None:
            self._done.synchronize()
            self._done = self._keep = None
        return self._layers
