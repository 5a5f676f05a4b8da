import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import spacy
from conftest import make_nlp, random_bilm
from spacy.tokens import Doc, DocBin

from spacy_elmo import BiLMRunner, embed_sentences, install_vector_hooks, load_bilm, save_bilm
from spacy_elmo.pipeline.bilm_layer import encoder_of

TEXT = "The bank raised its rates. We sat on the bank of the river and watched the boats."


@pytest.fixture(scope="module")
def nlp(tiny_weights):
    return make_nlp(tiny_weights)


def cosine(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_attributes_have_the_documented_shapes(nlp):
    doc = nlp(TEXT)
    assert doc._.elmo_data.shape == (3, len(doc), 32) and doc._.elmo_data.dtype == np.float32
    assert doc[1]._.elmo_layers.shape == (3, 32)
    for value in (doc[1]._.elmo, doc[2:5]._.elmo, doc._.elmo, doc[1].vector, doc[2:5].vector, doc.vector):
        assert value.shape == (32,) and value.dtype == np.float32
    assert isinstance(doc._.elmo_data, np.ndarray)


def standardized(vectors):
    return (vectors - vectors.mean(-1, keepdims=True)) / (vectors.std(-1, keepdims=True) + 1e-6)


def test_default_mix_is_the_average_of_all_layers_each_standardized(nlp):
    doc = nlp(TEXT)
    token = doc[1]
    np.testing.assert_allclose(token._.elmo, standardized(token._.elmo_layers).mean(axis=0), rtol=1e-5, atol=1e-6)
    assert token._.elmo_layers.std(axis=1).std() > 0.01, "the layers differ in scale, so standardizing matters"
    sentence = list(doc.sents)[0]
    words = [t for t in sentence]
    np.testing.assert_allclose(sentence._.elmo, np.mean([t._.elmo for t in words], axis=0), rtol=1e-5, atol=1e-6)


def test_raw_average_without_layer_norm(tiny_weights):
    doc = make_nlp(tiny_weights, layer_norm=False)(TEXT)
    np.testing.assert_allclose(doc[1]._.elmo, doc[1]._.elmo_layers.mean(axis=0), rtol=1e-6, atol=1e-7)


def test_configured_mix_and_max_pooling(tiny_weights):
    nlp = make_nlp(tiny_weights, layer_weights=[0.0, 0.0, 1.0], gamma=2.0, pooling="max", layer_norm=False)
    doc = nlp(TEXT)
    np.testing.assert_allclose(doc[3]._.elmo, 2.0 * doc._.elmo_data[-1, 3], rtol=1e-6)
    span = doc[0:5]
    np.testing.assert_allclose(span._.elmo, np.max([t._.elmo for t in span], axis=0))


def test_vectors_and_similarity_use_elmo(nlp):
    doc = nlp(TEXT)
    bank, other_bank = doc[1], doc[11]
    assert np.array_equal(bank.vector, bank._.elmo)
    first, second = list(doc.sents)
    assert np.array_equal(first.vector, first._.elmo) and np.array_equal(doc.vector, doc._.elmo)
    assert bank.has_vector and first.has_vector and doc.has_vector
    assert bank.similarity(other_bank) == pytest.approx(cosine(bank._.elmo, other_bank._.elmo))
    assert first.similarity(second) == pytest.approx(cosine(first._.elmo, second._.elmo))
    assert doc.similarity(first) == pytest.approx(cosine(doc._.elmo, first._.elmo))
    assert bank.vector_norm == pytest.approx(float(np.linalg.norm(bank._.elmo)))
    assert not np.array_equal(bank.vector, other_bank.vector), "the same word in another context"


def test_sentence_vectors_differ_from_doc_vector(nlp):
    doc = nlp(TEXT)
    sentences = list(doc.sents)
    assert len(sentences) == 2
    assert not np.allclose(sentences[0]._.elmo, doc._.elmo)
    assert not np.allclose(sentences[0]._.elmo, sentences[1]._.elmo)


def test_same_sentence_in_different_docs_is_identical(nlp):
    first = nlp("Prices fell sharply. The cat sat on the mat.")
    second = nlp("The cat sat on the mat. Nothing else happened today, as far as anyone knows.")
    a = first._.elmo_data[:, 4:11]
    b = second._.elmo_data[:, 0:7]
    assert [t.text for t in first[4:11]] == [t.text for t in second[0:7]]
    assert np.array_equal(a, b)


def test_component_layers_equal_the_bilm_outputs(tmp_path, fixture_bilm, fixture_sentences):
    save_bilm(fixture_bilm, tmp_path / "converted")
    nlp = make_nlp(tmp_path / "converted", sentencizer=False)
    for sentence in (fixture_sentences[0][0], fixture_sentences[2][3]):
        doc = nlp(Doc(nlp.vocab, words=sentence))
        assert np.array_equal(doc._.elmo_data, embed_sentences(fixture_bilm, [sentence])[0])


def test_windows_without_sentence_boundaries(tiny_weights):
    nlp = make_nlp(tiny_weights, sentencizer=False, max_sentence_length=4)
    doc = nlp("one two three four five six seven eight nine ten")
    bilm = load_bilm(tiny_weights)
    words = [t.text for t in doc]
    expected = embed_sentences(bilm, [words[0:4], words[4:8], words[8:10]])
    assert np.array_equal(doc._.elmo_data, np.concatenate(expected, axis=1))


def test_pipe_batching_and_processes_match_one_by_one(nlp):
    nlp("The parent process computes first, so its OpenMP thread pool exists when workers fork.")
    texts = [TEXT, "Short.", "", "A much longer text. " * 12, "Emoji 😀 and 中文 text.", TEXT[::-1]]
    single = [nlp(text) for text in texts]
    batched = list(nlp.pipe(texts, batch_size=4))
    forked = list(nlp.pipe(texts, batch_size=2, n_process=2))
    for one, two, three in zip(single, batched, forked, strict=True):
        assert np.array_equal(one._.elmo_data, two._.elmo_data)
        assert np.array_equal(one._.elmo_data, three._.elmo_data)
        for token_a, token_b in zip(one, three, strict=True):
            assert np.array_equal(token_a.vector, token_b.vector)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_pipeline_pickles_and_its_copy_gives_the_same_bits_from_empty_caches(tiny_weights, precision):
    nlp = make_nlp(tiny_weights, sentence_cache_tokens=1000, precision=precision)
    expected = nlp(TEXT)._.elmo_data
    copy = pickle.loads(pickle.dumps(nlp))
    elmo = copy.get_pipe("elmo")
    made = encoder_of(elmo.model).runner
    assert made is not None and made.backend is not None, "the copy selects its backend when it is unpickled"
    assert elmo.runner is made, "not in a call"
    assert len(elmo.runner.token_cache) == 0 and elmo._sentences._tokens == 0, "caches are rebuilt, not copied"
    assert elmo.runner.precision == nlp.get_pipe("elmo").runner.precision
    assert np.array_equal(copy(TEXT)._.elmo_data, expected)


# A worker started by spawn (the default on macOS and Windows) or a fork server unpickles the pipeline.
START_METHOD_CHECK = """
import json, multiprocessing, sys
sys.path.insert(0, {tests!r})
from conftest import make_nlp
if __name__ == "__main__":
    multiprocessing.set_start_method({method!r}, force=True)
    nlp = make_nlp({weights!r})
    texts = ["The bank raised its rates.", "Short.", "", "A longer text. " * 6, "Emoji 😀 and 中文."]
    alone = [nlp(text)._.elmo_data.tolist() for text in texts]
    workers = [doc._.elmo_data.tolist() for doc in nlp.pipe(texts, batch_size=2, n_process=2)]
    print(json.dumps(alone == workers))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", pytest.param("forkserver", marks=pytest.mark.matrix)])
def test_pipe_with_processes_started_by_spawn_or_a_fork_server_matches_one_process(
    tiny_weights, tmp_path, method, fork_hosts
):
    """It failed with "cannot pickle '_thread.lock' object" before the caches pickled without their
    locks. The script runs in a child forked from a host (tests/fork_host.py); the processes it
    starts by ``method`` are new interpreters, as they are for a user."""
    script = tmp_path / "check.py"
    script.write_text(
        START_METHOD_CHECK.format(tests=str(Path(__file__).parent), method=method, weights=str(tiny_weights))
    )
    done = fork_hosts.run([str(script)], os.environ, timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "true"


def test_pipeline_round_trips(nlp, tmp_path):
    expected = nlp(TEXT)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    doc = loaded(TEXT)
    assert np.array_equal(doc._.elmo_data, expected._.elmo_data)
    assert np.array_equal(doc[1].vector, expected[1].vector), "hooks are installed again after loading"
    rebuilt = spacy.blank("en")
    rebuilt.add_pipe("sentencizer")
    rebuilt.add_pipe("elmo")
    rebuilt.from_bytes(nlp.to_bytes())
    assert np.array_equal(rebuilt(TEXT)._.elmo_data, expected._.elmo_data)


def test_sizes_come_from_the_weights(nlp, tmp_path):
    assert nlp.get_pipe("elmo").bilm.config.projection_dim == 16  # the tiny weights, not the small preset
    assert nlp.config["components"]["elmo"]["model"]["preset"] == "small"
    nlp.to_disk(tmp_path / "pipeline")
    assert spacy.load(tmp_path / "pipeline").get_pipe("elmo").bilm.config.lstm_dim == 48


def test_weights_under_initialize_settings(tiny_weights):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.config["initialize"]["components"]["elmo"] = {"weights": str(tiny_weights)}
    nlp.initialize()
    assert nlp("works")._.elmo_data.shape == (3, 1, 32)


def test_docs_keep_their_layers_through_serialization(nlp):
    doc = nlp(TEXT)
    restored = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert np.array_equal(restored._.elmo_data, doc._.elmo_data)
    assert np.array_equal(restored[1]._.elmo, doc[1]._.elmo)
    assert np.array_equal(restored[1].vector, doc[1].vector), "doc.tensor carries the mixed vectors"
    docbin = DocBin(store_user_data=True)
    docbin.add(doc)
    (from_bin,) = DocBin().from_bytes(docbin.to_bytes()).get_docs(nlp.vocab)
    assert np.array_equal(from_bin._.elmo_data, doc._.elmo_data)
    install_vector_hooks(from_bin)
    assert np.array_equal(from_bin[2:6].vector, doc[2:6].vector)
    unpickled = pickle.loads(pickle.dumps(doc))
    assert np.array_equal(unpickled[1].vector, doc[1].vector) and "vector" in unpickled.user_token_hooks


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "\n\n",
        "word \n\n  word",
        "x" * 300,
        "😀👍🏽 🇩🇪 family: 👨‍👩‍👧‍👦",
        "Mixed Ελληνικά русский 中文 العربية עברית हिन्दी",
    ],
    ids=["empty", "spaces", "newlines", "inner-whitespace", "300-chars", "emoji", "scripts"],
)
def test_awkward_texts(nlp, text):
    doc = nlp(text)
    layers = doc._.elmo_data
    assert layers.shape == (3, len(doc), 32) and np.isfinite(layers).all()
    for token in doc:
        assert token.has_vector == (not token.is_space)
        assert (np.abs(token.vector).sum() == 0) == token.is_space
    assert doc.vector.shape == (32,)
    if not any(not t.is_space for t in doc):
        assert not doc.has_vector and not doc.vector.any()


def test_long_doc_without_boundaries(tiny_weights):
    """A doc no component split into sentences runs in windows of max_sentence_length tokens, over
    several batches. The scale test is test_hardening's document of a million characters."""
    nlp = make_nlp(tiny_weights, sentencizer=False, max_batch_tokens=2048)
    doc = nlp(" ".join(["word", "other", "thing", "."] * 1250))
    assert len(doc) == 5000
    assert doc._.elmo_data.shape == (3, 5000, 32) and np.isfinite(doc._.elmo_data).all()
    assert np.array_equal(doc._.elmo_data[:, 256:512], doc._.elmo_data[:, 512:768]), (
        "identical windows, identical vectors"
    )


def test_uninitialized_component_says_what_to_do():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    with pytest.raises(ValueError, match=r"has no biLM weights yet: call nlp.initialize\(\)"):
        nlp("text")
    with pytest.raises(ValueError, match="needs biLM weights to initialize"):
        nlp.initialize()


def test_invalid_settings(tiny_weights):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="pooling must be one of"):
        nlp.add_pipe("elmo", config={"pooling": "median"})
    with pytest.raises(ValueError, match="max_sentence_length must be a positive integer"):
        nlp.add_pipe("elmo", config={"max_sentence_length": 0})
    nlp.add_pipe("elmo", config={"layer_weights": [0.5, 0.5]})
    with pytest.raises(ValueError, match="layer_weights has 2 values but the biLM has 3 layers"):
        nlp.get_pipe("elmo").initialize(weights=tiny_weights)


