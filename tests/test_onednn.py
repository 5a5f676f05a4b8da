"""oneDNN matmuls whose rows do not depend on the row count, and the lane plan that uses them."""

import os

import pytest
import torch
from cpu_features import cpu_has_instructions_for, onednn_rows_should_hold
from promises import promised

from spacy_elmo.kernels import machine, onednn
from spacy_elmo.kernels.backends import Route
from spacy_elmo.kernels.lstm_steps import LanePlan, Scratch, lane_multiple, step_lanes_for
from spacy_elmo.kernels.select import select

# Skipped only where the probe says rows vary and this torch or CPU agrees they may; elsewhere a
# failing probe lets these tests run, and fail
needs_onednn = pytest.mark.skipif(
    not onednn.available(torch.device("cpu")) and not onednn_rows_should_hold(),
    reason="oneDNN's row-count invariance does not hold on this machine (an older torch, or no AVX2)",
)


@needs_onednn
@pytest.mark.parametrize("in_features,reordered", [(1300, True), (512, True), (200, False)])
def test_fp32_rows_do_not_depend_on_how_many_rows_a_call_has(in_features, reordered):
    generator = torch.Generator().manual_seed(1)
    weight = torch.nn.Parameter(torch.randn(300, in_features, generator=generator), requires_grad=False)
    x = torch.randn(70, in_features, generator=generator)
    every_row = onednn.linear(x, weight, "fp32", reordered)
    assert every_row.dtype == torch.float32 and every_row.shape == (70, 300)
    for rows in (1, 2, 5, 33):
        assert torch.equal(onednn.linear(x[:rows], weight, "fp32", reordered), every_row[:rows])
    for first in (3, 41):  # other companions, same bits
        assert torch.equal(onednn.linear(x[first : first + 9], weight, "fp32", reordered), every_row[first : first + 9])
    exact = x.double() @ weight.double().t()
    relative_error = ((every_row - exact).abs().max() / exact.abs().max()).item()
    assert relative_error < 1e-6


@needs_onednn
@pytest.mark.parametrize("reordered", [True, False])
def test_long_sums_run_whole_where_the_probe_passes_else_in_blocks(monkeypatch, reordered):
    """K = 1300 > K_BLOCK: one call over the whole K (a single row padded to two) where the probe
    finds rows and thread counts agree for the weight's shape and layout; where it does not, K
    blocks of a reordered copy (a plain weight is refused). Either way any row count gives the
    same rows."""
    generator = torch.Generator().manual_seed(4)
    weight = torch.nn.Parameter(torch.randn(96, 1300, generator=generator), requires_grad=False)
    x = torch.randn(40, 1300, generator=generator)
    laid_out = onednn._reorder(weight) if reordered else weight.detach()
    whole = onednn.whole_sums_invariant(weight.detach(), "reordered" if reordered else "plain", laid_out)
    if reordered:
        assert len(onednn.reordered_blocks(weight)) == (1 if whole else 3)
    else:
        assert onednn.plain_takes(weight) == whole
    if whole:
        every_row = onednn.linear(x, weight, "fp32", reordered)
        for rows in (1, 2, 17):
            assert torch.equal(onednn.linear(x[:rows], weight, "fp32", reordered), every_row[:rows])
    monkeypatch.setattr(onednn, "_rows_agree_on_every_thread_count", lambda weight, counts: False)
    monkeypatch.setattr(machine, "_ANSWERS", {})
    blocked = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
    most = int(promised("sum-block"))  # docs/determinism.md: blocks of at most 512 terms
    assert [block.shape[1] for block in onednn.reordered_blocks(blocked)] == [most, most, 1300 - 2 * most]
    assert not onednn.plain_takes(blocked)
    with pytest.raises(ValueError, match="got K = 1300 in fp32"):
        onednn.linear(x, blocked, "fp32", reordered=False)
    every_row = onednn.linear(x, blocked)
    for rows in (1, 2, 17):
        assert torch.equal(onednn.linear(x[:rows], blocked), every_row[:rows])


