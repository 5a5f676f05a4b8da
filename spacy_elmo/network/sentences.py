"""Sentences in, layers out: the plain-Python entry point to a biLM.

Adds the sentence boundaries (``<S>``/``</S>``, or the model's own boundary tokens), looks token
representations up in the bilm's token cache (encoding only the new ones), runs the LSTMs in
batches under a token budget, and returns numpy arrays with the boundaries stripped.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Sequence

import numpy as np
import torch

from .bilm import BiLM
from .lstm_layer import LstmState

DEFAULT_BATCH_TOKENS = 4096


def embed_sentences(
    bilm: BiLM,
    sentences: Sequence[Sequence[str]],
    stateful: bool = False,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> List[np.ndarray]:
    """Contextual layers for tokenized sentences.

    Args:
        bilm: a loaded BiLM.
        sentences: lists of token strings.
        stateful: carry each row's LSTM state over from the previous stateful call (row i of
            this call continues row i of the last), as the original TensorFlow biLM did. All
            sentences then run as one batch. ``reset_state(bilm)`` starts afresh.
        max_batch_tokens: tokens per batch in stateless mode; bounds memory, results do not
            depend on it.
    Returns:
        One float32 array (L+1, T_i, 2P) per sentence, boundaries removed.
    """
    if isinstance(sentences, str):
        raise TypeError("embed_sentences takes a list of sentences, each a list of token strings; got one string.")
    sentences = [_as_tokens(row, sentence) for row, sentence in enumerate(sentences)]
    if not sentences:
        return []
    if max_batch_tokens < 1:
        raise ValueError(f"max_batch_tokens must be positive, got {max_batch_tokens}.")
    with torch.inference_mode():
        if stateful:
            return _embed_batch(bilm, sentences, stateful=True)
        results: List[np.ndarray] = [None] * len(sentences)  # type: ignore[list-item]
        for batch in batches_by_length(sentences, max_batch_tokens):
            for index, layers in zip(batch, _embed_batch(bilm, [sentences[i] for i in batch], stateful=False)):
                results[index] = layers
        return results


def reset_state(bilm: BiLM) -> None:
    """Forget the LSTM state carried by stateful calls."""
    bilm.carried_state = None


def contextual_layers(bilm: BiLM, sentences: Sequence[Sequence[str]], stateful: bool = False) -> torch.Tensor:
    """All layers of a batch of sentences, on the bilm's device, boundaries included.

    Returns:
        (L+1, N, 2P): sentence after sentence, each as its begin boundary (``<S>``, or the
        model's own ``bilm.indexer.bos_token``), its tokens, its end boundary.
    """
    bos, eos = bilm.indexer.bos_token, bilm.indexer.eos_token
    flat = [token for sentence in sentences for token in (bos, *sentence, eos)]
    lengths = [len(sentence) + 2 for sentence in sentences]
    tokens = bilm.token_cache.lookup(flat, bilm.char_encoder, bilm.represent_tokens)
    start = _carried_state(bilm, len(sentences)) if stateful else None
    layers, final = bilm.contextualize(tokens, lengths, initial_state=start)
    if stateful:
        assert final is not None  # contextualize returns the final state of a run given a start state
        _store_state(bilm, final)
    return layers


def split_sentences(layers: Any, lengths: Sequence[int]) -> List[Any]:
    """(L+1, N, 2P) from ``contextual_layers`` -> one (L+1, T_i, 2P) view per sentence, boundaries
    removed; ``lengths`` are the sentences' token counts without boundaries."""
    results, offset = [], 0
    for length in lengths:
        results.append(layers[:, offset + 1 : offset + length + 1])
        offset += length + 2
    return results


def _embed_batch(bilm: BiLM, sentences: Sequence[Sequence[str]], stateful: bool) -> List[np.ndarray]:
    host = contextual_layers(bilm, sentences, stateful).float().cpu().numpy()
    return [np.ascontiguousarray(part) for part in split_sentences(host, [len(s) for s in sentences])]


def _carried_state(bilm: BiLM, rows: int) -> LstmState:
    carried = bilm.carried_state
    fresh = bilm.new_state(rows)
    if carried is not None:
        keep = min(rows, carried.batch_size)
        fresh.h[:, :, :keep] = carried.h[:, :, :keep]
        fresh.c[:, :, :keep] = carried.c[:, :, :keep]
    return fresh


def _store_state(bilm: BiLM, final: LstmState) -> None:
    carried = bilm.carried_state
    if carried is not None and carried.batch_size > final.batch_size:
        carried.h[:, :, : final.batch_size] = final.h
        carried.c[:, :, : final.batch_size] = final.c
    else:
        bilm.carried_state = final


def batches_by_length(sentences: Sequence[Sequence[str]], max_batch_tokens: int) -> Iterator[List[int]]:
    """Indices of sentences in batches of similar length, each within the token budget (boundary
    tokens included; nothing is padded). A sentence longer than the budget runs alone."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]), reverse=True)
    batch: List[int] = []
    total = 0
    for index in order:
        length = len(sentences[index]) + 2
        if batch and total + length > max_batch_tokens:
            yield batch
            batch, total = [], 0
        batch.append(index)
        total += length
    if batch:
        yield batch


def _as_tokens(row: int, sentence: Sequence[str]) -> List[str]:
    if isinstance(sentence, str):
        raise TypeError(
            f"Sentence {row} is a string ({sentence[:40]!r}); pass it as a list of tokens, e.g. text.split()."
        )
    tokens = list(sentence)
    for token in tokens:
        if not isinstance(token, str):
            raise TypeError(
                f"Sentence {row} holds a {type(token).__name__} ({token!r}); sentences must be lists of token strings."
            )
    return tokens