def test_docs_without_the_component():
    with pytest.raises(ValueError, match="This Doc has no ELMo vectors"):
        _ = spacy.blank("en")("plain")[0]._.elmo


def test_update_does_nothing_and_says_so(nlp):
    from spacy.training import Example

    elmo = nlp.get_pipe("elmo")
    before = nlp(TEXT)._.elmo_data
    with pytest.warns(UserWarning, match="list it in \\[training\\] frozen_components"):
        losses = elmo.update([Example.from_dict(nlp.make_doc("a b"), {})])
    assert losses == {} and np.array_equal(nlp(TEXT)._.elmo_data, before)


def test_sentence_cache_is_exact_bounded_and_follows_the_weights(tiny_weights, tmp_path):
    nlp = make_nlp(tiny_weights, sentence_cache_tokens=12)
    elmo = nlp.get_pipe("elmo")
    calls = []
    encoder = elmo.model.shims[0]._model
    forward = encoder.forward
    encoder.forward = lambda sentences: calls.append(len(sentences)) or forward(sentences)
    first = nlp("The cat sat. The dog ran.")
    again = nlp("The dog ran. The cat sat.")
    assert calls == [2], "the second doc's sentences both came from the cache"
    assert np.array_equal(first._.elmo_data[:, :4], again._.elmo_data[:, 4:])
    assert np.array_equal(first._.elmo_data, make_nlp(tiny_weights)("The cat sat. The dog ran.")._.elmo_data)
    nlp("A completely different and much longer sentence goes here.")
    assert elmo._sentences._tokens <= 12
    from spacy_elmo import BiLM, BiLMConfig
    from spacy_elmo.pipeline.bilm_layer import set_bilm

    set_bilm(elmo.model, BiLM(BiLMConfig.preset("tiny")))
    before = elmo.model.shims[0]._model
    counted = []
    before.forward = lambda sentences, f=before.forward: counted.append(len(sentences)) or f(sentences)
    nlp("The cat sat.")
    assert counted == [1], "another biLM: nothing is served from the old cache"