@needs_onednn
def test_the_whole_sum_probe_tells_a_kernel_that_changes_with_the_thread_count(monkeypatch):
    weight = onednn._reorder(torch.randn(32, 1024))
    assert onednn._rows_agree_on_every_thread_count(weight, (1, 2))
    linear = torch.ops.mkldnn._linear_pointwise
    threads_seen = []

    def thread_dependent(x, W, B, attr, scalars, algorithm):  # noqa: N803 (the op's argument names)
        threads_seen.append(torch.get_num_threads())
        return linear(x, W, B, attr, scalars, algorithm) + (torch.get_num_threads() - 1) * 1e-3

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", thread_dependent)
    threads = torch.get_num_threads()
    assert not onednn._rows_agree_on_every_thread_count(weight, (1, 2))
    assert torch.get_num_threads() == threads  # restored
    assert 2 in threads_seen


@needs_onednn
def test_the_whole_sum_probe_does_not_trust_a_sparse_weight(monkeypatch):
    """A zero weight gives zeros in any summation order: the probe runs on a random weight of the
    same shape instead, so its verdict holds for the other weights of that shape."""
    probed = []
    monkeypatch.setattr(machine, "_ANSWERS", {})
    monkeypatch.setattr(onednn, "_rows_agree_on_every_thread_count", lambda weight, counts: probed.append(weight))
    onednn.whole_sums_invariant(torch.zeros(48, 1100), "plain")
    assert probed[0].shape == (48, 1100) and bool(probed[0].count_nonzero() > 48 * 1100 // 2)
    dense = torch.randn(48, 1200)
    onednn.whole_sums_invariant(dense, "plain")
    assert probed[1] is dense


def test_probed_thread_counts_cover_one_to_the_core_count():
    counts = machine.probed_thread_counts()
    assert counts[0] == 1 and torch.get_num_threads() in counts
    assert max(counts) >= (os.cpu_count() or 1)


@needs_onednn
@pytest.mark.skipif(
    not onednn.bf16_runs() and not cpu_has_instructions_for("bf16"),
    reason="this torch's oneDNN bf16 linear does not run on this CPU, which has no bfloat16 dot products",
)
def test_bf16_products_are_close_and_summed_in_fp32():
    generator = torch.Generator().manual_seed(2)
    weight = torch.nn.Parameter(torch.randn(64, 1300, generator=generator), requires_grad=False)
    x = torch.randn(16, 1300, generator=generator)
    got = onednn.linear(x, weight, "bf16")
    assert got.dtype == torch.float32
    exact = x.double() @ weight.double().t()
    assert ((got - exact).abs().max() / exact.abs().max()).item() < 2e-2
    assert torch.equal(onednn.linear(x, weight, "bf16"), got)  # the same call, the same bits


@needs_onednn
def test_reordered_copies_follow_weights_changed_in_place():
    weight = torch.nn.Parameter(torch.randn(64, 512), requires_grad=False)
    x = torch.randn(4, 512)
    before = onednn.linear(x, weight)
    with torch.no_grad():
        weight.mul_(2)
    assert torch.equal(onednn.linear(x, weight), before * 2)


def test_plain_weights_take_long_sums_in_fp32_only():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    with pytest.raises(ValueError, match="K <= 512"):
        onednn.linear(torch.randn(2, 600), torch.randn(8, 600), "bf16", reordered=False)


def test_not_available_off_cpu():
    assert not onednn.available(torch.device("meta"))


def test_lanes_are_numbered_busiest_first_and_groups_hold_the_working_ones():
    plan = LanePlan.build([3, 7, 0, 2, 5], width=4, window=1, device=torch.device("cpu"))
    assert plan.lane_steps == [7, 5, 3, 2]
    assert plan.groups(0) == [(0, 4)]
    assert plan.groups(2) == [(0, 3)]
    assert plan.groups(4) == [(0, 2)]
    assert plan.groups(4, multiple=4) == [(0, 4)]
    assert plan.groups(6) == [(0, 1)]
    assert plan.groups(7) == []
    two_chunks = LanePlan.build([6, 6, 6, 6, 1, 1], width=2, window=1, device=torch.device("cpu"))
    assert two_chunks.lane_steps == [7, 7, 6, 6] and two_chunks.busy_steps == [7, 6]
    assert two_chunks.groups(0) == [(0, 2), (2, 2)]
    assert two_chunks.groups(6) == [(0, 2)]
    forward = plan.tables["forward"]
    assert forward[6, 0] == 3 + 6  # the 7-token sentence (tokens 3..9) on lane 0


def test_step_lanes_follow_the_sentences_up_to_the_most_in_whole_lane_multiples():
    assert step_lanes_for([3, 0, 5], most=128, cells=4096) == 2  # empty sentences take no lane
    assert step_lanes_for([1] * 200, most=128, cells=4096) == 128
    assert step_lanes_for([2, 2, 2], most=128, cells=20) == 8  # lane_multiple(20)
    assert step_lanes_for([], most=128, cells=4096) == 1


def test_lane_multiple_keeps_gate_slices_whole_simd_blocks():
    assert lane_multiple(4096) == 1
    assert lane_multiple(20) == 8
    assert all(cells * lane_multiple(cells) % 32 == 0 for cells in range(1, 100))


def test_scratch_hands_out_one_buffer_and_grows_it_when_asked_for_more():
    scratch = Scratch()
    like = torch.zeros(1)
    first = scratch.take(4, 8, like)
    assert first.shape == (4, 8) and first.dtype == torch.float32
    assert scratch.take(2, 8, like).data_ptr() == first.data_ptr()  # reused: no fresh pages
    grown = scratch.take(10, 8, like)
    assert grown.shape == (10, 8) and grown.data_ptr() != first.data_ptr()
    assert scratch.take(3, 4, like.double()).dtype == torch.float64


@needs_onednn
def test_backend_linear_writes_into_the_buffer_it_is_given_with_the_bias():
    backend = select(torch.device("cpu"), "fp32")
    assert backend.route is Route.ONEDNN_ANY_ROWS
    generator = torch.Generator().manual_seed(5)
    x, weight, bias = (torch.randn(*shape, generator=generator) for shape in ((9, 64), (48, 64), (48,)))
    fresh = backend.linear(x, weight, bias, rows=4)
    buffer = torch.full((9, 48), float("nan"))
    written = backend.linear(x, weight, bias, rows=4, out=buffer)
    assert written.data_ptr() == buffer.data_ptr() and torch.equal(written, fresh)
    assert torch.allclose(fresh, x @ weight.t() + bias, atol=1e-5)


@pytest.mark.parametrize("error", [AttributeError, TypeError, NotImplementedError, RuntimeError])
def test_a_torch_whose_private_ops_fail_takes_the_public_path(monkeypatch, error):
    """A future torch that lacks oneDNN's private ops (AttributeError), or changed their signature
    (TypeError), makes the probes say no and fp32 run MKL on fixed shapes: slower, never an error."""

    def gone(*args, **kwargs):
        raise error("torch.ops.mkldnn._reorder_linear_weight: not in this torch")

    monkeypatch.setattr(onednn, "_reorder", gone)
    monkeypatch.setattr(onednn, "_linear_blocks", gone)
    monkeypatch.setattr(machine, "_ANSWERS", {})  # every probe runs again (the old answers come back after)
    assert not onednn.available(torch.device("cpu")) and not onednn.bf16_runs()
    backend = select(torch.device("cpu"), "fp32")
    assert (backend.runs, backend.choice.kernel, backend.route) == (
        "fp32",
        "MKL fp32 on fixed shapes",
        Route.FIXED_SHAPES,
    )
    x, weight = torch.randn(5, 64), torch.randn(8, 64)
    torch.testing.assert_close(backend.linear(x, weight), x @ weight.t(), rtol=1e-5, atol=1e-5)
