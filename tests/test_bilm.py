import random

import numpy as np
import pytest
import torch
from conftest import random_bilm
from cpu_features import skip_where_onednn_rows_vary
from promises import promised
from reference_bilm import ReferenceBiLM

from spacy_elmo import BiLMRunner, embed_sentences
from spacy_elmo.kernels.backends import Route
from spacy_elmo.kernels.batch_invariant import Blocking
from spacy_elmo.kernels.select import select
from spacy_elmo.network.chars import encode_sentences

SENTENCES = [
    "The quick brown fox jumps over the lazy dog .".split(),
    "ELMo vectors depend on context .".split(),
    ["a"],
    [],
    "Ünïcödé wörds , emoji 😀 and 中文 mixed in".split(),
    ("word " * 40).split(),
]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"residual": False},
        {"cell_clip": 0.5, "proj_clip": 0.2},
        {"cell_clip": 1.0, "residual": False, "activation": "tanh", "n_highway": 2, "n_layers": 3},
    ],
    ids=["unclipped-residual", "no-residual", "clipped", "tanh-3-layers"],
)
def test_every_layer_matches_plain_reference(seeded, overrides):
    bilm = random_bilm(**overrides)
    reference = ReferenceBiLM(bilm)
    for sentence, layers in zip(SENTENCES, embed_sentences(bilm, SENTENCES), strict=True):
        expected, _ = reference.embed(sentence)
        assert layers.shape == (bilm.config.n_layers + 1, len(sentence), bilm.config.output_dim)
        assert layers.dtype == np.float32
        np.testing.assert_allclose(layers, expected, rtol=0, atol=1e-5)


def test_stateful_matches_reference_carrying_state(seeded):
    bilm = random_bilm(cell_clip=2.0, proj_clip=2.0)
    reference = ReferenceBiLM(bilm)
    runner = BiLMRunner(bilm)
    rows = [SENTENCES[0], SENTENCES[4]]
    states = [None, None]
    for _ in range(3):
        got = embed_sentences(runner, rows, stateful=True)
        for row, sentence in enumerate(rows):
            expected, states[row] = reference.embed(sentence, states[row])
            np.testing.assert_allclose(got[row], expected, rtol=0, atol=1e-5)
        rows, states = rows[::-1], states[::-1]
        with torch.inference_mode():  # swap the carried rows along with the sentences
            runner.carried_state.h[:] = runner.carried_state.h.flip(2)
            runner.carried_state.c[:] = runner.carried_state.c.flip(2)


@pytest.mark.parametrize("residual", [True, False])
def test_fused_path_agrees_with_step_loop(seeded, residual):
    runner = BiLMRunner(random_bilm("tiny", residual=residual, lstm_dim=96, projection_dim=24))
    tokens = torch.randn(sum(len(s) + 2 for s in SENTENCES), 24)
    lengths = [len(s) + 2 for s in SENTENCES]
    with torch.no_grad():
        step, _ = runner.contextualize(tokens, lengths, path="step")
        fused, _ = runner.contextualize(tokens, lengths, path="fused")
    assert (step - fused).abs().max() < promised("fused-step")


def test_fused_path_refuses_clipped_models():
    runner = BiLMRunner(random_bilm(cell_clip=3.0))
    with torch.no_grad(), pytest.raises(ValueError, match="clips its cells"):
        runner.contextualize(torch.zeros(3, 16), [3], path="fused")