def test_the_caches_are_bounded_in_bytes_by_their_settings(tiny_weights):
    nlp = make_nlp(tiny_weights, sentence_cache_tokens=100000, sentence_cache_mb=0.01, token_cache_mb=0.001)
    elmo = nlp.get_pipe("elmo")
    token_bound, sentence_bound = elmo.runner.token_cache.max_bytes, elmo._sentences.max_bytes
    assert (token_bound, sentence_bound) == (1048, 10485)
    texts = [f"Sentence {i} has words{i} and more{i} in it." for i in range(30)]
    for text in texts:  # one at a time: each call's tokens fit the token cache
        doc = nlp(text)
        assert elmo._sentences.nbytes <= sentence_bound and elmo.runner.token_cache.nbytes <= token_bound
    assert len(elmo.runner.token_cache) == token_bound // (elmo.bilm.config.projection_dim * 4)
    assert elmo._sentences.nbytes > sentence_bound // 2, "the cache is used up to its bound"
    assert np.array_equal(doc._.elmo_data, make_nlp(tiny_weights)(texts[-1])._.elmo_data)
    for bad in (-1, -0.5):
        with pytest.raises(ValueError, match=f"token_cache_mb must be a number of megabytes >= 0, got {bad!r}"):
            make_nlp(tiny_weights, token_cache_mb=bad)


