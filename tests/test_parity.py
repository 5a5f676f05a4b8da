"""Conformance with the original TensorFlow biLM (shared/fixtures/elmo-allennlp)."""

import h5py
import numpy as np
import pytest
import torch
from promises import promised

from spacy_elmo import embed_sentences, import_original, reset_state
from spacy_elmo.network.chars import encode_tokens

TOLERANCE = promised("parity")  # docs/models.md; measured 9.5e-7 on an Intel Xeon, 1.19e-6 on a Zen 4


def reference_top_layer(fixture_dir, stream, sentence):
    with h5py.File(fixture_dir / f"lm_embeddings_{stream}.hdf5", "r") as handle:
        return handle[str(sentence)][...]  # (2, T, P): forward, backward


def as_directions(layers):
    top = layers[-1]
    half = top.shape[1] // 2
    return np.stack([top[:, :half], top[:, half:]])


@pytest.mark.parametrize("path", ["invariant", "differentiable"])
def test_token_representations_match_original(fixture_dir, fixture_bilm, fixture_runner, path):
    vocab = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r") as handle:
        expected = handle["embedding"][...]
    assert len(vocab) == expected.shape[0]
    char_ids = torch.from_numpy(encode_tokens(vocab)).long()
    if path == "invariant":  # inference: batch-invariant kernels, no gradients
        got = fixture_runner.token_representations(char_ids)
        assert not got.requires_grad
    else:  # training: the char encoder's autograd forward
        got = fixture_bilm.char_encoder(char_ids)
        assert got.requires_grad
    assert np.abs(got.detach().numpy() - expected).max() < TOLERANCE


def test_first_sentence_of_each_stream_stateless(fixture_dir, fixture_bilm, fixture_sentences):
    firsts = [stream[0] for stream in fixture_sentences]
    for stream, layers in enumerate(embed_sentences(fixture_bilm, firsts)):
        expected = reference_top_layer(fixture_dir, stream, 0)
        assert as_directions(layers).shape == expected.shape
        assert np.abs(as_directions(layers) - expected).max() < TOLERANCE


def test_all_sentences_stateful_three_rows_per_batch(fixture_dir, fixture_runner, fixture_sentences):
    reset_state(fixture_runner)
    try:
        worst = 0.0
        for index in range(10):
            batch = [stream[index] for stream in fixture_sentences]
            for stream, layers in enumerate(embed_sentences(fixture_runner, batch, stateful=True)):
                error = np.abs(as_directions(layers) - reference_top_layer(fixture_dir, stream, index)).max()
                worst = max(worst, error)
        assert worst < TOLERANCE
    finally:
        reset_state(fixture_runner)


def test_later_sentences_need_the_carried_state(fixture_dir, fixture_bilm, fixture_sentences):
    """Negative control: without the carried state sentences 1..9 are far off, so the stateful
    test above really exercises the state."""
    errors = [
        np.abs(
            as_directions(embed_sentences(fixture_bilm, [stream[i]])[0]) - reference_top_layer(fixture_dir, k, i)
        ).max()
        for k, stream in enumerate(fixture_sentences)
        for i in range(1, 10)
    ]
    assert max(errors) > 0.1


@pytest.mark.parametrize("change", [{"residual": False}, {"cell_clip": None, "proj_clip": None}])
def test_architecture_details_matter(fixture_dir, fixture_bilm, fixture_sentences, change):
    """Negative control: dropping the residual connection or the clipping breaks parity."""
    altered = import_original(
        fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", fixture_bilm.config.replace(**change)
    )
    layers = embed_sentences(altered, [fixture_sentences[0][0]])[0]
    assert np.abs(as_directions(layers) - reference_top_layer(fixture_dir, 0, 0)).max() > 1e-2


def test_stateful_rows_continue_independently(fixture_runner, fixture_sentences):
    """Row i of a stateful call continues row i of the previous one, also when later calls have
    fewer rows; reset_state starts afresh."""
    streams = fixture_sentences
    reset_state(fixture_runner)
    embed_sentences(fixture_runner, [streams[0][0], streams[1][0]], stateful=True)
    second = embed_sentences(fixture_runner, [streams[0][1]], stateful=True)[0]
    reset_state(fixture_runner)
    embed_sentences(fixture_runner, [streams[0][0]], stateful=True)
    alone = embed_sentences(fixture_runner, [streams[0][1]], stateful=True)[0]
    reset_state(fixture_runner)
    fresh = embed_sentences(fixture_runner, [streams[0][1]], stateful=True)[0]
    reset_state(fixture_runner)
    assert np.array_equal(second, alone)
    assert not np.allclose(second, fresh)
    assert np.array_equal(fresh, embed_sentences(fixture_runner, [streams[0][1]])[0])