@pytest.mark.parametrize("clipped", [False, True])
def test_differentiable_path_agrees_and_trains(seeded, clipped):
    bilm = random_bilm(**({"cell_clip": 1.0, "proj_clip": 1.0} if clipped else {}))
    char_ids = torch.from_numpy(encode_sentences(SENTENCES)).long()
    exact = BiLMRunner(bilm)(char_ids)  # inference: the batch-invariant path, no gradients even where they are enabled
    assert torch.is_grad_enabled() and not exact.layers.requires_grad
    output = bilm(char_ids)
    assert output.layers.requires_grad
    assert torch.equal(output.mask, exact.mask)
    assert (output.layers.detach() - exact.layers).abs().max() < 1e-5
    output.layers.sum().backward()
    grads = {name: p.grad for name, p in bilm.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert grads["backward_layers.1.weight_hh"].abs().sum() > 0


def test_forward_on_padded_batch(seeded):
    runner = BiLMRunner(random_bilm())
    char_ids = torch.from_numpy(encode_sentences(SENTENCES)).long()
    with torch.no_grad():
        output = runner(char_ids)
    lengths = [len(s) + 2 for s in SENTENCES]
    assert output.layers.shape == (3, len(SENTENCES), max(lengths), 32)
    assert output.mask.sum(1).tolist() == lengths
    assert (output.layers[:, ~output.mask] == 0).all()
    singles = [embed_sentences(runner, [s])[0] for s in SENTENCES]
    for row, single in enumerate(singles):
        assert np.array_equal(output.layers[:, row, 1 : lengths[row] - 1].numpy(), single)


def test_forward_rejects_gaps():
    runner = BiLMRunner(random_bilm())
    char_ids = torch.from_numpy(encode_sentences([["a", "b"]])).long()
    char_ids[0, 1] = 0
    with torch.no_grad(), pytest.raises(ValueError, match="padding position before a token"):
        runner(char_ids)


def corpus_like_sentences(count, seed):
    rng = random.Random(seed)
    words = "the of and a to in is was he for it with as his on be at by i this had not are but from".split()
    return [
        [rng.choice(words) + rng.choice(["", "s", "ed", "ing", "'s"]) for _ in range(rng.randint(0, 45))]
        for _ in range(count)
    ]


@pytest.fixture(params=["onednn", "fixed-shapes"])
def kernels(request, monkeypatch):
    """Both ways the step loop keeps rows independent: oneDNN (any row count, CPU) and fixed
    shapes (where the oneDNN probe fails, and on GPU)."""
    from spacy_elmo.kernels import onednn

    if request.param == "onednn":
        skip_where_onednn_rows_vary(onednn.available(torch.device("cpu")))
    if request.param == "fixed-shapes":
        monkeypatch.setattr(onednn, "available", lambda device, precision="fp32": False)
    expected = Route.ONEDNN_ANY_ROWS if request.param == "onednn" else Route.FIXED_SHAPES
    assert select(torch.device("cpu"), "fp32").route is expected  # what a fresh runner's backend will be
    return request.param


@pytest.mark.parametrize(
    "overrides,path",
    [({"cell_clip": 3.0, "proj_clip": 3.0}, "step"), ({}, "step"), ({}, "fused")],
    ids=["clipped-step", "unclipped-step", "unclipped-fused"],
)
def test_bitwise_identical_whatever_the_batch(seeded, overrides, path, kernels):
    """The same sentence gives the same bits alone, among others, in any order, under any token
    budget, with or without the token cache."""
    runner = BiLMRunner(random_bilm(**overrides), lstm_path=path)
    target = SENTENCES[4]
    alone = embed_sentences(runner, [target])[0]
    rng = random.Random(3)
    for trial in range(8):
        others = corpus_like_sentences(rng.randint(1, 70), seed=trial)
        position = rng.randint(0, len(others))
        batch = others[:position] + [target] + others[position:]
        budget = rng.choice([64, 300, 100000])
        if trial % 2:
            runner.token_cache.capacity = 0
        got = embed_sentences(runner, batch, max_batch_tokens=budget)[position]
        runner.token_cache.capacity = 20000
        assert np.array_equal(got, alone), f"trial {trial}: {len(batch)} sentences, budget {budget}"


def test_a_row_gets_the_same_bits_at_every_position_of_a_fixed_shape_block(seeded):
    """Fixed shapes alone do not keep rows independent: MKL's AVX2 sgemm sums the last two rows of
    some row counts in another order (rows 30-31 of 32 and 254-255 of 256 on a Xeon capped at
    AVX2). A row must give the same bits wherever it sits in the block."""
    from spacy_elmo.kernels.batch_invariant import matmul_rows

    for rows, k, n in [(256, 24, 16), (256, 8, 8), (64, 32, 32), (32, 16, 192), (32, 48, 16)]:
        weight = torch.randn(n, k)
        row = torch.randn(1, k)
        assert matmul_rows(torch.zeros(0, k), weight.t(), rows).shape == (0, n)  # no rows: none out
        for count in (1, rows - 1, rows):  # the row alone, and last in a block
            x = torch.cat([torch.randn(count - 1, k), row])
            got = matmul_rows(x, weight.t(), rows)[-1]
            assert torch.equal(got, matmul_rows(row, weight.t(), rows)[0]), f"row {count - 1} of ({rows}, {k}, {n})"


@pytest.mark.parametrize("path", ["step", "fused"])
def test_the_last_lanes_of_a_chunk_give_the_same_bits_as_a_sentence_alone(seeded, path, kernels):
    """31 longer sentences beside it put a sentence in the last lane of a 32-lane chunk (the lane
    MKL's AVX2 sgemm computed with another kernel)."""
    runner = BiLMRunner(random_bilm())
    dim = runner.bilm.config.projection_dim
    target = torch.randn(12, dim)
    others = [torch.randn(20 + i % 5, dim) for i in range(31)]
    with torch.no_grad():
        alone, _ = runner.contextualize(target, [12], path=path)
        batch, _ = runner.contextualize(torch.cat([*others, target]), [len(o) for o in others] + [12], path=path)
    assert torch.equal(batch[:, -12:], alone)


def test_other_blockings_agree_to_rounding(seeded):
    """Other fixed shapes (chunk widths, GEMM blocks) change only the rounding."""
    bilm = random_bilm(cell_clip=3.0)
    sentences = corpus_like_sentences(40, seed=5)
    baseline = embed_sentences(bilm, sentences)
    runner = BiLMRunner(
        bilm, blocking=Blocking(step_columns=16, step_lanes=8, gemm_rows=128, token_block=32, token_block_any_rows=32)
    )
    changed = embed_sentences(runner, sentences, max_batch_tokens=200)
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(baseline, changed, strict=True))


