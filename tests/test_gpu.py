"""The GPU code path: runs where CUDA is available, skipped elsewhere."""

import numpy as np
import pytest
import torch
from conftest import make_nlp, random_bilm
from promises import promised

from spacy_elmo import BiLMRunner, embed_sentences
from spacy_elmo.kernels import quantized
from spacy_elmo.kernels.backends import Route
from spacy_elmo.kernels.gpu_stacks import CallGraphs
from spacy_elmo.network.token_cache import TokenCache

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
    np.testing.assert_allclose(gpu_layers, cpu_layers, rtol=0, atol=promised("gpu-cpu"))


def _corpus_sentences(count):
    """``count`` sentences of real text (the corpus's held-out lines, split on spaces), lengths
    as they come: 1 to over 100 tokens."""
    from conftest import SHARED

    lines = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()
    return [line.split()[:150] for line in lines if line.strip()][:count]


def test_the_triton_kernels_run_on_cuda_in_fp32_and_bf16():
    bilm = random_bilm().cuda()
    for precision in ("fp32", "bf16"):
        backend = BiLMRunner(bilm, precision=precision).backend
        assert backend.route is Route.TRITON and backend.gpu.precision == precision
    backend = BiLMRunner(bilm, precision="int8").backend
    assert backend.gpu is None and backend.route is Route.INT8  # int8 runs torch._int_mm
    assert backend.int8 is quantized.INT8_KERNELS["int_mm"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_sentence_gets_its_bits_alone_and_inside_64_and_1000(precision):
    """No padding to fixed shapes: the kernels' rows do not depend on how many rows a call has,
    for one sentence, 64 and 1,000 (which run at their own lane counts and token counts)."""
    torch.manual_seed(0)
    bilm = random_bilm("mini", cell_clip=3.0, proj_clip=3.0).cuda()
    runner = BiLMRunner(bilm, precision=precision, token_cache=TokenCache(capacity=0))
    sentences = _corpus_sentences(1000)
    alone = [embed_sentences(runner, [sentence])[0] for sentence in sentences[:6]]
    for count, budget in ((64, 4096), (1000, 32768)):
        together = embed_sentences(runner, sentences[:count], max_batch_tokens=budget)
        for index, layers in enumerate(alone):
            assert np.array_equal(together[index], layers), (count, index)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_graph_replays_the_bits_of_the_kernels_launched_one_by_one(precision):
    """Calls of one sentence, 64 and 300 (thousands of tokens), each three times: launched, then
    captured (the capture's own run answers), then replayed; every time the same bits."""
    torch.manual_seed(0)
    bilm = random_bilm("mini", cell_clip=3.0, proj_clip=3.0).cuda()
    runner = BiLMRunner(bilm, precision=precision, token_cache=TokenCache(capacity=0))
    corpus = _corpus_sentences(300)
    calls = [[s] for s in corpus[:5] + [["a"], SENTENCES[1]]] + [corpus[:64], corpus]
    launched = {}
    for graphs in (False, True):
        runner.call_graphs = CallGraphs() if graphs else None
        launched[graphs] = [embed_sentences(runner, call, max_batch_tokens=32768) for call in calls for _ in range(3)]
    graphs = runner.call_graphs
    assert graphs.failed is None
    assert max(graphs.sizes()) >= sum(len(s) + 2 for s in corpus), "the call of 300 sentences replays a graph"
    for eager, replayed in zip(launched[False], launched[True], strict=True):
        for a, b in zip(eager, replayed, strict=True):
            assert np.array_equal(a, b)


def test_gpu_matches_cpu_within_the_promise_on_real_text_in_fp32():
    """The original model's sizes and clipping (smaller widths): the GPU's IEEE fp32 kernels sum in
    another order than the CPU's, and stay within gpu-cpu (docs/promises.md) of its layers over whole sentences."""
    torch.manual_seed(0)
    bilm = random_bilm("mini", cell_clip=3.0, proj_clip=3.0)
    sentences = _corpus_sentences(64)
    on_cpu = embed_sentences(bilm, sentences)
    on_gpu = embed_sentences(bilm.cuda(), sentences)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(on_cpu, on_gpu, strict=True))
    assert worst < promised("gpu-cpu"), worst


def test_stateful_calls_on_gpu_carry_the_state_as_on_cpu():
    torch.manual_seed(0)
    bilm = random_bilm(cell_clip=3.0, proj_clip=3.0)
    runner = BiLMRunner(bilm)
    calls = [SENTENCES[:2], [["and", "then"], ["more", "words", "here"], ["x"]]]
    on_cpu = [embed_sentences(runner, call, stateful=True) for call in calls]
    bilm.cuda()
    # a runner runs on the device it was made for: the GPU's is another, which starts from no state
    runner = runner.with_settings()
    assert runner.backend.device.type == "cuda" and runner.carried_state is None
    on_gpu = [embed_sentences(runner, call, stateful=True) for call in calls]
    for cpu_call, gpu_call in zip(on_cpu, on_gpu, strict=True):
        for a, b in zip(cpu_call, gpu_call, strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=promised("gpu-cpu"))


