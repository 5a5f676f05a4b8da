"""The GPU code path: runs where CUDA is available, skipped elsewhere."""

import numpy as np
import pytest
import torch
from conftest import make_nlp, random_bilm

from spacy_elmo import embed_sentences

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TEXT = "The bank raised its rates. We sat on the bank of the river."
SENTENCES = [["A", "short", "one", "."], ["And", "a", "somewhat", "longer", "sentence", "follows", "it", "."], []]


@pytest.fixture
def on_gpu():
    import spacy

    spacy.require_gpu()
    yield
    spacy.require_cpu()


def test_component_runs_on_cuda_and_returns_numpy(tiny_weights, on_gpu):
    import cupy

    nlp = make_nlp(tiny_weights)
    elmo = nlp.get_pipe("elmo")
    assert elmo.bilm.device.type == "cuda"
    layers = elmo.model.predict([["inside", "the", "model"]])
    assert isinstance(layers[0], cupy.ndarray), "tensors cross to cupy by DLPack, no host copy"
    doc = nlp(TEXT)
    assert isinstance(doc._.elmo_data, np.ndarray) and isinstance(doc[1].vector, np.ndarray)


def test_gpu_matches_cpu(tiny_weights):
    import spacy

    cpu_layers = make_nlp(tiny_weights)(TEXT)._.elmo_data
    spacy.require_gpu()
    try:
        gpu_layers = make_nlp(tiny_weights)(TEXT)._.elmo_data
    finally:
        spacy.require_cpu()
    np.testing.assert_allclose(gpu_layers, cpu_layers, rtol=0, atol=1e-4)


@pytest.mark.parametrize("path", ["step", "fused"])
def test_bitwise_identical_whatever_the_batch_on_gpu(path):
    torch.manual_seed(0)
    bilm = random_bilm().cuda()
    bilm.lstm_path = path
    alone = embed_sentences(bilm, [SENTENCES[1]])[0]
    batch = [SENTENCES[0]] * 40 + [SENTENCES[1]] + [SENTENCES[0][:2]] * 300
    assert np.array_equal(embed_sentences(bilm, batch)[40], alone)


def test_fused_agrees_with_step_loop_on_gpu_even_where_the_process_allows_tf32():
    """cuDNN's LSTM takes TF32 by default (1.3e-4 apart from the step loop on an H100); inference
    switches it off for its calls, whatever the process asked for, and puts that back."""
    torch.manual_seed(0)
    bilm = random_bilm(lstm_dim=256, projection_dim=64).cuda()
    tokens = torch.randn(40, 64, device="cuda")
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        with torch.no_grad():
            step, _ = bilm.contextualize(tokens, [10, 30], path="step")
            fused, _ = bilm.contextualize(tokens, [10, 30], path="fused")
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert (step - fused).abs().max().item() < 1e-5


def test_a_thread_other_than_the_one_that_chose_the_gpu_gets_the_same_layers(tiny_weights, on_gpu):
    """CUDA's current device is per thread (Ray Data and web servers call from worker threads)."""
    import threading

    nlp = make_nlp(tiny_weights)
    here = nlp(TEXT)._.elmo_data
    there = []
    thread = threading.Thread(target=lambda: there.append(nlp(TEXT)._.elmo_data))
    thread.start()
    thread.join(60)
    assert len(there) == 1 and np.array_equal(there[0], here)


def test_original_parity_on_gpu(fixture_bilm, fixture_sentences, fixture_dir):
    import h5py

    bilm = fixture_bilm.cuda()
    try:
        layers = embed_sentences(bilm, [fixture_sentences[0][0]])[0]
        with h5py.File(fixture_dir / "lm_embeddings_0.hdf5", "r") as handle:
            expected = handle["0"][...]
        top = layers[-1]
        assert np.abs(np.stack([top[:, :16], top[:, 16:]]) - expected).max() < 1e-5
    finally:
        fixture_bilm.cpu()
