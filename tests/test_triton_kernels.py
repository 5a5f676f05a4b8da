"""The GPU's Triton kernels on a CPU, through Triton's interpreter: what they compute, that a row's
bits do not depend on the rows beside it, and the LSTM runner built on them. tests/test_gpu.py
runs them compiled on a CUDA GPU."""

import dataclasses
import os

os.environ["TRITON_INTERPRET"] = "1"  # before Triton defines its own kernels (tests/triton_interpreter.py)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from conftest import random_bilm  # noqa: E402

pytest.importorskip("triton", reason="the GPU kernels are written in Triton (pip install triton)")
if torch.cuda.is_available():
    pytest.skip("on a GPU the kernels run compiled (tests/test_gpu.py)", allow_module_level=True)

import triton_interpreter  # noqa: E402,F401  (before the kernels are defined)

from spacy_elmo import BiLMRunner, embed_sentences  # noqa: E402
from spacy_elmo.kernels.backends import TritonBackend  # noqa: E402
from spacy_elmo.kernels.gpu_stacks import Schedule, Stacks, lane_count, run_stacks  # noqa: E402
from spacy_elmo.kernels.select import select  # noqa: E402
from spacy_elmo.kernels.triton_ops import KernelTiles, LayerPair, Starts, StepTables, Tiles, TritonOps  # noqa: E402
from spacy_elmo.network.runner import reset_state  # noqa: E402

SENTENCES = [["A", "short", "one", "."], ["And", "a", "somewhat", "longer", "sentence", "."], []]
BATCH = [["x", "y", "z"], ["A", "short", "one", "."], ["y", "z"], []]


# The micro model's sizes (P 8, H 16) in several blocks of cells and pieces of both step sums, with
# few interpreted operations (the interpreter spends about a millisecond on each).
SMALL = {
    "fp32": KernelTiles(
        Tiles(16, 32, 16),
        Tiles(16, 32, 16),
        Tiles(8, 8, 1),
        Tiles(8, 8, 4, piece=8),
        Tiles(8, 32, 4, piece=4),
        unrolled=4,
    ),
    "bf16": KernelTiles(Tiles(16, 32, 16), Tiles(16, 32, 16), Tiles(16, 16, 16), Tiles(16, 16, 16, piece=16)),
}


def micro_bilm(**sizes):
    """A clipped biLM small enough for the interpreter: H 16, P 8, two filter widths."""
    return random_bilm(cell_clip=3.0, proj_clip=3.0, lstm_dim=16, projection_dim=8, filters=((1, 4), (2, 4)), **sizes)


def small_ops(precision="fp32"):
    return TritonOps(precision, SMALL[precision])


def on_triton(runner, precision="fp32"):
    """``runner`` (a ``BiLMRunner``; given a ``BiLM``, a runner of its own) running the Triton kernels
    (small tiles, interpreted) in ``precision``, on the CPU: a runner's backend is chosen once, when
    the runner is made, so one set by hand is what its calls run. No CUDA graphs: they are a GPU's."""
    if not isinstance(runner, BiLMRunner):
        runner = BiLMRunner(runner, warm=False)
    cpu = select(torch.device("cpu"), "fp32")
    ops = small_ops(precision)
    runner.backend = TritonBackend(cpu.device, cpu.choice, cpu.blocking, gpu=ops)
    runner.token_cache.capacity = 0
    assert runner.backend.ops is ops and runner.call_graphs is None
    return runner


@pytest.mark.parametrize("precision, tolerance", [("fp32", 2e-6), ("bf16", 2e-6)])
def test_linear_computes_x_times_w_plus_bias_in_its_precision(precision, tolerance):
    torch.manual_seed(0)
    x, weight, bias = torch.randn(37, 70), torch.randn(50, 70), torch.randn(50)
    rounded = (lambda t: t.bfloat16().double()) if precision == "bf16" else (lambda t: t.double())
    expected = rounded(x) @ rounded(weight).T + bias.double()
    got = TritonOps.of(precision).linear(x, weight, bias)
    assert got.dtype == torch.float32
    assert float((got.double() - expected).abs().max()) < tolerance * float(expected.abs().max())


def test_the_kernels_entry_points_run_triton_on_its_route():
    """What `info --machine` times on a GPU: Backend.linear and step_matmul are the Triton linear there."""
    torch.manual_seed(2)
    x, weight, bias = torch.randn(5, 24), torch.randn(40, 24), torch.randn(40)
    ops = small_ops("bf16")
    cpu = select(torch.device("cpu"), "fp32")
    backend = TritonBackend(cpu.device, cpu.choice, cpu.blocking, gpu=ops)
    assert torch.equal(backend.linear(x, weight, bias), ops.linear(x, weight, bias))
    assert torch.equal(backend.step_matmul(x, weight), ops.linear(x, weight))
    assert not torch.equal(backend.step_matmul(x, weight), x @ weight.T), "bf16 products, not fp32's"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it(precision):
    torch.manual_seed(1)
    ops = TritonOps.of(precision)
    x, weight, bias = torch.randn(150, 96), torch.randn(80, 96), torch.randn(80)
    together = ops.linear(x, weight, bias)
    for row in (0, 17, 149):
        assert torch.equal(ops.linear(x[row : row + 1], weight, bias)[0], together[row])
    assert torch.equal(ops.linear(x[5:40], weight, bias), together[5:40])