def test_sentence_cache_follows_the_precision(tiny_weights):
    nlp = make_nlp(tiny_weights, sentence_cache_tokens=1000)
    text = "The cat sat on the mat."
    exact = nlp(text)._.elmo_data
    elmo = nlp.get_pipe("elmo")
    encoder_of(elmo.model).runner = BiLMRunner(elmo.bilm, precision="int8")  # the biLM run another way
    reduced = nlp(text)._.elmo_data
    assert np.array_equal(reduced, make_nlp(tiny_weights, precision="int8")(text)._.elmo_data)
    assert not np.array_equal(reduced, exact), "int8 layers, not the fp32 ones cached before"


def test_the_sentence_cache_hands_out_layers_only_in_the_dtype_they_were_kept_in():
    """On a GPU float16 layers arrive rounded; a float32 call (fit_centering's) must not get them."""
    from spacy_elmo.pipeline.sentence_cache import SentenceCache

    runner, sentence = BiLMRunner(random_bilm()), ("The", "cat")
    cache = SentenceCache(capacity=100).for_model(runner, np.float16)
    cache.put(sentence, np.zeros((3, 2, 8), dtype=np.float16))
    assert cache.for_model(runner, np.float16).get(sentence) is not None
    assert cache.for_model(runner, np.float32).get(sentence) is None


