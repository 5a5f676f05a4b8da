"""Opt-in bf16 inference: close to fp32, still independent of batch companions, weights tracked."""

import numpy as np
import pytest
import torch
from conftest import make_nlp, random_bilm

from spacy_elmo import embed_sentences

SENTENCES = [
    ["The", "bank", "raised", "its", "interest", "rates", "."],
    ["We", "sat", "on", "the", "bank", "of", "the", "river", "."],
    ["Short", "."],
]


def cosines(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def assert_close_to_fp32(bilm, sentences):
    """bf16 within 2% of the largest fp32 value and cosine >= 0.999 for every token of every layer."""
    bilm.precision = "fp32"
    exact = embed_sentences(bilm, sentences)
    bilm.precision = "bf16"
    reduced = embed_sentences(bilm, sentences)
    for want, got in zip(exact, reduced):
        assert not np.array_equal(want, got), "bf16 should actually run in bf16"
        assert np.abs(want - got).max() <= 0.02 * np.abs(want).max()
        assert cosines(want, got).min() >= 0.999


def test_bf16_is_close_to_fp32_on_the_tiny_preset():
    torch.manual_seed(5)
    assert_close_to_fp32(random_bilm("tiny"), SENTENCES)


def test_bf16_is_close_to_fp32_on_the_original_release(fixture_bilm, fixture_sentences):
    assert_close_to_fp32(fixture_bilm, fixture_sentences[0])
    fixture_bilm.precision = "fp32"


def test_bf16_results_do_not_depend_on_batch_companions():
    torch.manual_seed(6)
    bilm = random_bilm("tiny")
    bilm.precision = "bf16"
    together = embed_sentences(bilm, SENTENCES)
    for sentence, layers in zip(SENTENCES, together):
        np.testing.assert_array_equal(embed_sentences(bilm, [sentence])[0], layers)


def test_switching_back_to_fp32_is_exact_again():
    torch.manual_seed(7)
    bilm = random_bilm("tiny")
    exact = embed_sentences(bilm, SENTENCES)
    bilm.precision = "bf16"
    embed_sentences(bilm, SENTENCES)  # fills the token cache in bf16
    bilm.precision = "fp32"
    for want, got in zip(exact, embed_sentences(bilm, SENTENCES)):
        np.testing.assert_array_equal(got, want)


def test_bf16_copies_follow_weights_changed_in_place():
    torch.manual_seed(8)
    bilm, fresh = random_bilm("tiny"), random_bilm("tiny")
    bilm.precision = fresh.precision = "bf16"
    embed_sentences(bilm, SENTENCES)  # caches bf16 copies of the old weights
    with torch.no_grad():
        for mine, theirs in zip(bilm.parameters(), fresh.parameters()):
            mine.copy_(theirs)
    for want, got in zip(embed_sentences(fresh, SENTENCES), embed_sentences(bilm, SENTENCES)):
        np.testing.assert_array_equal(got, want)


def test_unknown_precision_and_fused_bf16_are_refused():
    bilm = random_bilm("tiny")
    with pytest.raises(ValueError, match="precision must be one of .*'int4'"):
        bilm.precision = "int4"
    bilm.precision, bilm.lstm_path = "bf16", "fused"
    with pytest.raises(ValueError, match="bf16 runs the step loop"):
        embed_sentences(bilm, SENTENCES)


def test_the_component_setting(tiny_weights):
    exact = make_nlp(tiny_weights)("The bank raised its rates.")._.elmo_data
    reduced = make_nlp(tiny_weights, precision="bf16")("The bank raised its rates.")._.elmo_data
    assert not np.array_equal(exact, reduced)
    assert cosines(exact, reduced).min() >= 0.999
    with pytest.raises(ValueError, match="precision must be one of"):
        make_nlp(tiny_weights, precision="fp8")


def test_the_setting_travels_with_a_saved_pipeline(tiny_weights, tmp_path):
    import spacy

    nlp = make_nlp(tiny_weights, precision="bf16")
    expected = nlp("The bank raised its rates.")._.elmo_data
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").cfg["precision"] == "bf16"
    np.testing.assert_array_equal(loaded("The bank raised its rates.")._.elmo_data, expected)
