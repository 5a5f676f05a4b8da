"""int8 matmuls: weights quantized once per output channel, activations per row at each call,
products summed exactly, so a row's result does not depend on the row count, the kernel or the
thread count (no fixed shapes or K blocks as in ``batch_invariant``).

Sums become results by fixed elementwise IEEE operations, ``(fp32(sum) * s_w) * s_x (+ bias)``. A
scale's inverse comes from ``reciprocal``, never from dividing by a broadcast scalar, which ATen may
compute as a multiplication by the reciprocal for one row and as a division for several. Every kernel
of ``INT8_KERNELS`` gives the same bits (``fp32_sums``, on any CPU, a little slower than fp32); each
runs only where ``_sums_exact`` finds it exact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .machine import PROBE_ERRORS, remembered
from .onednn import bucket_rows, padded_to_bucket
from .precision import derived_copy

INT8_MAX = 127
# The longest sum whose int32 total cannot overflow: K * 127 * 127 < 2**31 (K up to 133,000).
MAX_K = (2**31 - 1) // (INT8_MAX * INT8_MAX)
# The longest sum of int8 products that fp32 holds exactly whatever the order: K * 127 * 127 < 2**24.
FP32_EXACT_K = 1024
# oneDNN sums weights with K and N from this size on (below, torch._int_mm is as fast).
_ONEDNN_MIN_SIZE = 64
# cuBLASLt's int8 GEMM: more than 16 rows; K and N multiples of 8.
_CUDA_MIN_ROWS, _CUDA_MULTIPLE = 17, 8
# Int8 dot products that sum in int32; without them AVX2 sums byte pairs in saturating int16.
VNNI_FEATURES = ("amx_int8", "avx512_vnni", "avx_vnni")


@dataclass(frozen=True)
class Int8Kernel:
    """A way to sum int8 products exactly: its ``INT8_KERNELS`` key, its name in ``info``, the CPU
    features it needs (any one; none: every CPU), and the type its operands hold the levels in."""

    name: str
    title: str
    needs: Tuple[str, ...]
    operand: torch.dtype = torch.int8


# "onednn" needs AMX: without it oneDNN may run its reference kernel (exact, about 1,000 times slower).
INT8_KERNELS = {
    kernel.name: kernel
    for kernel in (
        Int8Kernel("onednn", "oneDNN int8 linear (AMX tiles)", ("amx_int8",)),
        Int8Kernel("int_mm", "torch._int_mm (int8 dot products, int32 sums)", VNNI_FEATURES),
        Int8Kernel("fp32_sums", "int8 values summed exactly by fp32 GEMMs", (), torch.float32),
    )
}


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight (N, K) in int8 in the layout of ``kernel`` (an ``INT8_KERNELS`` name); scale (N,)
    fp32; values_t (``int_mm``): the levels transposed (K', N'), column-major, zero-padded where CUDA
    needs it; onednn: oneDNN's prepacked copy; blocks (``fp32_sums``): ``fp32_blocks``' K blocks."""

    kernel: str
    scale: Tensor
    values_t: Optional[Tensor] = None
    onednn: Optional[Tuple[Tensor, Tensor, Tensor]] = None
    blocks: Optional[Tuple[Tensor, ...]] = None

    @property
    def out_features(self) -> int:
        return self.scale.shape[0]


def quantize_rows(x: Tensor, dtype: torch.dtype = torch.int8) -> Tuple[Tensor, Tensor]:
    """Symmetric per-row int8 quantization, rounding to nearest: x (M, K) -> values (M, K) in
    [-127, 127] as ``dtype`` (int8, or fp32 for ``fp32_sums``) and scale (M,) fp32, values *
    scale[:, None] ~ x; a row of zeros (padding) gets scale 0 and zeros, without NaN."""
    x = x.float()
    scale = x.abs().amax(dim=1) / INT8_MAX
    # A scale too small for a finite reciprocal only comes from a row of zeros or of subnormals.
    usable = scale >= torch.finfo(torch.float32).tiny
    inverse = torch.where(usable, scale.reciprocal(), torch.zeros_like(scale))
    values = (x * inverse[:, None]).round_().clamp_(-INT8_MAX, INT8_MAX).to(dtype)
    return values, torch.where(usable, scale, torch.zeros_like(scale))


