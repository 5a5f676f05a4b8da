"""Token strings -> character ids: the original ELMo byte mapping (``encode_tokens``), or a model's own
vocabulary (``CharTable``, ``WordTable``, e.g. ELMoForManyLangs); a BiLM reads through ``TokenIndexer``.
In both, id 0 means "no token here" (sequence padding): the byte mapping shifts every id by +1.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

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
    """N tokens (``"<S>"`` / ``"</S>"`` the boundaries) -> int32 (N, MAX_WORD_LENGTH), values in [1, N_CHARACTERS)."""
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
    """Sentences -> int32 (B, T, MAX_WORD_LENGTH), T = longest (+2 with boundaries); padding all zeros."""
    extra = 2 if add_boundaries else 0
    longest = max((len(sentence) for sentence in sentences), default=0) + extra
    batch = np.zeros((len(sentences), longest, MAX_WORD_LENGTH), dtype=np.int32)
    for row, sentence in enumerate(sentences):
        tokens = [BOS_TOKEN, *sentence, EOS_TOKEN] if add_boundaries else list(sentence)
        if tokens:
            batch[row, : len(tokens)] = encode_tokens(tokens)
    return batch


# --- the encoders a BiLM uses ------------------------------------------------------------------

BYTE_ENCODING = "utf8-bytes"
TABLE_ENCODING = "table"


class ByteChars:
    """The original encoding: UTF-8 bytes, boundaries ``<S>`` / ``</S>``, 50 positions."""

    kind = BYTE_ENCODING
    bos_token, eos_token = BOS_TOKEN, EOS_TOKEN
    pad_id = CHAR_PAD
    max_length = MAX_WORD_LENGTH
    n_characters = N_CHARACTERS

    def encode(self, tokens: Sequence[str]) -> np.ndarray:
        """N tokens -> int32 (N, MAX_WORD_LENGTH)."""
        return encode_tokens(tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteChars)

    def __hash__(self) -> int:
        return hash(ByteChars)


class CharTable:
    """A model's own character vocabulary: one id per Unicode character (not per byte), all >= 1.

    A token becomes ``[begin_of_word, chars..., end_of_word, pad...]``: ``cut``'s characters (``unknown``
    if not in ``ids``), or ``bos`` / ``eos`` for ``bos_token`` / ``eos_token``."""

    kind = TABLE_ENCODING
    MARKS = ("begin_of_word", "end_of_word", "pad", "unknown", "bos", "eos")

    def __init__(
        self,
        ids: Mapping[str, int],
        *,
        begin_of_word: int,
        end_of_word: int,
        pad: int,
        unknown: int,
        bos: int,
        eos: int,
        max_length: int,
        bos_token: str = "<bos>",
        eos_token: str = "<eos>",
    ) -> None:
        self.ids: Dict[str, int] = dict(ids)
        self.begin_of_word, self.end_of_word, self.pad_id = begin_of_word, end_of_word, pad
        self.unknown, self.bos, self.eos = unknown, bos, eos
        self.max_length = max_length
        self.bos_token, self.eos_token = bos_token, eos_token
        self._validate()

    @property
    def marks(self) -> Dict[str, int]:
        return dict(
            zip(
                self.MARKS,
                (self.begin_of_word, self.end_of_word, self.pad_id, self.unknown, self.bos, self.eos),
                strict=True,
            )
        )

    @property
    def n_characters(self) -> int:
        """Rows the character embedding needs: the largest id + 1."""
        return max([*self.ids.values(), *self.marks.values()]) + 1

    def _validate(self) -> None:
        if not isinstance(self.max_length, int) or self.max_length < 3:
            raise ValueError(
                "CharTable max_length must be an integer >= 3 (begin mark, a character, end mark), got "
                f"{self.max_length!r}."
            )
        for name, value in [*self.marks.items(), *self.ids.items()]:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"CharTable id of {name!r} is {value!r}; ids must be integers >= 1 (0 is reserved for "
                    "sequence padding). Shift a 0-based table by +1."
                )
        if not all(isinstance(key, str) for key in self.ids):
            raise ValueError("CharTable keys must be strings (characters).")
        if not (
            isinstance(self.bos_token, str) and isinstance(self.eos_token, str) and self.bos_token != self.eos_token
        ):
            raise ValueError(
                f"bos_token and eos_token must be two different strings, got {self.bos_token!r}, {self.eos_token!r}."
            )

    def cut(self, token: str) -> str:
        """The token as the model's reader saw it: its first ``max_length - 2`` characters; boundaries whole."""
        if token == self.bos_token or token == self.eos_token:
            return token
        return token[: self.max_length - 2]

    def encode(self, tokens: Sequence[str]) -> np.ndarray:
        """N tokens -> int32 (N, max_length)."""
        ids = np.full((len(tokens), self.max_length), self.pad_id, dtype=np.int32)
        ids[:, 0] = self.begin_of_word
        lookup, unknown = self.ids.get, self.unknown
        for row, token in enumerate(tokens):
            if token == self.bos_token or token == self.eos_token:
                chars = [self.bos if token == self.bos_token else self.eos]
            else:
                chars = [lookup(char, unknown) for char in self.cut(token)]
            ids[row, 1 : len(chars) + 1] = chars
            ids[row, len(chars) + 1] = self.end_of_word
        return ids

    def to_dict(self) -> Dict[str, Any]:
        marks = self.marks
        marks["max_length"] = self.max_length
        return {"ids": self.ids, **marks, "bos_token": self.bos_token, "eos_token": self.eos_token}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CharTable":
        keys = {"ids", *cls.MARKS, "max_length", "bos_token", "eos_token"}
        missing, unknown = sorted(keys - set(data)), sorted(set(data) - keys)
        if missing or unknown:
            raise ValueError(
                f"A char table needs exactly the keys {sorted(keys)}; missing {missing}, unknown {unknown}."
            )
        return cls(**data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTable) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