def test_the_pair_of_directions_is_two_linears_in_one_launch():
    torch.manual_seed(2)
    ops = TritonOps.of("fp32")
    x, weight, bias = torch.randn(9, 32), torch.randn(2, 48, 32), torch.randn(2, 48)
    shared = ops.linear_pair(x.unsqueeze(0).expand(2, -1, -1), weight, bias)
    for direction in range(2):
        assert torch.equal(shared[direction], ops.linear(x, weight[direction], bias[direction]))


def test_conv_max_is_every_filters_best_window():
    """Filters of widths 1-3 over tokens of 6 characters: each filter's max over the windows that
    fit, as the CPU computes it with unfold (filters padded to the widest width with zeros)."""
    torch.manual_seed(3)
    ops = TritonOps.of("fp32")
    convs = [torch.randn(count, 4, width) for width, count in ((1, 5), (2, 7), (3, 20))]
    chars = torch.randn(11, 6, 4)
    weights, widths = ops.conv_weights(convs)
    got = ops.conv_max(chars, weights, widths)
    expected = []
    for conv in convs:
        windows = chars.transpose(1, 2).unfold(2, conv.shape[2], 1)  # (n, E, windows, w)
        expected.append(torch.einsum("newk,fek->nfw", windows.double(), conv.double()).amax(dim=2))
    np.testing.assert_allclose(got.numpy(), torch.cat(expected, dim=1).numpy(), rtol=0, atol=1e-5)
    assert torch.equal(ops.conv_max(chars[4:5], weights, widths)[0], got[4])


def test_lanes_cover_the_work_in_about_the_longest_sentences_steps():
    assert lane_count([10]) == 1
    assert lane_count([10, 10, 10, 10]) == 4
    assert lane_count([40, 10, 10, 10, 10]) == 2  # 80 tokens over lanes of 40
    assert lane_count([0, 0, 5]) == 1 and lane_count([]) == 1
    assert lane_count([3] * 5000, most=1024) == 1024
    schedule = Schedule.build([6, 2, 2, 2, 0, 4])
    tables = schedule.tables(schedule.host)
    assert (schedule.steps, schedule.lanes) == (6, 3)
    active = tables.active.tolist()
    assert active == sorted(active, reverse=True) and active[0] == 3 and sum(active) == 16
    assert sorted(int(s) for s in tables.start[tables.start > 0]) == [1, 2, 3, 4, 6]


def test_the_bilm_through_the_kernels_agrees_with_the_cpus():
    torch.manual_seed(0)
    bilm = micro_bilm()
    expected = embed_sentences(bilm, BATCH)
    got = embed_sentences(on_triton(bilm), BATCH)
    for a, b in zip(expected, got, strict=True):
        assert a.shape == b.shape
        if a.size:
            assert float(np.abs(a - b).max()) < 5e-7


def test_a_sentences_lstm_layers_are_the_same_bits_alone_and_in_a_batch():
    """One lane and one row per program alone; four lanes in a block inside the batch. (On a GPU
    whole sentences are checked bitwise, char encoder included: tests/test_gpu.py. On a CPU torch's
    elementwise functions round a row by its position, which the GPU's do not.)"""
    torch.manual_seed(0)
    runner = on_triton(micro_bilm())
    lengths = [3, 4, 3, 2]
    tokens = torch.randn(sum(lengths), runner.bilm.config.projection_dim)
    with torch.inference_mode():
        together, _ = runner.contextualize(tokens, lengths)
        alone, _ = runner.contextualize(tokens[3:7], [4])
    assert torch.equal(alone, together[:, 3:7])


def test_programs_narrowed_for_few_lanes_change_no_bit():
    """fp32's step kernels sum each element in one order whatever the rows of a program: a call of
    few lanes in programs of fewer rows (``Tiles.narrow``) gets the same bits."""
    torch.manual_seed(0)
    bilm = micro_bilm(n_layers=1)
    wide = small_ops()
    projection = dataclasses.replace(wide.tiles.projection, narrow=(4, 1))
    narrow = TritonOps("fp32", dataclasses.replace(wide.tiles, projection=projection))
    lengths = [3, 2, 2]
    tokens = torch.randn(sum(lengths), bilm.config.projection_dim)
    schedule = Schedule.build(lengths)
    assert schedule.lanes <= 4 and wide.program_shape(wide.tiles.projection, schedule.lanes)[0] > 1
    assert narrow.program_shape(projection, schedule.lanes)[0] == 1
    assert narrow.program_shape(projection, 5) == wide.program_shape(wide.tiles.projection, 5)
    layers = []
    for ops in (wide, narrow):
        stacks = Stacks.of(ops, list(bilm.forward_layers), list(bilm.backward_layers), True)
        with torch.no_grad():
            layers.append(run_stacks(ops, stacks, tokens, schedule.tables(schedule.host))[0])
    assert torch.equal(layers[0], layers[1])