def check_sum_length(inner: int, what: str) -> None:
    """Raise ValueError for int8 sums of more than MAX_K products (their int32 total could overflow)."""
    if inner > MAX_K:
        raise ValueError(
            f"precision 'int8' cannot run {what}: int8 sums of {inner} products could overflow int32 (at most "
            f"{MAX_K}); use precision 'bf16' or 'fp32' for this model."
        )


def quantized_weight(weight: Tensor, kernel: Int8Kernel) -> QuantizedWeight:
    """The int8 copy of ``weight`` (N, K) for ``kernel``, made once per weight, kernel and version."""
    return derived_copy(weight, ("int8", kernel.name), lambda tensor: quantize_weight(tensor, kernel))


def quantize_weight(weight: Tensor, kernel: Int8Kernel) -> QuantizedWeight:
    """``weight`` (N, K) in int8, in ``kernel``'s layout (not cached)."""
    check_sum_length(weight.shape[1], "this weight")
    with torch.no_grad():
        values, scale = _quantize_in_chunks(weight)
        if kernel.name == "onednn" and min(weight.shape) >= _ONEDNN_MIN_SIZE:
            return QuantizedWeight("onednn", scale, onednn=_prepack(values, scale))
        if kernel.name == "fp32_sums":
            return QuantizedWeight("fp32_sums", scale, blocks=fp32_blocks(values.to(kernel.operand)))
        multiple = _CUDA_MULTIPLE if weight.device.type == "cuda" else 1
        padding = (0, -values.shape[1] % multiple, 0, -values.shape[0] % multiple)
        if any(padding):
            values = F.pad(values, padding)
        return QuantizedWeight("int_mm", scale, values_t=values.contiguous().t())


def _quantize_in_chunks(weight: Tensor, rows: int = 1024) -> Tuple[Tensor, Tensor]:
    """``quantize_rows(weight)`` a block of rows at a time: rows are quantized independently, and
    the fp32 temporaries stay small (whole, they would raise the peak memory by twice the weight)."""
    values = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scale = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for start in range(0, weight.shape[0], rows):
        values[start : start + rows], scale[start : start + rows] = quantize_rows(weight[start : start + rows])
    return values, scale


def linear(
    x: Tensor, weight: Tensor, kernel: Int8Kernel, bias: Optional[Tensor] = None, fine_inputs: bool = False
) -> Tensor:
    """``x @ weight.T + bias`` with int8 operands and exact sums: x (M, K), M >= 0; weight (N, K), its
    int8 copy cached; bias (N,) or None, added in fp32 -> (M, N) fp32, contiguous, rows independent of M.
    ``fine_inputs``: x in two int8 terms (``quantize_rows_twice``), summed in one call of twice the rows."""
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features but the weight takes {weight.shape[1]}.")
    weight_q = quantized_weight(weight, kernel)
    if fine_inputs:
        values, (coarse, residual) = quantize_rows_twice(x, kernel.operand)
        sums = channel_scaled_sums(values, weight_q)
        rows = x.shape[0]
        out = sums[:rows].mul_(coarse[:, None]).add_(sums[rows:].mul_(residual[:, None]))
    else:
        out = _coarse_linear(x, weight_q, kernel.operand)
    if bias is not None:
        out.add_(bias)
    return out.contiguous()


def prepared_linear(weight: Tensor, kernel: Int8Kernel) -> Callable[[Tensor], Tensor]:
    """``linear(x, weight, kernel)`` with the weight's int8 copy looked up once: for a loop that
    multiplies by one weight many times (the LSTM step loop), the same bits."""
    weight_q = quantized_weight(weight, kernel)
    return functools.partial(_coarse_linear, weight_q=weight_q, operand=kernel.operand)


def _coarse_linear(x: Tensor, weight_q: QuantizedWeight, operand: torch.dtype) -> Tensor:
    """``linear`` without bias or ``fine_inputs``, on the weight's int8 copy."""
    values, x_scale = quantize_rows(x, operand)
    return channel_scaled_sums(values, weight_q).mul_(x_scale[:, None]).contiguous()