@pytest.mark.parametrize("path", ["step", "fused"])
def test_bitwise_identical_whatever_the_batch_on_gpu(path):
    torch.manual_seed(0)
    runner = BiLMRunner(random_bilm().cuda(), lstm_path=path)
    alone = embed_sentences(runner, [SENTENCES[1]])[0]
    batch = [SENTENCES[0]] * 40 + [SENTENCES[1]] + [SENTENCES[0][:2]] * 300
    assert np.array_equal(embed_sentences(runner, batch)[40], alone)


def test_fused_agrees_with_step_loop_on_gpu_even_where_the_process_allows_tf32():
    """cuDNN's LSTM takes TF32 by default (1.3e-4 apart from the step loop on an H100); inference
    switches it off for its calls, whatever the process asked for, and puts that back."""
    torch.manual_seed(0)
    runner = BiLMRunner(random_bilm(lstm_dim=256, projection_dim=64).cuda())
    tokens = torch.randn(40, 64, device="cuda")
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        with torch.no_grad():
            step, _ = runner.contextualize(tokens, [10, 30], path="step")
            fused, _ = runner.contextualize(tokens, [10, 30], path="fused")
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert (step - fused).abs().max().item() < promised("fused-step")


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


def test_float16_layers_cast_on_the_gpu_are_the_float32_ones_rounded(tiny_weights, on_gpu):
    """Docs that keep only float16 layers get them cast on the GPU before the copy back: bitwise
    what rounding the float32 layers on the host gives (round to nearest even, both)."""
    texts = [" ".join(sentence) for sentence in _corpus_sentences(40) if sentence]
    exact = [doc._.elmo_data for doc in make_nlp(tiny_weights, set_vector_hooks=False).pipe(texts)]
    halves = list(make_nlp(tiny_weights, set_vector_hooks=False, store_dtype="float16").pipe(texts))
    for doc, layers in zip(halves, exact, strict=True):
        assert doc._.elmo_data.dtype == np.float16
        assert np.array_equal(doc._.elmo_data.view(np.uint16), layers.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("token_cache", ["kept", "none"])
def test_a_warm_call_queues_its_batches_without_waiting_for_the_gpu(tiny_weights, on_gpu, token_cache):
    """Nothing in a call waits for the GPU but the copies back (CUDA events, which torch's sync debug
    mode does not count), so the host prepares batch k+1 while the GPU runs batch k: no blocking
    upload, no value read back (``.item()``, ``nonzero``), in the char encoder (with no token cache,
    every token is encoded) or in the stacks. (The debug mode does not see a non-blocking copy from
    pageable memory, nor cupy's waits.) Then the layers are those of the same call on the CPU."""
    import spacy

    nlp = make_nlp(tiny_weights, max_batch_tokens=64)
    if token_cache == "none":
        nlp.get_pipe("elmo").runner.token_cache.capacity = 0
    docs = [nlp(" ".join(sentence) + " " + TEXT) for sentence in _corpus_sentences(40)]
    elmo = nlp.get_pipe("elmo")
    for _ in range(3):  # compiled, then captured as graphs
        elmo.predict(docs)
    torch.cuda.set_sync_debug_mode("error")
    try:
        layers = elmo.predict(docs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    spacy.require_cpu()
    on_cpu = make_nlp(tiny_weights, max_batch_tokens=64).get_pipe("elmo").predict(docs)
    for gpu_layers, cpu_layers in zip(layers, on_cpu, strict=True):
        np.testing.assert_allclose(gpu_layers, cpu_layers, rtol=0, atol=promised("gpu-cpu"))


def test_original_parity_on_gpu(fixture_bilm, fixture_sentences, fixture_dir):
    import h5py

    bilm = fixture_bilm.cuda()
    try:
        layers = embed_sentences(bilm, [fixture_sentences[0][0]])[0]
        with h5py.File(fixture_dir / "lm_embeddings_0.hdf5", "r") as handle:
            expected = handle["0"][...]
        top = layers[-1]
        assert np.abs(np.stack([top[:, :16], top[:, 16:]]) - expected).max() < promised("gpu-parity")
    finally:
        fixture_bilm.cpu()


@pytest.mark.parametrize("model", ["test model", "full-size model"])
def test_bf16_on_the_gpu_is_as_close_to_fp32_as_the_docs_promise(fixture_bilm, fixture_sentences, model):
    """The rows the CPU's bf16 is held to (docs/promises.md), on the GPU's own fp32: the test model's
    three streams, and the full-size model on three streams of real text."""
    import copy

    import close_to_fp32

    if model == "test model":
        bilm, streams = copy.deepcopy(fixture_bilm), fixture_sentences
    else:
        bilm, streams = close_to_fp32.full_size_bilm(), close_to_fp32.real_streams()
    close_to_fp32.assert_as_promised(bilm.cuda(), streams, "bf16", model)
