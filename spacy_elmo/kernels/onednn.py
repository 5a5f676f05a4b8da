"""CPU matmuls through oneDNN whose rows do not depend on how many rows a call has.

MKL (torch's default CPU GEMM) chooses its kernel, and so the order of each dot product's sums,
from the matrix shapes: a sentence computed alone (one row) would round differently from the same
sentence in a batch, so through MKL every call keeps a fixed shape (``batch_invariant``).
oneDNN's ``linear`` with a weight it has reordered for itself runs one kernel for any
number of rows, so a single sentence can run as one row, at the cost of a GEMV, and a batch as many
rows, each bitwise the same (measured on AVX-512/AMX and AVX2; ``available`` probes it at run
time, and where the probe fails the fixed-shape path is used instead). A plain (not reordered)
weight gives the same rows from 2 rows up, and a different kernel for one row. In bfloat16 the
same holds on AVX512_BF16 CPUs without AMX (probed: a single sentence then runs as one row, 1.5x
faster than fp32 on an AMD EPYC Zen 5), not on AMX, where oneDNN switches kernels with the row count
(AMX tiles; seen as one element in ten thousand rounding differently): there bf16 calls keep a
fixed row count and are merely fast.

Long sums (K > ``K_BLOCK``): where a probe of the weight's shape and layout finds oneDNN's fp32
rows the same for any row count from 2 up and any thread count (``whole_sums_invariant``), a call
runs the whole sum in one kernel, a single row padded to two (oneDNN takes a GEMV for one row with
long K, which sums in another order). Elsewhere the sum runs over K in blocks of ``K_BLOCK`` of a
reordered copy, added in order, as in ``batch_invariant``, so that no call splits a sum across
threads. The whole sum in one kernel is the faster of the two on the LSTM projection (K = 4096,
N = 512).

The reordered copy of a weight is made once and kept beside it, like the bfloat16 copies of
``precision``. The step loop's weights take one (168 MB for the original model): at a few rows a
reordered weight runs faster than a plain one. Position-wise matmuls (``Kernels.linear``)
run on many rows, where the plain weight is about as fast (2.5% slower for the highways at 256
rows), and use it as it is wherever it can (``plain_takes``): no copy.
"""

from __future__ import annotations

import functools
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import machine
from .precision import operand
from .probes import PROBE_ERRORS, probed_thread_counts, remembered, rows_agree
from .row_buckets import padded_to_bucket
from .weight_copies import derived_copy

# The longest sum one GEMM call takes: measured thread-count invariant in MKL up to 512 (not 2048).
K_BLOCK = 512

# Row counts the whole-sum probe compares (a single row is padded to two).
_PROBED_ROWS = (2, 3, 7, 16, 17, 33, 64, 129, 256)  # up to the char encoder's blocks


def available(device: torch.device, precision: str = "fp32") -> bool:
    """True when ``precision`` ("fp32" or "bf16") matmuls on ``device`` can run through oneDNN with
    rows independent of the row count: a CPU, a torch built with oneDNN, and a probe that finds
    it so on this machine (in bf16 it does on AVX512_BF16 without AMX, not on AMX)."""
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
    """``x @ weight.T``; in fp32 each row is bitwise independent of the number of rows.

    Args:
        x: (M, K) fp32, any M >= 1. weight: (N, K), a parameter (its copies are cached).
        reordered: False uses the weight as it is (no extra copy; pads a single row to two; needs
            ``plain_takes(weight, precision)``).
    Returns:
        (M, N) fp32.
    """
    if not reordered:
        if not plain_takes(weight, precision):
            raise ValueError(
                f"A plain weight takes K <= {K_BLOCK}, or a longer K in fp32 where the whole-sum probe passes; "
                f"got K = {weight.shape[1]} in {precision}. Use reordered=True."
            )
        return _linear_blocks(operand(x.contiguous(), precision), [operand(weight, precision)], two_rows=True)
    blocks = reordered_blocks(weight, precision)
    return _linear_blocks(operand(x.contiguous(), precision), blocks, two_rows=blocks[0].shape[1] > K_BLOCK)


def _linear_blocks(x: Tensor, blocks: List[Tensor], two_rows: bool = False) -> Tensor:
    """Sums of the K blocks' products, added in order, in fp32 (bf16 products arrive rounded).
    The rows run padded to their bucket (``row_buckets``: a bounded number of compiled kernels);
    ``two_rows``: a single row is padded to two, where oneDNN would take another kernel (a GEMV)
    for one row: a plain weight, or a reordered one longer than K_BLOCK."""
    rows = x.shape[0]
    x = padded_to_bucket(x, least=2 if two_rows else 1)
    out, start = None, 0
    for block in blocks:
        width = block.shape[1]
        part = torch.ops.mkldnn._linear_pointwise(x[:, start : start + width], block, None, "none", [], "")
        out = part.float() if out is None else out.add_(part)
        start += width
    assert out is not None  # every caller passes at least one block
    return out[:rows]


def plain_takes(weight: Tensor, precision: str = "fp32") -> bool:
    """Whether ``linear`` can use ``weight`` (N, K) as it is: K <= K_BLOCK, or in fp32 a longer K
    summed whole where the probe finds it row- and thread-count invariant."""
    if weight.shape[1] <= K_BLOCK:
        return True
    return precision == "fp32" and whole_sums_invariant(weight.detach(), "plain")


def reordered_blocks(weight: Tensor, precision: str = "fp32") -> List[Tensor]:
    """The weight (N, K) cut into K blocks of K_BLOCK columns, each in oneDNN's own layout, in
    ``precision``; made once per weight (or view of one) and version."""
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
    """Whether oneDNN's fp32 rows for a weight of this shape (N, K), plain or reordered
    (``layout``), its sum over the whole K in one call, are bitwise the same for any row count
    from 2 up and any thread count: probed once per shape and layout, with the thread counts of
    ``probed_thread_counts``, on the weight itself (``laid_out``: ``weight`` in that layout; no
    second weight in memory) unless it is too sparse to show the order of its sums (then on a
    random one)."""
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
