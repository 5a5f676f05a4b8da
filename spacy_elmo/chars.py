"""Token strings -> character ids, exactly as the original ELMo encodes them.

A token becomes its UTF-8 bytes (invalid code points such as lone surrogates dropped), cut to
``MAX_WORD_LENGTH - 2`` bytes, wrapped in begin-of-word / end-of-word marks and padded to
``MAX_WORD_LENGTH``. The sentence boundary tokens ``<S>`` and ``</S>`` get their own reserved ids.
Every id is shifted by +1 so that 0 means "no token here" (sequence padding).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MAX_WORD_LENGTH = 50
N_CHARACTERS = 262  # 256 byte values + 5 marks, +1 for the zero padding id

# Marks before the +1 shift, as in the original vocabulary.
_BOS_CHAR, _EOS_CHAR, _BOW_CHAR, _EOW_CHAR, _PAD_CHAR = 256, 257, 258, 259, 260

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"
# Shifted ids, the values that appear in encoded arrays.
BEGIN_OF_WORD = _BOW_CHAR + 1
END_OF_WORD = _EOW_CHAR + 1
CHAR_PAD = _PAD_CHAR + 1


def _boundary_ids(mark: int) -> np.ndarray:
    ids = np.full(MAX_WORD_LENGTH, CHAR_PAD, dtype=np.int32)
    ids[:3] = (BEGIN_OF_WORD, mark + 1, END_OF_WORD)
    return ids


BOS_IDS = _boundary_ids(_BOS_CHAR)
EOS_IDS = _boundary_ids(_EOS_CHAR)


def encode_tokens(tokens: Sequence[str]) -> np.ndarray:
    """Encode tokens as character ids.

    Args:
        tokens: N token strings. ``"<S>"`` and ``"</S>"`` are the sentence boundaries.
    Returns:
        int32 array (N, MAX_WORD_LENGTH) with values in [1, N_CHARACTERS).
    """
    max_bytes = MAX_WORD_LENGTH - 2
    encoded = [token.encode("utf-8", "ignore")[:max_bytes] for token in tokens]
    n_tokens = len(encoded)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n_tokens)
    ids = np.full((n_tokens, MAX_WORD_LENGTH), CHAR_PAD, dtype=np.int32)
    ids[:, 0] = BEGIN_OF_WORD
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    rows = np.repeat(np.arange(n_tokens), lengths)
    starts = np.cumsum(lengths) - lengths
    cols = np.arange(flat.size) - np.repeat(starts, lengths) + 1
    ids[rows, cols] = flat.astype(np.int32) + 1
    ids[np.arange(n_tokens), lengths + 1] = END_OF_WORD
    _set_boundaries(tokens, ids)
    return ids


def _set_boundaries(tokens: Sequence[str], ids: np.ndarray) -> None:
    for row, token in enumerate(tokens):
        if token == BOS_TOKEN:
            ids[row] = BOS_IDS
        elif token == EOS_TOKEN:
            ids[row] = EOS_IDS


def encode_sentences(sentences: Sequence[Sequence[str]], add_boundaries: bool = True) -> np.ndarray:
    """Encode a batch of tokenized sentences, padded with zeros.

    Returns:
        int32 array (B, T, MAX_WORD_LENGTH), T = longest sentence (+2 with boundaries); padding
        positions are all zeros.
    """
    extra = 2 if add_boundaries else 0
    longest = max((len(sentence) for sentence in sentences), default=0) + extra
    batch = np.zeros((len(sentences), longest, MAX_WORD_LENGTH), dtype=np.int32)
    for row, sentence in enumerate(sentences):
        tokens = [BOS_TOKEN, *sentence, EOS_TOKEN] if add_boundaries else list(sentence)
        if tokens:
            batch[row, : len(tokens)] = encode_tokens(tokens)
    return batch
