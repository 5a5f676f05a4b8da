import numpy as np
import pytest
import torch
from conftest import random_bilm
from promises import promised

from spacy_elmo import BiLMRunner, embed_sentences
from spacy_elmo.network.token_cache import TokenCache

SENTENCES = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "sat"], ["the", "cat", "ran", "far", "away"]]


def test_cache_is_bounded_and_least_recently_used():
    bilm = random_bilm()
    calls = []

    def encode(strings):
        calls.append(list(strings))
        return torch.arange(len(strings), dtype=torch.float32).unsqueeze(1).repeat(1, 4) + len(calls) * 100

    cache = TokenCache(capacity=3)
    first = cache.lookup(["a", "b", "a"], bilm.char_encoder, encode)
    assert calls == [["a", "b"]] and torch.equal(first[0], first[2])
    cache.lookup(["c"], bilm.char_encoder, encode)
    cache.lookup(["a"], bilm.char_encoder, encode)  # refreshes "a"; "b" is now the oldest
    cache.lookup(["d"], bilm.char_encoder, encode)
    assert len(cache) == 3 and calls[-1] == ["d"]
    cache.lookup(["a", "c", "d"], bilm.char_encoder, encode)
    assert calls[-1] == ["d"], "a, c, d were all cached"
    cache.lookup(["b"], bilm.char_encoder, encode)
    assert calls[-1] == ["b"] and (cache.hits, cache.misses) == (4, 5)


def test_without_a_cache_each_distinct_token_of_a_call_is_encoded_once():
    bilm = random_bilm()
    runner = BiLMRunner(bilm)
    calls = []

    def encode(strings):
        calls.append(list(strings))
        return runner.token_representations(*bilm.encode_tokens(strings))

    flat = ["<S>", "the", "cat", "sat", "on", "the", "mat", "</S>", "<S>", "a", "cat", "</S>"]
    with torch.no_grad():
        rows = TokenCache(capacity=0).lookup(flat, bilm.char_encoder, encode)
        every_token = runner.token_representations(*bilm.encode_tokens(flat))
    assert calls == [list(dict.fromkeys(flat))], "each distinct token once, nothing kept"
    assert torch.equal(rows, every_token), "the same bits as encoding every token"


def test_batches_larger_than_the_cache_still_work():
    runner = BiLMRunner(random_bilm())
    sentences = [[f"w{i}" for i in range(50)]]
    runner.token_cache = TokenCache(capacity=0)
    uncached = embed_sentences(runner, sentences)
    runner.token_cache = TokenCache(capacity=7)
    tiny = embed_sentences(runner, sentences)
    assert np.array_equal(uncached[0], tiny[0]) and len(runner.token_cache) <= 7


def test_cached_results_are_bitwise_identical():
    runner = BiLMRunner(random_bilm())
    runner.token_cache = TokenCache(capacity=0)
    without = embed_sentences(runner, SENTENCES)
    runner.token_cache = TokenCache(capacity=100)
    cold = embed_sentences(runner, SENTENCES)
    warm = embed_sentences(runner, SENTENCES[::-1])[::-1]
    assert runner.token_cache.hits > 0
    for a, b, c in zip(without, cold, warm, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_cache_follows_weight_changes():
    bilm = random_bilm()
    runner = BiLMRunner(bilm)
    before = embed_sentences(runner, SENTENCES)
    with torch.no_grad():
        bilm.char_encoder.projection.bias.add_(1.0)
    after = embed_sentences(runner, SENTENCES)
    runner.token_cache = TokenCache(capacity=0)
    fresh = embed_sentences(runner, SENTENCES)
    assert not np.allclose(before[0][0], after[0][0])
    assert all(np.array_equal(a, b) for a, b in zip(after, fresh, strict=True))


def test_shrinking_the_capacity_empties_the_cache():
    runner = BiLMRunner(random_bilm())
    embed_sentences(runner, SENTENCES)
    assert len(runner.token_cache) == 12  # 10 words, <S>, </S>
    runner.token_cache.capacity = 5
    assert len(runner.token_cache) == 0
    embed_sentences(runner, [SENTENCES[1]])
    assert len(runner.token_cache) == 5  # <S>, a, dog, sat, </S>


def test_a_bound_in_bytes_caps_the_rows_kept():
    bilm = random_bilm()
    width = bilm.config.projection_dim
    cache = TokenCache(capacity=1000, max_bytes=5 * width * 4)  # room for 5 float32 rows
    runner = BiLMRunner(bilm, token_cache=cache)
    cached = embed_sentences(runner, [SENTENCES[1]])  # <S>, a, dog, sat, </S>
    assert len(cache) == 5 and cache.nbytes <= cache.max_bytes
    embed_sentences(runner, SENTENCES)  # more distinct tokens than fit: computed, not kept
    assert len(cache) == 5
    runner.token_cache = TokenCache(capacity=0)
    assert np.array_equal(cached[0], embed_sentences(runner, [SENTENCES[1]])[0]), "still exact"
    cache.max_bytes = 2 * width * 4
    assert len(cache) == 0 and cache.nbytes == 0, "a lower bound empties it"
    cache.max_bytes = 5 * width * 4
    encode = lambda strings: runner.token_representations(*bilm.encode_tokens(strings))  # noqa: E731
    for i in range(40):  # many new tokens: the bound holds throughout
        cache.lookup([f"w{i}", f"v{i}"], bilm.char_encoder, encode)
        assert len(cache) <= 5 and cache.nbytes <= cache.max_bytes
    with pytest.raises(ValueError, match="max_bytes must be an integer >= 0 or None, got -1"):
        cache.max_bytes = -1


def test_the_cache_keeps_at_most_the_documented_number_of_tokens():
    """docs/component.md: at most token-cache-entries (docs/promises.md) token strings, the oldest dropped."""
    most = int(promised("token-cache-entries"))
    bilm, calls = random_bilm(), []

    def encode(strings):
        calls.append(list(strings))
        return torch.zeros(len(strings), 2)

    cache = TokenCache()
    assert cache.capacity == most
    tokens = [f"t{index}" for index in range(most + 3)]
    for start in range(0, len(tokens), 1000):
        cache.lookup(tokens[start : start + 1000], bilm.char_encoder, encode)
    assert len(cache) == most
    cache.lookup(["t0", tokens[-1]], bilm.char_encoder, encode)
    assert calls[-1] == ["t0"], "the oldest was dropped, the newest kept"
