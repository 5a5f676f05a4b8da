"""What a doc keeps (the store and store_dtype settings): its size, and vectors that work in every store."""

import numpy as np
import pytest
import spacy
from conftest import make_nlp
from promises import promised

from spacy_elmo.pipeline.storage import bytes_per_token

TEXT = "The bank raised its rates. We sat on the bank of the river and  watched the boats."
STORES = ("layers", "mix", "tensor")
DTYPES = ("float32", "float16")


@pytest.fixture(scope="module")
def reference(tiny_weights):
    """The doc as the default store keeps it: every layer, float32."""
    return make_nlp(tiny_weights)(TEXT)


def added_bytes_per_token(nlp, text):
    """Bytes of doc.to_bytes() per token, over those of the same doc without the elmo component."""
    doc = nlp(text)
    with nlp.select_pipes(disable=["elmo"]):
        plain = nlp(text)
    return (len(doc.to_bytes()) - len(plain.to_bytes())) / len(doc)


def test_bytes_per_token_follow_the_store(tiny_weights):
    text = "The bank raised its interest rates again. " * 150  # 1,200 tokens: per-doc headers vanish
    measured = {}
    for store in STORES:
        for dtype in DTYPES:
            measured[store, dtype] = added_bytes_per_token(make_nlp(tiny_weights, store=store, store_dtype=dtype), text)
            expected = bytes_per_token(store, dtype, n_layers=3, width=32)
            assert expected <= measured[store, dtype] <= expected * 1.02, (store, dtype, measured[store, dtype])
    for dtype in DTYPES:
        assert measured["tensor", dtype] < measured["mix", dtype] < measured["layers", dtype]
    for store in STORES:
        assert 0.49 <= measured[store, "float16"] / measured[store, "float32"] <= 0.51
    assert bytes_per_token("layers", "float32", 3, 1024) == 16384, "the original model: 3 layers + doc.tensor"
    assert bytes_per_token("layers", "float32", 3, 1024, with_tensor=False) == 12288


def assert_close(got, want, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == np.float32, "read back as float32"
    if dtype == "float32":
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("store", STORES)
def test_vectors_and_similarity_in_every_store(tiny_weights, reference, store, dtype):
    doc = make_nlp(tiny_weights, store=store, store_dtype=dtype)(TEXT)
    assert [t.has_vector for t in doc] == [t.has_vector for t in reference]
    for token, want in zip(doc, reference, strict=True):
        assert_close(token._.elmo, want._.elmo, dtype)
        assert_close(token.vector, want.vector, dtype)
    for sentence, want in zip(doc.sents, reference.sents, strict=True):
        assert_close(sentence._.elmo, want._.elmo, dtype)
        assert_close(sentence.vector, want.vector, dtype)
    assert_close(doc._.elmo, reference._.elmo, dtype)
    assert_close(doc.vector, reference.vector, dtype)
    tolerance = 1e-5 if dtype == "float32" else 1e-2
    assert abs(doc[1].similarity(doc[10]) - reference[1].similarity(reference[10])) <= tolerance
    assert abs(doc[:6].similarity(doc[6:]) - reference[:6].similarity(reference[6:])) <= tolerance


@pytest.mark.parametrize("store", STORES)
def test_what_each_store_keeps(tiny_weights, store):
    doc = make_nlp(tiny_weights, store=store, store_dtype="float16")(TEXT)
    kept = {"layers": doc._.elmo_data, "mix": doc._.elmo_vectors, "tensor": doc.tensor}[store]
    assert kept.dtype == np.float16 and kept.shape[-2:] == (len(doc), 32)
    assert (doc._.elmo_data is not None) == (store == "layers")
    assert (doc._.elmo_vectors is not None) == (store == "mix")
    assert (doc.tensor.size > 0) == (store != "mix"), "the layers store writes doc.tensor for the hooks"
    if store == "layers":
        assert doc[1]._.elmo_layers.shape == (3, 32) and doc[1]._.elmo_layers.dtype == np.float32
    else:
        with pytest.raises(ValueError, match=f"store = '{store}'.*set store = \"layers\""):
            _ = doc[1]._.elmo_layers


def test_a_store_survives_serialization(tiny_weights):
    from spacy.tokens import Doc

    from spacy_elmo import install_vector_hooks

    nlp = make_nlp(tiny_weights, store="tensor", store_dtype="float16")
    doc = nlp(TEXT)
    restored = install_vector_hooks(Doc(nlp.vocab).from_bytes(doc.to_bytes()))
    np.testing.assert_array_equal(restored.vector, doc.vector)
    assert restored[1].similarity(restored[10]) == doc[1].similarity(doc[10])


def test_invalid_store_settings(tiny_weights):
    with pytest.raises(ValueError, match=r"store must be one of \('layers', 'mix', 'tensor'\), got 'all': 'layers'"):
        make_nlp(tiny_weights, store="all")
    with pytest.raises(ValueError, match=r"store_dtype must be one of \('float32', 'float16'\), got 'bfloat16'"):
        make_nlp(tiny_weights, store_dtype="bfloat16")


def test_the_store_travels_with_a_saved_pipeline(tiny_weights, tmp_path):
    nlp = make_nlp(tiny_weights, store="mix", store_dtype="float16")
    expected = nlp(TEXT)._.elmo_vectors
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").settings.store == "mix" and loaded.get_pipe("elmo").settings.store_dtype == "float16"
    assert loaded.config["components"]["elmo"]["store"] == "mix"
    doc = loaded(TEXT)
    assert doc._.elmo_data is None
    np.testing.assert_array_equal(doc._.elmo_vectors, expected)


def test_float16_keeps_each_value_within_the_promised_relative_error(tiny_weights):
    """docs/component.md: values read back within float16-store (docs/promises.md) of float32, relative;
    below float16's smallest normal number (6.1e-5) its steps are 2**-24 apart, half a step at most."""
    exact = make_nlp(tiny_weights)(TEXT)._.elmo_data
    kept = make_nlp(tiny_weights, store_dtype="float16")(TEXT)._.elmo_data
    assert kept.dtype == np.float16 and kept.shape == exact.shape and exact.size > 0
    error = np.abs(kept.astype(np.float32) - exact)
    assert (error <= promised("float16-store") * np.abs(exact) + 2.0**-25).all(), error.max()