def quantize_rows_twice(x: Tensor, dtype: torch.dtype = torch.int8) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """x (M, K) as two int8 terms, ``quantize_rows`` of x and of what it leaves: values (2M, K), the
    first term's rows then the residual's, and their scales, each (M,); x ~ v1 * s1 + v2 * s2, about
    15 bits per value instead of 8. Every step is an elementwise IEEE operation on its own row."""
    x = x.float()
    values, scale = quantize_rows(x)
    residual = x - values.float().mul_(scale[:, None])
    residual_values, residual_scale = quantize_rows(residual)
    return torch.cat([values, residual_values]).to(dtype), (scale, residual_scale)


def channel_scaled_sums(values: Tensor, weight: QuantizedWeight) -> Tensor:
    """values (M, K) int8 (fp32 levels for ``fp32_sums``), M >= 0 -> (M, N) fp32, contiguous:
    ``fp32(values @ weight_values.T) * weight.scale``, exact sums rounded to nearest even past 2**24."""
    if values.shape[0] == 0:
        return values.new_zeros((0, weight.out_features), dtype=torch.float32)
    if weight.onednn is not None:
        return _onednn_scaled_sums(values, weight.onednn)
    if weight.blocks is not None:
        return fp32_sums(values, weight.blocks).mul_(weight.scale)
    assert weight.values_t is not None  # quantize_weight sets values_t for int_mm, the one kernel left
    sums = int_mm(values, weight.values_t)[:, : weight.out_features]
    return sums.to(torch.float32).mul_(weight.scale)


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Exact int32 ``a @ b``: a (M, K) int8, b (K', N) int8 with K' >= K, zero past row K -> (M, N)
    int32; a is padded to K' columns and, on CPU, to its rows' bucket (``onednn.bucket_rows``)."""
    rows, columns = a.shape
    if rows == 0:
        return a.new_zeros((0, b.shape[1]), dtype=torch.int32)
    padded_rows = max(rows, _CUDA_MIN_ROWS) if a.device.type == "cuda" else bucket_rows(rows)
    padding = (0, b.shape[0] - columns, 0, padded_rows - rows)
    if any(padding):
        a = F.pad(a, padding)
    return torch._int_mm(a, b)[:rows]


def fp32_blocks(levels: Tensor, onednn: Optional[bool] = None) -> Tuple[Tensor, ...]:
    """levels (N, K) fp32 -> ``FP32_EXACT_K``-column blocks for ``fp32_sums``: (N, K_b) in oneDNN's
    layout where ``onednn`` (default ``_through_onednn``; faster at a few rows than MKL on a plain
    weight), else (K_b, N) column-major."""
    onednn = _through_onednn(levels.device) if onednn is None else onednn
    blocks = [levels[:, start : start + FP32_EXACT_K].contiguous() for start in range(0, levels.shape[1], FP32_EXACT_K)]
    return tuple(torch.ops.mkldnn._reorder_linear_weight(block, 16) if onednn else block.t() for block in blocks)


def fp32_sums(a: Tensor, blocks: Tuple[Tensor, ...], onednn: Optional[bool] = None) -> Tensor:
    """``fp32(a @ levels.T)`` for a (M, K) levels (int8 or fp32) and ``fp32_blocks``' blocks (``onednn``
    as there) -> (M, N) fp32: one fp32 GEMM per block, exact in any order, blocks added in int32."""
    rows = a.shape[0]
    onednn = _through_onednn(a.device) if onednn is None else onednn
    a_float = padded_to_bucket(a.float()) if onednn else a.float()  # oneDNN compiles a kernel per shape
    parts = []
    for index, block in enumerate(blocks):
        x = a_float[:, index * FP32_EXACT_K : (index + 1) * FP32_EXACT_K]
        parts.append(
            torch.ops.mkldnn._linear_pointwise(x.contiguous(), block, None, "none", [], "") if onednn else x @ block
        )
    if len(parts) == 1:
        return parts[0][:rows]
    total = parts[0].to(torch.int32)
    for part in parts[1:]:
        total.add_(part.to(torch.int32))
    return total[:rows].to(torch.float32)


def _through_onednn(device: torch.device) -> bool:
    """Whether ``fp32_sums`` runs its GEMMs through oneDNN on ``device``: a CPU where it was probed exact."""
    return device.type == "cpu" and onednn_fp32_runs()


def onednn_fp32_runs() -> bool:
    """Whether this torch's oneDNN fp32 linear on a reordered weight sums int8 levels exactly here."""
    return remembered("int8 sums through oneDNN fp32", _probe_onednn_fp32)


