"""Bad input, broken files, interruptions and concurrency."""

import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from conftest import make_nlp, random_bilm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spacy.tokens import Doc

from spacy_elmo import embed_sentences

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def nlp(tiny_weights):
    return make_nlp(tiny_weights)


def check(doc):
    layers = doc._.elmo_data
    assert layers.shape == (3, len(doc), 32) and np.isfinite(layers).all()
    assert doc.vector.shape == (32,) and np.isfinite(doc.vector).all()
    for token in doc[:50]:
        assert token.vector.shape == (32,) and np.isfinite(token.vector).all()


@pytest.mark.parametrize(
    "text",
    [
        "control \x01\x02\x1b[31m red \x7f chars",
        "nul\x00inside and \x00 alone",
        "right-to-left: שָׁלוֹם עֲלֵיכֶם and مرحبا بالعالم, override \u202eabc\u202c",
        "combining: e\u0301 a\u0308\u0323 Z\u0351\u0352\u0353\u0354 and zero width\u200bspace",
        "emoji: 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇯🇵🇫🇷 1️⃣ ❤️‍🔥",
        "y" * 10000,
    ],
    ids=["control", "nul", "rtl", "combining", "emoji", "10k-char-token"],
)
def test_odd_text(nlp, text):
    check(nlp(text))


def test_lone_surrogates_are_dropped_like_the_original(seeded):
    """spaCy's tokenizer refuses lone surrogates before any component runs; the biLM entry point
    drops them, as the original encoder did."""
    bilm = random_bilm()
    with_surrogate, without = embed_sentences(bilm, [["ab\ud800c", "\udfff"], ["abc", ""]])
    assert np.array_equal(with_surrogate, without)


@pytest.mark.slow
def test_a_document_of_a_million_characters(nlp):
    million = ("word " * 200000)[:1_000_000]  # spaCy's default max_length
    assert len(million) == 1_000_000
    check(nlp(million))


@pytest.mark.slow
@pytest.mark.matrix  # 10 s: the million characters above are 200,000 words of one sentence too
def test_a_document_of_100000_repeated_words(nlp):
    check(nlp(Doc(nlp.vocab, words=["again"] * 100000)))


def test_hand_set_sentence_boundaries(tiny_weights):
    nlp = make_nlp(tiny_weights, sentencizer=False)
    words = ["one"] * 5 + ["long"] * 5000 + ["x", "y"]
    starts = [True] * 5 + [True] + [False] * 4999 + [True, True]
    doc = nlp(Doc(nlp.vocab, words=words, sent_starts=starts))
    check(doc)
    alone = nlp(Doc(nlp.vocab, words=["one"], sent_starts=[True]))
    assert np.array_equal(doc._.elmo_data[:, :1], alone._.elmo_data), "a one-token sentence is read alone"


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_fuzz_any_unicode_text(nlp, text):
    check(nlp(text))


def test_threads_give_the_sequential_vectors(nlp):
    texts = [f"Sentence number {i} has {'many ' * (i % 7)}words in it. And a second one." for i in range(24)]
    sequential = [nlp(text)._.elmo_data for text in texts]
    results = [None] * len(texts)

    def work(indices):
        for i in indices:
            results[i] = nlp(texts[i])._.elmo_data

    threads = [threading.Thread(target=work, args=(range(k, len(texts), 4),)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(np.array_equal(a, b) for a, b in zip(sequential, results, strict=True))


def test_threads_on_pipelines_never_run_give_the_sequential_vectors(tiny_elmo_pipeline):
    """8 threads from a cold start: two pipelines loaded from the same files, fp32 and int8, never
    called before, each thread calling both on texts of mixed lengths, 3 rounds; against a run of
    fresh pipelines one text after another. The process's thread count is never changed."""
    texts = [" ".join(["word"] * (1 + i * 7 % 40)) + f". Then {i} more." for i in range(24)]

    def fresh(precision):
        return spacy.load(tiny_elmo_pipeline, config={"components": {"elmo": {"precision": precision}}})

    precisions = ("fp32", "int8")
    sequential = {p: fresh(p) for p in precisions}
    expected = {p: [sequential[p](t)._.elmo_data for t in texts] for p in precisions}
    pipelines = {p: fresh(p) for p in precisions}
    threads_before, start, results = torch.get_num_threads(), threading.Barrier(8), {}

    def work(k):
        start.wait()
        for round_ in range(3):
            for i in range(k, len(texts), 8):
                for p in precisions:
                    results[p, i, round_] = pipelines[p](texts[i])._.elmo_data

    workers = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert len(results) == 3 * len(texts) * len(precisions), "every call returned"
    assert all(np.array_equal(layers, expected[p][i]) for (p, i, _), layers in results.items())
    assert torch.get_num_threads() == threads_before


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_memory_stays_bounded_over_10000_docs(nlp):
    rng = np.random.default_rng(0)
    words = "the of and a to in is was he for it with as his on be at by this had not are but from".split()

    def texts(count):
        for _ in range(count):
            yield " ".join(rng.choice(words, size=int(rng.integers(1, 30)))) + " " + str(rng.integers(10**9))

    for _ in nlp.pipe(texts(1000), batch_size=64):
        pass
    after_warmup = _rss_mb()
    for _ in nlp.pipe(texts(9000), batch_size=64):
        pass
    growth = _rss_mb() - after_warmup
    assert growth < 60, f"RSS grew by {growth:.0f} MB over 9,000 more docs"


def test_pipeline_directory_with_a_missing_file(nlp, tmp_path):
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "pipeline" / "elmo" / "model").unlink()
    with pytest.raises(ValueError, match=r"pipeline/elmo is missing its model file \(the biLM weights"):
        spacy.load(tmp_path / "pipeline")


def test_malicious_pickle_in_pipeline_or_checkpoint_is_refused(nlp, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "pipeline" / "elmo" / "model").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match="is not a readable elmo model"):
        spacy.load(tmp_path / "pipeline")
    from spacy_elmo.training.loop.checkpoint import load_checkpoint

    checkpoint = tmp_path / "step-00000001"
    checkpoint.mkdir()
    for name in ("optimizer.safetensors", "rng.safetensors"):
        (checkpoint / name).write_bytes(pickle.dumps(Payload()))
    (checkpoint / "trainer.json").write_text("{}")
    (checkpoint / "optimizer.json").write_text('{"param_groups": [], "scalars": {}}')
    with pytest.raises(ValueError, match="is unreadable"):
        load_checkpoint(checkpoint)
    assert not marker.exists()
