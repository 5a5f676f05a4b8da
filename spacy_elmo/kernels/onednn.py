"""CPU matmuls through oneDNN whose rows do not depend on how many rows a call has.

MKL, torch's default CPU GEMM, picks its kernel (and so each sum's order) from the shapes, so
through MKL every call keeps a fixed shape (``batch_invariant``). oneDNN's ``linear`` on a weight it
reordered runs one kernel for any row count (measured on AVX-512/AMX and AVX2; ``available`` probes
it), so one sentence runs as one row; in bf16 only without AMX (one sentence 1.5x faster than fp32
on an AMD EPYC Zen 5). Long sums (K > ``K_BLOCK``) run whole where ``whole_sums_invariant`` finds
that invariant (faster on the LSTM projection, K = 4096, N = 512), else in ``K_BLOCK`` blocks added
in order, so that no call splits a sum across threads. Calls run zero-padded to a few row counts
(``bucket_rows``).
"""

from __future__ import annotations

import functools
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from . import machine
from .machine import PROBE_ERRORS, probed_thread_counts, remembered, rows_agree
from .precision import derived_copy, operand

# The longest sum one GEMM call takes: measured thread-count invariant in MKL up to 512 (not 2048).
K_BLOCK = 512

# Row counts the whole-sum probe compares (a single row is padded to two).
_PROBED_ROWS = (2, 3, 7, 16, 17, 33, 64, 129, 256)  # up to the char encoder's blocks


def available(device: torch.device, precision: str = "fp32") -> bool:
    """Whether ``precision`` ("fp32", "bf16") matmuls on CPU run through oneDNN row-count invariant here."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if precision == "bf16" and "amx_bf16" in machine.cpu_features():
        return False  # AMX tiles: seen rounding one element in ten thousand differently, past what a probe finds
    return remembered(("onednn rows", precision, probed_thread_counts()), lambda: _probe_passes(precision))


def _probe_passes(precision: str) -> bool:
    """Compare rows computed 1 to 300 at a time, with a reordered and with a plain weight, at each
    thread count of ``probed_thread_counts``."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, K_BLOCK, generator=generator)
    x = operand(torch.randn(300, K_BLOCK, generator=generator), precision)
    weight = weight.to(torch.bfloat16) if precision == "bf16" else weight
    try:
        reordered = functools.partial(_linear_blocks, blocks=[_reorder(weight)])
    except PROBE_ERRORS:  # an op this torch lacks, or bf16 on a CPU torch refuses it for
        return False
    plain = functools.partial(_linear_blocks, blocks=[weight])
    rows, threads = (1, 2, 3, 7, 16, 17, 33, 64, 129), probed_thread_counts()
    return rows_agree(reordered, x, rows, threads) and rows_agree(plain, x, rows[1:], threads, reordered)


def bf16_runs() -> bool:
    """Whether this torch's oneDNN bf16 linear runs on this CPU (torch refuses it on CPUs without
    AVX-512 or AVX-NE-CONVERT) and returns rows close to fp32's."""
    return remembered("onednn bf16 runs", _bf16_runs)


def _bf16_runs() -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    generator = torch.Generator().manual_seed(0)
    weight, x = torch.randn(32, K_BLOCK, generator=generator), torch.randn(4, K_BLOCK, generator=generator)
    try:
        result = _linear_blocks(x.to(torch.bfloat16), [_reorder(weight.to(torch.bfloat16))])
    except PROBE_ERRORS:
        return False
    return bool(torch.allclose(result.float(), x @ weight.t(), rtol=0.05, atol=0.5))


def linear(x: Tensor, weight: Tensor, precision: str = "fp32", reordered: bool = True) -> Tensor:
    """``x @ weight.T``: x (M, K) fp32, M >= 1; weight (N, K), its copies cached -> (M, N) fp32, in
    fp32 each row bitwise independent of M. ``reordered=False`` uses the weight as it is (no copy; a
    single row padded to two; needs ``plain_takes(weight, precision)``)."""
    if not reordered:
        if not plain_takes(weight, precision):
            raise ValueError(
                f"A plain weight takes K <= {K_BLOCK}, or a longer K in fp32 where the whole-sum probe passes; "
                f"got K = {weight.shape[1]} in {precision}. Use reordered=True."
            )
        return _linear_blocks(operand(x.contiguous(), precision), [operand(weight, precision)], two_rows=True)
    return prepared_linear(weight, precision)(x)


def prepared_linear(weight: Tensor, precision: str = "fp32") -> Callable[[Tensor], Tensor]:
    """``linear(x, weight, precision)`` (reordered) with the weight's reordered blocks looked up
    once: for a loop that multiplies by one weight many times (the LSTM step loop)."""
    blocks = reordered_blocks(weight, precision)
    two_rows = blocks[0].shape[1] > K_BLOCK
    return lambda x: _linear_blocks(operand(x.contiguous(), precision), blocks, two_rows)