def _probe_onednn_fp32() -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    return _sums_exact(lambda a, w, scale: fp32_sums(a, fp32_blocks(w.float(), True), True).mul_(scale))


def _prepack(values: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """values (N, K) int8 and scale (N,) -> oneDNN's copy: (packed, scales, zero points of 0)."""
    packed = torch.ops.onednn.qlinear_prepack(values.contiguous(), None)
    return packed, scale.float().contiguous(), torch.zeros(values.shape[0], dtype=torch.long)


def _onednn_scaled_sums(values: Tensor, weight: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """values (M, K) int8, M >= 1 -> (M, N) fp32 ``fp32(sums) * scale``, through oneDNN, its rows
    padded to their bucket (``onednn.bucket_rows``): activation scale 1 and zero points 0."""
    packed, scale, zeros = weight
    rows = values.shape[0]
    return torch.ops.onednn.qlinear_pointwise(
        padded_to_bucket(values.contiguous()), 1.0, 0, packed, scale, zeros, None, 1.0, 0, torch.float32,
        "none", [], "",
    )[:rows]  # fmt: skip


def exact_int8_kernels(device: torch.device, features: frozenset) -> Tuple[Int8Kernel, ...]:
    """The kernels of ``INT8_KERNELS`` that the CPU ``features`` allow and a probe finds exact, in
    ``select``'s order of preference; on CUDA ``torch._int_mm``."""
    if device.type == "cuda":
        return (INT8_KERNELS["int_mm"],)
    return tuple(kernel for kernel in INT8_KERNELS.values() if _allowed(kernel, features) and sums_exact(kernel))


def _allowed(kernel: Int8Kernel, features: frozenset) -> bool:
    return not kernel.needs or any(name in features for name in kernel.needs)


def sums_exact(kernel: Int8Kernel) -> bool:
    """Whether ``kernel`` runs here with sums that ``_sums_exact`` finds exact; probed once per process."""
    return remembered(("int8 sums exact", kernel.name), lambda: _probe(kernel))


def _probe(kernel: Int8Kernel) -> bool:
    if kernel.name == "onednn":
        if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.onednn, "qlinear_pointwise"):
            return False
        return _sums_exact(lambda a, w, scale: _onednn_scaled_sums(a, _prepack(w, scale)))
    if kernel.name == "int_mm":
        if not hasattr(torch, "_int_mm"):
            return False
        return _sums_exact(lambda a, w, scale: int_mm(a, w.contiguous().t()).to(torch.float32).mul_(scale))
    return _sums_exact(lambda a, w, scale: fp32_sums(a, fp32_blocks(w.float(), False), False).mul_(scale))


def _sums_exact(scaled_sums: Callable[[Tensor, Tensor, Tensor], Tensor]) -> bool:
    """Whether ``scaled_sums(a (M, K), w (N, K), scale (N,))`` is ``fp32(a @ w.T) * scale`` bit
    for bit: compared with int64 sums on random operands and on rows of extremes (where a kernel
    summing pairs in int16 would saturate), for 1 to 300 rows, with K = 64 and K = 4099 (sums past
    2**24 must round as ``Tensor.to(float32)`` rounds)."""
    generator = torch.Generator().manual_seed(0)
    for inner in (_ONEDNN_MIN_SIZE, 4099):
        a = torch.randint(-INT8_MAX, INT8_MAX + 1, (300, inner), dtype=torch.int8, generator=generator)
        w = torch.randint(-INT8_MAX, INT8_MAX + 1, (_ONEDNN_MIN_SIZE, inner), dtype=torch.int8, generator=generator)
        a[0], a[1], a[2], w[0], w[1] = INT8_MAX, -INT8_MAX, -INT8_MAX, INT8_MAX, -INT8_MAX
        scale = torch.rand(_ONEDNN_MIN_SIZE, generator=generator) / 1000
        expected = (a.long() @ w.long().t()).to(torch.float32).mul_(scale)
        try:
            if not all(torch.equal(scaled_sums(a[:n], w, scale), expected[:n]) for n in (1, 2, 3, 17, 64, 300)):
                return False
        except PROBE_ERRORS:  # an op this build of torch lacks or this CPU cannot run
            return False
    return True