def test_each_batch_is_queued_before_the_one_before_is_waited_for(tiny_weights, monkeypatch):
    """What lets the host prepare batch k+1 while a GPU runs batch k: the component starts a batch
    (its kernels and its copy back) before it waits for the previous one's layers, and waits for
    every batch once. On a CPU the same order, with nothing in flight."""
    from spacy_elmo.pipeline.sentence_runs import HostCopy

    log = []
    start, wait = HostCopy.start.__func__, HostCopy.wait

    def logged_start(cls, model, layers, dtype=np.float32):
        copy = start(cls, model, layers, dtype)
        copy.number = sum(event == "start" for event, _ in log)
        log.append(("start", copy.number))
        return copy

    def logged_wait(self):
        log.append(("wait", self.number))
        return wait(self)

    monkeypatch.setattr(HostCopy, "start", classmethod(logged_start))
    monkeypatch.setattr(HostCopy, "wait", logged_wait)
    nlp = make_nlp(tiny_weights, max_batch_tokens=10)
    docs = list(
        nlp.pipe(["The cat sat on the mat. It purred.", "Dogs bark at night. Birds sing at dawn."], disable=["elmo"])
    )
    nlp.get_pipe("elmo").predict(docs)
    batches = sum(event == "start" for event, _ in log)
    assert batches >= 3
    queued = [event for k in range(1, batches) for event in (("start", k), ("wait", k - 1))]
    assert log == [("start", 0), *queued, ("wait", batches - 1)]


def test_float16_layers_come_as_the_float32_ones_rounded(tiny_weights):
    """Where a doc keeps only float16 layers, they arrive in float16 (on a GPU, cast before the copy
    back): bitwise the float32 layers rounded, as the store rounded them before."""
    texts = ["The cat sat on the mat.", "Dogs  bark at night."]
    exact = [doc._.elmo_data for doc in make_nlp(tiny_weights, set_vector_hooks=False).pipe(texts)]
    nlp = make_nlp(tiny_weights, set_vector_hooks=False, store_dtype="float16")
    assert nlp.get_pipe("elmo").predict([nlp.make_doc(texts[0])])[0].dtype == np.float16
    for doc, layers in zip(nlp.pipe(texts), exact, strict=True):
        assert doc._.elmo_data.dtype == np.float16
        assert np.array_equal(doc._.elmo_data.view(np.uint16), layers.astype(np.float16).view(np.uint16))