def test_token_blocks_of_any_size_give_the_same_bits_where_rows_do_not_depend_on_the_count(seeded, kernels):
    """Where matmul rows do not depend on the row count, the char encoder's block size is a speed
    setting only: a token encoded in a block of 32 or of 256 gets the same bits."""
    if kernels != "onednn":
        pytest.skip("fixed shapes pad every block whole: their block size is part of the result")
    bilm = random_bilm()
    runner = BiLMRunner(bilm)
    runner.token_cache.capacity = 0
    tokens = sorted({token for sentence in corpus_like_sentences(40, seed=6) for token in sentence})
    assert len(tokens) > 64
    char_ids, word_ids = bilm.encode_tokens(tokens)
    encoder = bilm.char_encoder
    blocks = []
    encode_block = encoder.encode
    encoder.encode = lambda ids, *rest: blocks.append(len(ids)) or encode_block(ids, *rest)
    with torch.no_grad():
        one_block = runner.token_representations(char_ids, word_ids)
        assert len(blocks) == 1  # the default block (256) takes them all
        runner = runner.with_settings(blocking=Blocking(token_block_any_rows=32))
        many_blocks = runner.token_representations(char_ids, word_ids)
    assert blocks[1:] == [32] * (len(blocks) - 1) and len(blocks) - 1 == -(-len(tokens) // 32)
    assert torch.equal(one_block, many_blocks)


def test_characters_cut_on_the_host_give_the_bits_of_the_whole_ids(seeded):
    """``represent_tokens`` cuts the characters after the longest token before they reach the device
    (on a GPU, cutting them there waits for it); the pad windows cut off still count, in every block."""
    bilm = random_bilm()
    runner = BiLMRunner(bilm, blocking=Blocking(token_block=32, token_block_any_rows=32))
    runner.token_cache.capacity = 0
    short = sorted({token for sentence in corpus_like_sentences(20, seed=3) for token in sentence})[:40]
    width = bilm.config.max_characters_per_token
    for tokens, cut in ((short, True), ([*short, "x" * 80], False)):
        chars, _ = bilm.indexer.encode(tokens)
        cut_ids = bilm.char_encoder.cut_characters(chars)
        assert (cut_ids.shape[1] < width) is cut
        assert torch.equal(torch.from_numpy(cut_ids), bilm.char_encoder.trim(torch.from_numpy(chars))), "as torch cuts"
        with torch.no_grad():
            whole = runner.token_representations(*bilm.encode_tokens(tokens))
        assert torch.equal(runner.represent_tokens(tokens), whole)


def test_onednn_and_fixed_shapes_agree_to_rounding(seeded, monkeypatch):
    from spacy_elmo.kernels import onednn

    skip_where_onednn_rows_vary(onednn.available(torch.device("cpu")))
    calls = []
    linear = onednn.linear
    monkeypatch.setattr(onednn, "linear", lambda *args, **kwargs: calls.append(1) or linear(*args, **kwargs))
    bilm = random_bilm(cell_clip=3.0, proj_clip=3.0)
    sentences = corpus_like_sentences(30, seed=8)
    runner = BiLMRunner(bilm)
    through_onednn = embed_sentences(runner, sentences)
    assert calls
    monkeypatch.setattr(onednn, "available", lambda device, precision="fp32": False)
    assert runner.backend.route is Route.ONEDNN_ANY_ROWS  # selected once, when the runner was made, and kept
    runner = BiLMRunner(bilm)  # a new runner selects again: fixed shapes now
    calls.clear()
    fixed = embed_sentences(runner, sentences)
    assert runner.backend.route is Route.FIXED_SHAPES
    assert not calls
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(through_onednn, fixed, strict=True))


