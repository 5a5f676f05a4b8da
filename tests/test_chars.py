import random

import numpy as np
import pytest

from spacy_elmo.network.chars import (
    BEGIN_OF_WORD,
    CHAR_PAD,
    END_OF_WORD,
    MAX_WORD_LENGTH,
    encode_sentences,
    encode_tokens,
)


def reference_ids(token):
    """The original mapping written out plainly, one token at a time."""
    if token in ("<S>", "</S>"):
        mark = 256 if token == "<S>" else 257
        ids = [258, mark, 259]
    else:
        ids = [258, *token.encode("utf-8", "ignore")[:48], 259]
    ids += [260] * (50 - len(ids))
    return [i + 1 for i in ids]


def test_ascii_word_ids():
    ids = encode_tokens(["cat"])[0]
    assert ids[:5].tolist() == [259, ord("c") + 1, ord("a") + 1, ord("t") + 1, 260]
    assert (ids[5:] == 261).all() and ids.shape == (MAX_WORD_LENGTH,)
    assert (BEGIN_OF_WORD, END_OF_WORD, CHAR_PAD) == (259, 260, 261)


def test_sentence_boundaries_and_empty_token():
    ids = encode_tokens(["<S>", "</S>", ""])
    assert ids[0, :4].tolist() == [259, 257, 260, 261]
    assert ids[1, :4].tolist() == [259, 258, 260, 261]
    assert ids[2, :3].tolist() == [259, 260, 261]


def test_utf8_bytes_truncation_and_invalid_code_points():
    long_word = "a" + "é" * 30  # 61 bytes: the cut at 48 bytes splits an 'é'
    ids = encode_tokens(["é", long_word, "a\ud800b", "x" * 300])
    assert ids[0, :4].tolist() == [259, 0xC3 + 1, 0xA9 + 1, 260]
    assert ids[1, 1:49].tolist() == [b + 1 for b in long_word.encode("utf-8")[:48]]
    assert ids[1, 49] == END_OF_WORD
    assert ids[2, :4].tolist() == [259, ord("a") + 1, ord("b") + 1, 260]  # lone surrogate dropped
    assert ids[3, 49] == END_OF_WORD and (ids[3, 1:49] == ord("x") + 1).all()


def test_vectorised_encoding_matches_plain_reference():
    rng = random.Random(7)
    alphabet = "abcXYZ09 .,-'\"éßø中文😀\u0301\u202e\x00\t"
    tokens = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70))) for _ in range(500)]
    tokens += ["<S>", "</S>", "<UNK>", "<s>"]
    assert encode_tokens(tokens).tolist() == [reference_ids(t) for t in tokens]


def test_encode_sentences_pads_with_zero_rows():
    batch = encode_sentences([["a", "b"], [], ["c"]])
    assert batch.shape == (3, 4, MAX_WORD_LENGTH) and batch.dtype == np.int32
    assert (batch[1, 2:] == 0).all() and (batch[2, 3:] == 0).all()
    assert batch[1, 0].tolist() == reference_ids("<S>") and batch[1, 1].tolist() == reference_ids("</S>")
    assert encode_sentences([["a"]], add_boundaries=False).shape == (1, 1, MAX_WORD_LENGTH)


@pytest.mark.parametrize("tokens", [[], ["only"]])
def test_encode_tokens_small_inputs(tokens):
    assert encode_tokens(tokens).shape == (len(tokens), MAX_WORD_LENGTH)


# --- a model's own vocabulary ------------------------------------------------------------------

from spacy_elmo.network.chars import ByteChars, CharTable, TokenIndexer, WordTable  # noqa: E402

MARKS = dict(begin_of_word=1, end_of_word=2, pad=3, unknown=4, bos=5, eos=6)


def small_table(max_length=6):
    return CharTable({"a": 7, "é": 8, "東": 9, "😀": 10}, **MARKS, max_length=max_length)


def test_char_table_encodes_unicode_characters_not_bytes():
    ids = small_table().encode(["aé", "東😀", "", "aaaaaaa", "<bos>", "<eos>", "<S>", "ж\ud800"])
    assert ids.dtype == np.int32 and ids.shape == (8, 6)
    assert ids[0].tolist() == [1, 7, 8, 2, 3, 3]
    assert ids[1].tolist() == [1, 9, 10, 2, 3, 3]
    assert ids[2].tolist() == [1, 2, 3, 3, 3, 3]
    assert ids[3].tolist() == [1, 7, 7, 7, 7, 2]  # cut to max_length - 2 characters
    assert ids[4].tolist() == [1, 5, 2, 3, 3, 3] and ids[5].tolist() == [1, 6, 2, 3, 3, 3]
    assert ids[6].tolist() == [1, 4, 4, 4, 2, 3]  # the byte encoding's boundary is just text here
    assert ids[7].tolist() == [1, 4, 4, 2, 3, 3]  # unknown characters, a lone surrogate too


@pytest.mark.parametrize(
    "change,fragment",
    [
        ({"pad": 0}, "id of 'pad' is 0; ids must be integers >= 1"),
        ({"ids": {"a": -2}}, "id of 'a' is -2"),
        ({"max_length": 2}, "max_length must be an integer >= 3"),
        ({"bos_token": "<x>", "eos_token": "<x>"}, "two different strings"),
    ],
)
def test_char_table_rejects_bad_ids(change, fragment):
    arguments = {"ids": {"a": 7}, **MARKS, "max_length": 6, **change}
    with pytest.raises(ValueError, match=fragment):
        CharTable(**arguments)


def test_word_table_and_indexer():
    words = WordTable({"<oov>": 0, "<bos>": 1, "cat": 2}, unknown=0)
    indexer = TokenIndexer(small_table(), words)
    chars, word_ids = indexer.encode(["<bos>", "cat", "dog"])
    assert word_ids.dtype == np.int64 and word_ids.tolist() == [1, 2, 0]
    assert chars.shape == (3, 6) and indexer.bos_token == "<bos>" and words.size == 3
    assert small_table().n_characters == 11
    assert TokenIndexer.from_dict(indexer.to_dict()) == indexer
    plain = TokenIndexer()
    assert isinstance(plain.chars, ByteChars) and not plain.has_tables and plain.bos_token == "<S>"
    assert plain.encode(["cat"])[0].tolist() == encode_tokens(["cat"]).tolist() and plain.encode(["cat"])[1] is None
    with pytest.raises(ValueError, match=r"ids must be integers >= 0"):
        WordTable({"cat": -1}, unknown=0)