def _linear_blocks(x: Tensor, blocks: List[Tensor], two_rows: bool = False) -> Tensor:
    """Sums of the K blocks' products, added in order, in fp32 (bf16 products arrive rounded), rows
    padded to their bucket (``bucket_rows``); ``two_rows``: a single row padded to two, where oneDNN
    would sum one row in another order (a GEMV): a plain weight, or a reordered one longer than K_BLOCK."""
    rows = x.shape[0]
    x = padded_to_bucket(x, least=2 if two_rows else 1)
    if len(blocks) == 1:  # the whole K in one call (x whole, not a slice of itself): one op less
        out = torch.ops.mkldnn._linear_pointwise(x, blocks[0], None, "none", [], "").float()
    else:
        out, start = None, 0
        for block in blocks:
            width = block.shape[1]
            part = torch.ops.mkldnn._linear_pointwise(x[:, start : start + width], block, None, "none", [], "")
            out = part.float() if out is None else out.add_(part)
            start += width
        assert out is not None  # every caller passes at least one block
    return out if out.shape[0] == rows else out[:rows]


def plain_takes(weight: Tensor, precision: str = "fp32") -> bool:
    """Whether ``linear`` can use ``weight`` (N, K) as it is (no copy): K <= K_BLOCK, or in fp32 a
    longer K summed whole where the probe finds it row- and thread-count invariant. Position-wise
    matmuls (``Backend.linear``) do so: 2.5% slower for the highways at 256 rows than a reordered
    weight, which the step loop takes (168 MB for the original model; faster at a few rows)."""
    if weight.shape[1] <= K_BLOCK:
        return True
    return precision == "fp32" and whole_sums_invariant(weight.detach(), "plain")


def reordered_blocks(weight: Tensor, precision: str = "fp32") -> List[Tensor]:
    """The weight (N, K) in oneDNN's layout and ``precision``, whole or in K_BLOCK blocks; cached."""
    return derived_copy(weight, ("onednn", precision), lambda tensor: _reordered(tensor, precision))


def _reordered(weight: Tensor, precision: str) -> List[Tensor]:
    with torch.no_grad():
        if precision == "fp32" and weight.shape[1] > K_BLOCK:
            whole = _reorder(weight)
            if whole_sums_invariant(weight, "reordered", whole):
                return [whole]
        blocks = [weight[:, start : start + K_BLOCK] for start in range(0, weight.shape[1], K_BLOCK)]
        return [_reorder(block.to(torch.bfloat16) if precision == "bf16" else block) for block in blocks]


def _reorder(block: Tensor) -> Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(block.contiguous(), 16)


def whole_sums_invariant(weight: Tensor, layout: str, laid_out: Optional[Tensor] = None) -> bool:
    """Whether oneDNN's fp32 rows for a weight of this shape (N, K) and ``layout`` ("plain" or
    "reordered"), summed over the whole K in one call, match for any row count from 2 up at each of
    ``probed_thread_counts``; probed once per shape and layout on the weight itself (``laid_out``:
    it so laid out; no copy), or on a random one where it is too sparse to show its order of sums."""
    threads = probed_thread_counts()

    def probe() -> bool:
        sample = laid_out if laid_out is not None else weight
        if int(weight.count_nonzero()) < weight.numel() // 2:
            sample = torch.randn(weight.shape, generator=torch.Generator().manual_seed(0))
            sample = _reorder(sample) if layout == "reordered" else sample
        return _rows_agree_on_every_thread_count(sample, threads)

    return remembered(("onednn whole sums", tuple(weight.shape), layout, threads), probe)


def _rows_agree_on_every_thread_count(weight: Tensor, thread_counts: Tuple[int, ...]) -> bool:
    x = torch.randn(max(_PROBED_ROWS), weight.shape[1], generator=torch.Generator().manual_seed(0))
    linear = functools.partial(
        torch.ops.mkldnn._linear_pointwise, W=weight, B=None, attr="none", scalars=[], algorithm=""
    )
    return rows_agree(linear, x, _PROBED_ROWS, thread_counts)


# Counts up to here run as they are; above, four sizes per power of two.
_EXACT_UP_TO = 8


def bucket_rows(rows: int) -> int:
    """The size a call of ``rows`` rows runs at: ``rows`` up to 8, else ``rows`` rounded up to a
    multiple of a quarter of the power of two below it (9 -> 10, 17 -> 20, 129 -> 160): at most 25%
    more rows, 28 sizes up to 256. oneDNN compiles a kernel per shape and caches up to 1,024, so
    exact row counts would grow a service's memory with its docs' lengths (BENCHMARKS.md: "Memory
    over a long run"). Zero rows change no other row where the rows are probed row-count invariant."""
    if rows <= _EXACT_UP_TO:
        return rows
    step = 1 << (rows.bit_length() - 3)  # a quarter of the power of two at or below rows
    return -(-rows // step) * step


def padded_to_bucket(x: Tensor, least: int = 1) -> Tensor:
    """x (M, K) with zero rows appended up to ``bucket_rows(max(M, least))`` rows."""
    rows = bucket_rows(max(x.shape[0], least))
    if rows == x.shape[0]:
        return x
    padded = x.new_zeros(rows, x.shape[1])
    padded[: x.shape[0]] = x
    return padded