class WordTable:
    """A model's word vocabulary: token string -> row of its word embedding; others get ``unknown``."""

    def __init__(self, ids: Mapping[str, int], unknown: int) -> None:
        self.ids: Dict[str, int] = dict(ids)
        self.unknown = unknown
        for name, value in [("unknown", unknown), *self.ids.items()]:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"WordTable id of {name!r} is {value!r}; ids must be integers >= 0.")

    @property
    def size(self) -> int:
        """Rows the word embedding needs: the largest id + 1."""
        return max([*self.ids.values(), self.unknown]) + 1

    def encode(self, tokens: Sequence[str]) -> np.ndarray:
        """N tokens -> int64 (N,)."""
        lookup, unknown = self.ids.get, self.unknown
        return np.fromiter((lookup(token, unknown) for token in tokens), dtype=np.int64, count=len(tokens))

    def to_dict(self) -> Dict[str, Any]:
        return {"ids": self.ids, "unknown": self.unknown}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WordTable":
        if set(data) != {"ids", "unknown"}:
            raise ValueError(f"A word table needs exactly the keys ['ids', 'unknown'], got {sorted(data)}.")
        return cls(data["ids"], data["unknown"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordTable) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


class TokenIndexer:
    """Token strings -> the ids a BiLM reads: character ids, and word ids if it has a word table."""

    def __init__(self, chars: Union[ByteChars, CharTable, None] = None, words: Optional[WordTable] = None) -> None:
        self.chars = chars if chars is not None else ByteChars()
        self.words = words

    @property
    def bos_token(self) -> str:
        return self.chars.bos_token

    @property
    def eos_token(self) -> str:
        return self.chars.eos_token

    @property
    def has_tables(self) -> bool:
        """Whether the indexer carries vocabularies that must be saved with the model."""
        return isinstance(self.chars, CharTable) or self.words is not None

    def encode(self, tokens: Sequence[str]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """N tokens -> (char ids int32 (N, C), word ids int64 (N,) or None). Words are looked up as the
        char table cuts them: ELMoForManyLangs' reader cuts before both lookups, so training saw a long
        word of its ``word.dic`` only as its cut prefix."""
        words = None
        if self.words is not None:
            cut = self.chars.cut if isinstance(self.chars, CharTable) else None
            words = self.words.encode([cut(token) for token in tokens] if cut else tokens)
        return self.chars.encode(tokens), words

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready: {"chars": char table or None (UTF-8 bytes), "words": word table or None}."""
        chars = self.chars.to_dict() if isinstance(self.chars, CharTable) else None
        return {"chars": chars, "words": self.words.to_dict() if self.words is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TokenIndexer":
        if set(data) != {"chars", "words"}:
            raise ValueError(f"A token indexer needs exactly the keys ['chars', 'words'], got {sorted(data)}.")
        chars = CharTable.from_dict(data["chars"]) if data["chars"] is not None else ByteChars()
        words = WordTable.from_dict(data["words"]) if data["words"] is not None else None
        return cls(chars, words)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenIndexer) and (self.chars, self.words) == (other.chars, other.words)

    __hash__ = None  # type: ignore[assignment]