def test_bf16_through_the_kernels_stays_within_bf16s_error():
    torch.manual_seed(0)
    bilm = micro_bilm(n_layers=1)
    expected = embed_sentences(bilm, BATCH[:2])
    got = embed_sentences(on_triton(bilm, "bf16"), BATCH[:2])
    worst = max(float(np.abs(a - b).max()) for a, b in zip(expected, got, strict=True))
    assert 1e-4 < worst < 2e-2, "bf16's rounding shows, within its error"


def test_stateful_calls_carry_the_state_through_the_kernels():
    torch.manual_seed(0)
    runner = BiLMRunner(micro_bilm(n_layers=1))
    calls = [SENTENCES[:2], [["and", "then"], ["more", "words"], ["x"]]]
    expected = [embed_sentences(runner, call, stateful=True) for call in calls]
    reset_state(runner)
    on_triton(runner)
    for call, wanted in zip(calls, expected, strict=True):
        for a, b in zip(wanted, embed_sentences(runner, call, stateful=True), strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=5e-7)


def test_padding_a_call_to_a_graphs_sizes_changes_no_bit():
    """What a CUDA graph replays: the call's tokens in more rows, its tables in more steps and
    lanes (no lane at work there); the call's layers come out bitwise the same."""
    torch.manual_seed(0)
    bilm = micro_bilm()
    ops = small_ops()
    stacks = Stacks.of(ops, list(bilm.forward_layers), list(bilm.backward_layers), True)
    lengths = [3, 2, 2]
    tokens = torch.randn(sum(lengths), bilm.config.projection_dim)
    exact = Schedule.build(lengths)
    with torch.no_grad():
        plain, _ = run_stacks(ops, stacks, tokens, exact.tables(exact.host))
        padded = Schedule.build(lengths, lambda count: count + 2)
        rows = torch.cat([tokens, torch.randn(7, tokens.shape[1]) * 100])
        replayed, _ = run_stacks(ops, stacks, rows, padded.tables(padded.host))
    assert torch.equal(replayed[:, : tokens.shape[0]], plain)


def _sigmoid_as_the_kernels(t):
    """1 / (1 + exp(-t)) in float32 NumPy, as the interpreter runs the kernels' sigmoid; contiguous,
    as the kernels' arrays are (NumPy may take another exp loop for strided arrays)."""
    return torch.from_numpy(1.0 / (1.0 + np.exp(-t.contiguous().numpy())))


def _tanh_as_the_kernels(t):
    """2 sigmoid(2t) - 1, as the kernels write tanh."""
    return torch.from_numpy(2.0 / (1.0 + np.exp(-2.0 * t.contiguous().numpy())) - 1.0)


@pytest.mark.parametrize("cell_clip", [3.0, None])
def test_the_cell_kernel_restates_lstm_layer_cell_bit_for_bit(cell_clip):
    """The Triton cell kernel restates ``LstmLayer.cell`` (f c + i g, the clip, o tanh(c)): given
    the same activations, one step from a start state gives bitwise the cells and hidden state that
    ``LstmLayer.cell`` gives, so a change to the one definition fails here until the kernel follows."""
    torch.manual_seed(0)
    sizes = {"lstm_dim": 16, "projection_dim": 8, "filters": ((1, 4),), "n_layers": 1}
    layer = random_bilm(cell_clip=cell_clip, proj_clip=None, **sizes).forward_layers[0]
    assert layer.cell_clip == cell_clip
    lanes, cells, proj = 4, layer.cells, layer.projection_dim
    ops = small_ops()
    gate_inputs = 2.0 * torch.randn(2, lanes, 4 * cells)
    c0 = 3.0 * torch.randn(2, lanes, cells)
    # each lane begins a sentence of one token from a start state with h = 0: the recurrent sums
    # are exactly 0, so the gates are the inputs alone
    starts = Starts(torch.zeros(2, lanes, proj), c0, torch.zeros(2, lanes, proj), c0.clone())
    one = torch.arange(1, lanes + 1, dtype=torch.int32).view(1, lanes)
    tables = StepTables(torch.arange(lanes, dtype=torch.int32).repeat(2, 1, 1), one, one, torch.tensor([lanes]))
    weights = LayerPair(None, None, torch.randn(2, proj, 4 * cells), torch.randn(2, cells, proj))
    state = ops.lane_state(lanes, cells, proj, gate_inputs)
    ops.lstm_step(
        0, weights, gate_inputs, tables, state, gate_inputs.new_empty(2, lanes, proj), (cell_clip, None), starts
    )

    sigmoid, tanh = _sigmoid_as_the_kernels, _tanh_as_the_kernels  # the same activations on both sides
    i, f, g, o = gate_inputs.split(cells, dim=-1)
    c, hidden = layer.cell(sigmoid(i), sigmoid(f), tanh(g), sigmoid(o), c0, tanh)
    assert torch.equal(state.c, c) and torch.equal(state.hidden, hidden)
    if cell_clip is not None:
        assert c.abs().max() == cell_clip, "the clip was met"