def test_empty_inputs():
    bilm = random_bilm()
    assert embed_sentences(bilm, []) == []
    assert embed_sentences(bilm, [[]])[0].shape == (3, 0, 32)
    with pytest.raises(TypeError, match="lists of token strings"):
        embed_sentences(bilm, [["fine", 3]])
    with pytest.raises(TypeError, match=r"Sentence 1 is a string \('not tokenized'\)"):
        embed_sentences(bilm, [["ok"], "not tokenized"])
    with pytest.raises(ValueError, match="max_batch_tokens must be positive"):
        embed_sentences(bilm, [["ok"]], max_batch_tokens=0)


def test_the_training_ops_take_a_backends_keywords_and_refuse_others():
    """Pretraining's ops read nothing of ``rows`` and ``fine_inputs``, and a misspelt keyword is an error."""
    from spacy_elmo.network.char_encoder import AUTOGRAD

    x, weight = torch.randn(3, 4), torch.randn(5, 4)
    assert torch.equal(AUTOGRAD.linear(x, weight, rows=2, fine_inputs=True), torch.nn.functional.linear(x, weight))
    with pytest.raises(TypeError, match="row"):
        AUTOGRAD.linear(x, weight, row=2)


def test_fused_path_is_nn_lstm_with_projection(seeded):
    """The fused path computes what torch.nn.LSTM(proj_size=P) computes with the same weights."""
    bilm = random_bilm(n_layers=1)
    layer = bilm.forward_layers[0]
    lstm = torch.nn.LSTM(16, layer.cells, proj_size=16, batch_first=True)
    with torch.no_grad():
        for ours, theirs in [
            ("weight_ih", "weight_ih_l0"),
            ("weight_hh", "weight_hh_l0"),
            ("bias", "bias_ih_l0"),
            ("weight_hr", "weight_hr_l0"),
        ]:
            getattr(lstm, theirs).copy_(getattr(layer, ours))
        lstm.bias_hh_l0.zero_()
        tokens = torch.randn(7, 16)
        expected, _ = lstm(tokens.unsqueeze(0))
        layers, _ = BiLMRunner(bilm).contextualize(tokens, [7], path="fused")
    assert (layers[1, :, :16] - expected[0]).abs().max() < 1e-6


@pytest.fixture(scope="module")
def original_bilms():
    """The ``original`` preset's BiLM from seed 0, clipped and not, each made once for the module
    (its 93.6M parameters initialised once): a BiLM is data that its runners leave as it was."""
    from spacy_elmo import BiLM, BiLMConfig

    bilms: dict = {}

    def bilm(clipped: bool) -> BiLM:
        if clipped not in bilms:
            torch.manual_seed(0)
            unclipped = {} if clipped else {"cell_clip": None, "proj_clip": None}
            bilms[clipped] = BiLM(BiLMConfig.preset("original", **unclipped)).eval()
        return bilms[clipped]

    return bilm


