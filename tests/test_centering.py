"""Similarity that means something: the common direction(s) of the vectors, estimated from real
text, are removed before vectors reach token.vector / .similarity (spacy_elmo.pipeline.centering)."""

import warnings

import numpy as np
import pytest
import spacy
import srsly
from conftest import SHARED, make_nlp
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_elmo import install_vector_hooks
from spacy_elmo.pipeline.centering import MIN_CENTERING_TOKENS, Centering, check_centering_settings

TEXT = "The bank raised its rates. We sat on the bank of the river and watched the boats."
REFERENCE = SHARED / "data" / "corpus" / "valid.txt"


def anisotropic(n=2000, width=16, seed=0):
    """Random vectors plus a large common vector and a strong shared direction."""
    rng = np.random.default_rng(seed)
    common, direction = rng.normal(size=width) * 5, rng.normal(size=width)
    return rng.normal(size=(n, width)) + common + np.outer(rng.normal(size=n) * 4, direction)


def mean_pair_cosine(vectors, seed=0):
    """Mean cosine of random pairs of the rows."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = unit[np.random.default_rng(seed).permutation(len(unit))]
    return float((unit[::2] * unit[1::2]).sum(axis=1).mean())


def test_estimate_removes_the_mean_and_the_top_directions():
    vectors = anisotropic()
    assert mean_pair_cosine(vectors) > 0.5
    mean_only, top = Centering.estimate(vectors, 0), Centering.estimate(vectors, 2)
    np.testing.assert_allclose(mean_only.mean, vectors.mean(axis=0), rtol=1e-5)
    assert mean_only.directions.shape == (0, 16) and top.directions.shape == (2, 16)
    np.testing.assert_allclose(top.directions @ top.directions.T, np.eye(2), atol=1e-5)
    centred = top.apply(vectors)
    assert abs(mean_pair_cosine(centred)) < 0.05
    np.testing.assert_allclose(centred @ top.directions.T, 0, atol=1e-4)
    _, _, right = np.linalg.svd(vectors - vectors.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(np.abs(top.directions @ right[:2].T), np.eye(2), atol=1e-4)


def test_estimate_and_apply_refuse_bad_shapes():
    with pytest.raises(ValueError, match="at least 2 vectors"):
        Centering.estimate(np.ones(16))
    with pytest.raises(ValueError, match="remove_directions < 16"):
        Centering.estimate(anisotropic(), 16)
    with pytest.raises(ValueError, match="16-dimensional vectors, not 8-dimensional"):
        Centering.estimate(anisotropic()).apply(np.ones((3, 8)))


@pytest.fixture(scope="module")
def centred_nlp(tiny_weights):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(tiny_weights), "center_vectors": True, "remove_directions": 2})
    nlp.config["initialize"]["components"]["elmo"] = {"centering_text": str(REFERENCE), "centering_tokens": 3000}
    nlp.initialize()
    return nlp


def test_initialize_estimates_from_the_text_given(centred_nlp):
    centering = centred_nlp.get_pipe("elmo").centering
    assert 3000 <= centering.tokens < 3000 + 300 and centering.directions.shape == (2, 32)
    doc = centred_nlp(TEXT)
    bank, other = doc[1], doc[11]
    np.testing.assert_allclose(bank.vector, centering.apply(bank._.elmo), rtol=1e-6)
    centred = [centering.apply(t._.elmo) for t in doc]
    expected = float(np.dot(centred[1], centred[11]) / np.linalg.norm(centred[1]) / np.linalg.norm(centred[11]))
    assert bank.similarity(other) == pytest.approx(expected, rel=1e-5)
    sentence = list(doc.sents)[0]
    np.testing.assert_allclose(sentence.vector, np.mean(centred[: len(sentence)], axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(doc.vector, np.mean(centred, axis=0), rtol=1e-5, atol=1e-6)
    assert not np.allclose(bank._.elmo, bank.vector), "token._.elmo stays the raw ELMo vector"


def test_centred_vectors_are_less_alike_than_raw_ones(centred_nlp):
    tokens = [t for doc in centred_nlp.pipe(REFERENCE.read_text().splitlines()[200:260]) for t in doc]
    raw, centred = np.array([t._.elmo for t in tokens]), np.array([t.vector for t in tokens])
    assert mean_pair_cosine(raw) > 0.3 and abs(mean_pair_cosine(centred)) < 0.1


def test_whitespace_tokens_keep_zero_vectors(centred_nlp):
    doc = centred_nlp("Two  spaces here.")
    space = [t for t in doc if t.is_space][0]
    assert not space.has_vector and not space.vector.any()


def test_the_estimate_is_saved_with_the_pipeline(centred_nlp, tiny_weights, tmp_path):
    centred_nlp.to_disk(tmp_path / "pipeline")
    from_bytes = spacy.blank("en")
    from_bytes.add_pipe("sentencizer")
    from_bytes.add_pipe("elmo", config={"weights": str(tiny_weights), "center_vectors": True, "remove_directions": 2})
    from_bytes.from_bytes(centred_nlp.to_bytes())
    expected = centred_nlp.get_pipe("elmo").centering
    for loaded in (spacy.load(tmp_path / "pipeline"), from_bytes):
        centering = loaded.get_pipe("elmo").centering
        np.testing.assert_array_equal(centering.mean, expected.mean)
        np.testing.assert_array_equal(centering.directions, expected.directions)
        np.testing.assert_array_equal(loaded(TEXT)[1].vector, centred_nlp(TEXT)[1].vector)


def test_saved_estimate_keeps_every_float32_bit_and_old_lists_still_load():
    """Values with more than ten significant digits, tiny and subnormal ones included: a list of
    floats through the JSON writer came back an ulp off (0.00072539236862 -> 0.0007253924)."""
    mean = np.array([7.2539236862e-04, -1.2345678e-30, 3.0e-42, 123.456789, -0.1], dtype=np.float32)
    directions = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    original = Centering(mean, directions, tokens=1234)
    written = srsly.json_loads(srsly.json_dumps({"centering": original.as_config()}))["centering"]
    loaded = Centering.from_value(written)
    assert loaded.mean.tobytes() == mean.tobytes() and loaded.directions.tobytes() == directions.tobytes()
    assert loaded.tokens == 1234 and loaded.directions.shape == (2, 5)
    assert Centering.from_value(Centering(mean, directions[:0], 5).as_config()).directions.shape == (0, 5)
    old_form = {"mean": [0.5, -1.0], "directions": [], "tokens": 3}
    np.testing.assert_array_equal(Centering.from_value(old_form).mean, [0.5, -1.0])


def test_docs_keep_their_centering_through_docbin(centred_nlp):
    doc = centred_nlp(TEXT)
    docbin = DocBin(store_user_data=True)
    docbin.add(doc)
    (back,) = DocBin().from_bytes(docbin.to_bytes()).get_docs(spacy.blank("en").vocab)
    install_vector_hooks(back)
    np.testing.assert_array_equal(back[1].vector, doc[1].vector)
    assert back[1].similarity(back[11]) == doc[1].similarity(doc[11])


def test_examples_are_the_text_when_none_is_given(tiny_weights, tmp_path):
    nlp = make_nlp(tiny_weights, sentencizer=True, center_vectors=False)
    lines = REFERENCE.read_text().splitlines()[:60]
    examples = [Example(doc, doc) for doc in nlp.pipe(lines)]
    fresh = spacy.blank("en")
    fresh.add_pipe("sentencizer")
    fresh.add_pipe("elmo", config={"weights": str(tiny_weights)})
    fresh.initialize(lambda: examples)
    elmo = fresh.get_pipe("elmo")
    centering = elmo.centering_estimate
    assert centering.tokens == sum(len(eg.reference) for eg in examples) and centering.directions.shape == (0, 32)
    assert elmo.centering is None, "estimated, but center_vectors is off by default: the hooks stay raw"
    doc = fresh(TEXT)
    np.testing.assert_array_equal(doc[1].vector, doc[1]._.elmo)
    fresh.to_disk(tmp_path / "pipeline")
    turned_on = spacy.load(tmp_path / "pipeline", config={"components": {"elmo": {"center_vectors": True}}})
    doc = turned_on(TEXT)
    np.testing.assert_allclose(doc[1].vector, centering.apply(doc[1]._.elmo), rtol=1e-6)
    assert not np.allclose(doc[1].vector, doc[1]._.elmo), "turned on at load, the saved estimate is used"


def test_center_vectors_turned_off_at_load_keeps_the_estimate_unused(centred_nlp, tmp_path):
    centred_nlp.to_disk(tmp_path / "pipeline")
    raw = spacy.load(
        tmp_path / "pipeline", config={"components": {"elmo": {"center_vectors": False, "remove_directions": 0}}}
    )
    assert raw.get_pipe("elmo").centering is None and raw.get_pipe("elmo").centering_estimate is not None
    doc = raw(TEXT)
    np.testing.assert_array_equal(doc[1].vector, doc[1]._.elmo)


def test_too_little_text_warns_and_leaves_vectors_raw(tiny_weights):
    with pytest.warns(UserWarning, match=f"3 tokens are fewer than the {MIN_CENTERING_TOKENS} needed"):
        nlp = make_nlp(tiny_weights, center_vectors=True)
    assert nlp.get_pipe("elmo").centering is None
    doc = nlp(TEXT)
    np.testing.assert_array_equal(doc[1].vector, doc[1]._.elmo)
    with pytest.raises(ValueError, match="fewer than the"):
        nlp.get_pipe("elmo").fit_centering([Doc(nlp.vocab, words=["too", "short"])])


def test_center_vectors_off_is_quiet_and_raw(tiny_weights):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nlp = make_nlp(tiny_weights, center_vectors=False)
    elmo = nlp.get_pipe("elmo")
    elmo.fit_centering(nlp.pipe(REFERENCE.read_text().splitlines()[:60]))
    assert elmo.centering is None, "off means off, even with an estimate"
    doc = nlp(TEXT)
    np.testing.assert_array_equal(doc[1].vector, doc[1]._.elmo)
    assert doc._.elmo_centering is None


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"remove_directions": -1}, "remove_directions must be an integer >= 0"),
        ({"center_vectors": False, "remove_directions": 2}, "needs center_vectors = true"),
    ],
)
def test_invalid_centering_settings(tiny_weights, settings, message):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("elmo", config={"weights": str(tiny_weights), **settings})


@pytest.mark.parametrize(
    "center, directions, message",
    [(True, 1.5, "must be an integer >= 0.*got 1.5"), (True, True, "got True"), ("yes", 0, "true or false")],
)
def test_setting_types_are_checked(center, directions, message):
    with pytest.raises(ValueError, match=message):
        check_centering_settings(center, directions)


def test_missing_centering_text_is_named(tiny_weights, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_weights)})
    nlp.config["initialize"]["components"]["elmo"] = {"centering_text": str(tmp_path / "nothing.txt")}
    with pytest.raises(ValueError, match="nothing.txt' is not a .txt file or a folder"):
        nlp.initialize()