@pytest.mark.slow
@pytest.mark.parametrize("clipped,path", [(True, "step"), (False, "step"), (False, "fused")])
def test_bitwise_identical_at_original_size(clipped, path, kernels, original_bilms):
    """At the published sizes (sums over 2,048 filters and 4,096 cells, longer than oneDNN's K block
    of 512, which the tiny preset's never are) a sentence's bits do not depend on its batch
    companions, on the threads torch runs here: one in each of the suite's workers; under ``-n 0``
    or ``nox -s matrix`` the machine's, where MKL and ATen split the work across threads too."""
    runner = BiLMRunner(original_bilms(clipped), lstm_path=path)
    target = SENTENCES[0]
    alone = embed_sentences(runner, [target])[0]
    others = corpus_like_sentences(24, seed=11)
    got = embed_sentences(runner, others[:9] + [target] + others[9:])[9]
    assert np.array_equal(got, alone)


def test_loading_weights_does_not_import_sympy(tmp_path):
    """A module built on the meta device to receive weights runs no ``normal_`` there: torch's
    meta ``normal_`` imports sympy (about 70 MB resident). A fresh process, since other tests
    may have imported it here; it first makes a meta tensor, which imports sympy by itself on
    some torches (2.5 does): there the check cannot tell."""
    import subprocess
    import sys

    from spacy_elmo.weights.native import save_bilm

    save_bilm(random_bilm(vocab_size=20), tmp_path / "bilm")
    script = (
        "import sys, torch; torch.zeros(3, device='meta'); print('sympy' in sys.modules); "
        "from spacy_elmo.weights.native import load_bilm; "
        f"load_bilm({str(tmp_path / 'bilm')!r}); print('sympy' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    by_meta_tensors, after_loading = result.stdout.split()
    if by_meta_tensors == "True":
        pytest.skip(f"torch {torch.__version__}'s meta tensors import sympy themselves (torch 2.5 does)")
    assert after_loading == "False"


def test_runners_over_one_bilm_run_their_own_ways_and_share_its_weights():
    """How a runner runs is fixed when it is made; the BiLM holds no run settings, caches or state.
    Two runners over one BiLM run different ways, with backends, caches and carried state of their
    own, over the BiLM's weights (shared, not copied, and unchanged by running); a pickled runner
    keeps the precision asked for."""
    import pickle

    bilm = random_bilm()
    weights = {name: tensor.clone() for name, tensor in bilm.state_dict().items()}
    for name in ("precision", "lstm_path", "blocking", "token_cache", "carried_state", "kernels"):
        assert not hasattr(bilm, name), name
    runner = BiLMRunner(bilm)
    with pytest.raises(AttributeError):
        runner.precision = "int8"  # what runs is the backend's, chosen when the runner was made
    other = runner.with_settings(precision="int8", lstm_path="step")
    assert (other.precision, other.lstm_path, runner.precision, runner.lstm_path) == ("int8", "step", "fp32", "auto")
    assert other.bilm is bilm and runner.bilm is bilm
    assert other.bilm.forward_layers[0].weight_ih is bilm.forward_layers[0].weight_ih, "the weights are shared"
    assert other.backend is not runner.backend and other.token_cache is not runner.token_cache
    if runner.call_graphs is not None:
        assert other.call_graphs is not runner.call_graphs
    reduced = embed_sentences(other, SENTENCES[:2], stateful=True)
    assert other.carried_state is not None and runner.carried_state is None
    assert not np.array_equal(reduced[0], embed_sentences(runner, SENTENCES[:1])[0])
    assert (len(other.token_cache), len(runner.token_cache)) == (17, 12), "each runner caches its own tokens"
    for name, tensor in bilm.state_dict().items():
        assert torch.equal(tensor, weights[name]), f"running changed {name}"
    again = pickle.loads(pickle.dumps(other))
    np.testing.assert_array_equal(embed_sentences(again, SENTENCES[:1])[0], embed_sentences(other, SENTENCES[:1])[0])
    assert (again.precision, again.lstm_path) == ("int8", "step")
    with pytest.raises(TypeError, match="Stateful calls carry LSTM state"):
        embed_sentences(bilm, SENTENCES[:1], stateful=True)
    with pytest.raises(ValueError, match="lstm_path must be one of auto, step, fused, got 'fast'"):
        runner.with_settings(lstm_path="fast")
    with pytest.raises(ValueError, match="lstm_path must be one of auto, step, fused, got 'fast'"):
        BiLMRunner(bilm, lstm_path="fast")
