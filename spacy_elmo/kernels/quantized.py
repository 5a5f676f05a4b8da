"""int8 matmuls: weights quantized once per output channel, activations per row at each call,
products summed exactly in int32.

A row v (of a weight (N, K), or of an activation (M, K)) becomes ``round(v / s)`` in int8 with
its own scale ``s = max|v| / 127`` (symmetric; a row of zeros gets scale 0 and zeros).
The int8 products of a row are summed in int32, exactly: |sum| <= K * 127 * 127, below 2**31
for K up to 133,000. So a row's integer result is the same whatever the number of rows, the kernel
or the thread count: int8 needs neither the fixed shapes nor the K blocks of ``batch_invariant``.
The sums are turned into results by a fixed sequence of elementwise IEEE operations,
``(fp32(sum) * s_w) * s_x (+ bias)``, which round alike on every code path (the scale's inverse is
taken with ``reciprocal``, never by dividing by a broadcast scalar, which ATen may compute as a
multiplication by the reciprocal for one row and as a division for several).

The kernels that sum them exactly on this machine are found by probes of their bits
(``exact_int8_kernels``); which of them a model runs, if any, is decided by timing them at its
shapes when it is loaded (``kernels.plan``), and ``int8_kernel`` is the default for direct calls.
Every kernel gives ``fp32(sum) * s_w``, with the same bits for the same weight levels:

- ``onednn``: oneDNN's int8 linear on AMX (``amx_int8``), for weights with K and N of at least
  64, given the weight's scales, an activation scale of 1 and zero points of 0: about twice as
  fast as ``torch._int_mm`` for the LSTM's shapes, a single row included (measured on a Xeon with
  AMX). Without AMX, oneDNN may answer with its reference kernel (``ref_int8``: exact, but about
  1,000 times slower than ``torch._int_mm``; seen on an AMD EPYC with AVX512_VNNI), so it is used on
  AMX only.
- ``int_mm``: ``torch._int_mm``, then the two steps in fp32, on CPUs with int8 dot products that
  sum in int32 (VNNI: ``avx512_vnni``, ``avx_vnni``, or AMX) and on CUDA. cuBLASLt's int8 GEMM
  takes more than 16 rows and K, N multiples of 8: there the weight copy is padded once with zero
  rows and columns, and each activation with zero rows and columns, which add nothing to the sums.
- ``int_mm_7bit``: CPUs with AVX2 but no VNNI multiply pairs of bytes into saturating int16
  (``vpmaddubsw``, the activation shifted to unsigned): 255 * 127 * 2 overflows, and the sums go
  wrong on batches. Weights quantized to 7 bits (``[-63, 63]``, the remedy fbgemm calls
  ``reduce_range``) keep every pair below 2**15, so the sums are exact again, at twice the
  weights' quantization step. Results differ from the VNNI CPUs' (other weights), and keep
  every invariance promise on the CPU. On a real AVX2-only CPU (AMD EPYC Zen 3) this torch's
  ``torch._int_mm`` ran a reference loop, 30 to 150 times slower than fp32: the timing at load
  then leaves int8 for fp32.
- ``onednn_7bit``: oneDNN's int8 linear with 7-bit weights, a candidate on CPUs without VNNI
  where its AVX2 kernels sum exactly (probed) and the timing finds them fast.

Each kernel is used only where a probe finds exact sums for 1 to 300 rows (``_sums_exact``).
The quantized copy of a weight is made once and kept beside it (``weight_copies``), like the
bfloat16 copies of ``precision``: a quarter of the weight's size.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import machine
from .onednn import PROBE_ERRORS
from .row_buckets import bucket_rows, padded_to_bucket
from .weight_copies import derived_copy

INT8_MAX = 127
# Weights of 7 bits for the CPUs without VNNI (see the module docstring).
INT7_MAX = 63
# The longest sum whose int32 total cannot overflow: K * 127 * 127 < 2**31.
MAX_K = (2**31 - 1) // (INT8_MAX * INT8_MAX)
# oneDNN sums weights with K and N from this size on: for the char CNN's narrowest filters (K = 16)
# it falls to a kernel hundreds of times slower than torch._int_mm (measured on AMX), and below
# 64 torch._int_mm is as fast.
_ONEDNN_MIN_SIZE = 64
# cuBLASLt's int8 GEMM: more than 16 rows; K and N multiples of 8.
_CUDA_MIN_ROWS, _CUDA_MULTIPLE = 17, 8


class Int8Kernel(NamedTuple):
    """How int8 sums run on a device: ``name`` (a key of ``INT8_KERNELS``), the weights' largest
    quantized value, and the CPU features the kernel rests on."""

    name: str
    weight_levels: int
    features: Tuple[str, ...]

    @property
    def through_onednn(self) -> bool:
        return self.name.startswith("onednn")


# Int8 dot products that sum in int32.
VNNI_FEATURES = ("amx_int8", "avx512_vnni", "avx_vnni")


class OneDnnInt8(NamedTuple):
    """A weight (N, K) prepacked for oneDNN's int8 linear: packed (K, N) int8, with its scales
    (N,) fp32 and zero points (N,) of 0."""

    packed: Tensor
    scale: Tensor
    zeros: Tensor


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight (N, K) in int8, in the layout of the kernel that sums it.

    values_t: for ``torch._int_mm``: (K', N') int8, column-major (the transpose of a contiguous
        (N', K')); K' >= K and N' >= N where the device needs padded shapes (the padding is
        zeros). None where oneDNN sums it.
    onednn: oneDNN's copy, on CPUs where its exact sums were probed (``onednn_sums_exact``); else None.
    scale: (N,) fp32, one per output channel.
    """

    values_t: Optional[Tensor]
    scale: Tensor
    onednn: Optional[OneDnnInt8] = None

    @property
    def out_features(self) -> int:
        return self.scale.shape[0]


def quantize_rows(x: Tensor, levels: int = INT8_MAX) -> Tuple[Tensor, Tensor]:
    """Symmetric per-row int8 quantization, rounding to nearest.

    Args:
        x: (M, K) float. levels: the largest quantized value (127, or 63 for 7-bit weights).
    Returns:
        values (M, K) int8 in [-levels, levels] and scale (M,) fp32 with values * scale[:, None]
        ~ x; a row of zeros (padding) gets scale 0 and zeros, without NaN.
    """
    x = x.float()
    scale = x.abs().amax(dim=1) / levels
    # A scale too small for a finite reciprocal only comes from a row of zeros or of subnormals.
    usable = scale >= torch.finfo(torch.float32).tiny
    inverse = torch.where(usable, scale.reciprocal(), torch.zeros_like(scale))
    values = (x * inverse[:, None]).round_().clamp_(-levels, levels).to(torch.int8)
    return values, torch.where(usable, scale, torch.zeros_like(scale))


def check_sum_length(inner: int, what: str) -> None:
    """Refuse int8 sums of more than MAX_K products (their int32 total could overflow): a
    ValueError naming ``what`` and the alternative."""
    if inner > MAX_K:
        raise ValueError(
            f"precision 'int8' cannot run {what}: int8 sums of {inner} products could overflow int32 (at most "
            f"{MAX_K}); use precision 'bf16' or 'fp32' for this model."
        )


def quantized_weight(weight: Tensor, kernel: Optional[str] = None) -> QuantizedWeight:
    """The int8 copy of ``weight`` (N, K) for ``kernel`` (a name of ``INT8_KERNELS``; default:
    ``int8_kernel``'s), made once per weight (or view of one), kernel and version."""
    chosen = _kernel_named(kernel, weight.device)
    return derived_copy(weight, ("int8", chosen.name), lambda tensor: quantize_weight(tensor, chosen))


def _kernel_named(name: Optional[str], device: torch.device) -> Int8Kernel:
    if name is not None:
        return INT8_KERNELS[name]
    kernel = int8_kernel(device)
    if kernel is None:
        raise RuntimeError(
            f"int8 has no exact kernel on this CPU ({machine.cpu_description()}): it needs VNNI "
            "(avx512_vnni, avx_vnni or amx_int8) or AVX2. Use precision 'fp32'."
        )
    return kernel


def quantize_weight(weight: Tensor, kernel: Int8Kernel) -> QuantizedWeight:
    """``weight`` (N, K) in int8 at ``kernel``'s weight levels, in its layout (not cached)."""
    check_sum_length(weight.shape[1], "this weight")
    with torch.no_grad():
        values, scale = _quantize_in_chunks(weight, kernel.weight_levels)
        if kernel.through_onednn and min(weight.shape) >= _ONEDNN_MIN_SIZE:
            return QuantizedWeight(values_t=None, scale=scale, onednn=_prepack(values, scale))
        multiple = _CUDA_MULTIPLE if weight.device.type == "cuda" else 1
        padding = (0, -values.shape[1] % multiple, 0, -values.shape[0] % multiple)
        if any(padding):
            values = F.pad(values, padding)
        return QuantizedWeight(values_t=values.contiguous().t(), scale=scale)


def _quantize_in_chunks(weight: Tensor, levels: int, rows: int = 1024) -> Tuple[Tensor, Tensor]:
    """``quantize_rows(weight, levels)`` a block of rows at a time: rows are quantized
    independently, and the fp32 temporaries stay small (whole, they would raise the peak memory by
    twice the weight)."""
    values = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scale = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for start in range(0, weight.shape[0], rows):
        values[start : start + rows], scale[start : start + rows] = quantize_rows(weight[start : start + rows], levels)
    return values, scale


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, kernel: Optional[str] = None) -> Tensor:
    """``x @ weight.T + bias`` with int8 operands and exact int32 sums.

    Args:
        x: (M, K) float, any M >= 0. weight: (N, K), a parameter (its int8 copy is cached).
        bias: (N,) or None, added in fp32. kernel: which of ``INT8_KERNELS`` sums (default:
            ``int8_kernel``'s; a loaded model passes its plan's).
    Returns:
        (M, N) fp32, contiguous; each row bitwise independent of M and of the other rows.
    """
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features but the weight takes {weight.shape[1]}.")
    return scaled_linear(x, quantized_weight(weight, kernel), bias)


def scaled_linear(x: Tensor, packed: QuantizedWeight, bias: Optional[Tensor] = None) -> Tensor:
    """``linear`` with the weight's int8 copy given: x (M, K) float -> (M, N) fp32."""
    values, x_scale = quantize_rows(x)
    out = channel_scaled_sums(values, packed).mul_(x_scale[:, None])
    if bias is not None:
        out.add_(bias)
    return out.contiguous()


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Exact int32 ``a @ b`` for a (M, K) int8 and b (K', N) int8 with K' >= K (the rows past K
    must be zeros): a is padded to K' columns, on CUDA to at least 17 rows (cuBLASLt), on CPU to
    its rows' bucket (``row_buckets``: oneDNN compiles a kernel per shape). Returns (M, N) int32."""
    rows, columns = a.shape
    if rows == 0:
        return a.new_zeros((0, b.shape[1]), dtype=torch.int32)
    padded_rows = max(rows, _CUDA_MIN_ROWS) if a.device.type == "cuda" else bucket_rows(rows)
    padding = (0, b.shape[0] - columns, 0, padded_rows - rows)
    if any(padding):
        a = F.pad(a, padding)
    return torch._int_mm(a, b)[:rows]


def channel_scaled_sums(values: Tensor, weight: QuantizedWeight) -> Tensor:
    """``fp32(values @ weight_values.T) * weight.scale``: the exact integer sums, converted to
    fp32 (rounding to nearest even past 2**24), times each output channel's scale; the same bits
    on both kernels.

    Args:
        values: (M, K) int8, any M >= 0.
    Returns:
        (M, N) fp32, contiguous.
    """
    if weight.onednn is None:
        assert weight.values_t is not None  # _quantize_weight sets exactly one of values_t and onednn
        sums = int_mm(values, weight.values_t)[:, : weight.out_features]
        return sums.to(torch.float32).mul_(weight.scale)
    if values.shape[0] == 0:
        return values.new_zeros((0, weight.out_features), dtype=torch.float32)
    return _onednn_scaled_sums(values, weight.onednn)


def _prepack(values: Tensor, scale: Tensor) -> OneDnnInt8:
    """values (N, K) int8 and scale (N,) -> oneDNN's copy of them."""
    return OneDnnInt8(
        packed=torch.ops.onednn.qlinear_prepack(values.contiguous(), None),
        scale=scale.float().contiguous(),
        zeros=torch.zeros(values.shape[0], dtype=torch.long),
    )


def _onednn_scaled_sums(values: Tensor, weight: OneDnnInt8) -> Tensor:
    """values (M, K) int8, M >= 1 -> (M, N) fp32 ``fp32(sums) * scale``, through oneDNN, its rows
    padded to their bucket (``row_buckets``)."""
    x_scale, x_zero_point, bias, output_scale, output_zero_point = 1.0, 0, None, 1.0, 0
    rows = values.shape[0]
    return torch.ops.onednn.qlinear_pointwise(
        padded_to_bucket(values.contiguous()),
        x_scale,
        x_zero_point,
        weight.packed,
        weight.scale,
        weight.zeros,
        bias,
        output_scale,
        output_zero_point,
        torch.float32,
        "none",
        [],
        "",
    )[:rows]


def int8_kernel(device: torch.device, features: Optional[frozenset] = None) -> Optional[Int8Kernel]:
    """The default kernel for int8 sums on ``device`` (direct calls without a plan): the first exact
    one of ``exact_int8_kernels``, in the order the CPU features suggest; None where none is exact."""
    kernels = exact_int8_kernels(device, features)
    return kernels[0] if kernels else None


def exact_int8_kernels(device: torch.device, features: Optional[frozenset] = None) -> Tuple[Int8Kernel, ...]:
    """Every kernel whose sums a probe finds exact on ``device`` (``features``: those of
    ``machine.cpu_features`` unless given), most likely fastest first: oneDNN on AMX, then
    ``torch._int_mm`` on VNNI, then the 7-bit kernels on AVX2. Which one a model runs is timed
    (``kernels.plan``)."""
    if device.type == "cuda":
        return (INT8_KERNELS["int_mm"],)
    return _cpu_int8_kernels(machine.cpu_features() if features is None else frozenset(features))


@functools.lru_cache(maxsize=None)
def _cpu_int8_kernels(features: frozenset) -> Tuple[Int8Kernel, ...]:
    vnni = tuple(name for name in VNNI_FEATURES if name in features)
    found = []
    if "amx_int8" in features and onednn_sums_exact(INT8_MAX):
        found.append(Int8Kernel("onednn", INT8_MAX, ("amx_int8",)))
    if vnni and int_mm_sums_exact(INT8_MAX):
        found.append(Int8Kernel("int_mm", INT8_MAX, vnni))
    if "avx2" in features and not vnni:
        if int_mm_sums_exact(INT7_MAX):
            found.append(Int8Kernel("int_mm_7bit", INT7_MAX, ("avx2",)))
        if onednn_sums_exact(INT7_MAX):
            found.append(Int8Kernel("onednn_7bit", INT7_MAX, ("avx2",)))
    return tuple(found)


# Every int8 kernel by name, with its weight levels (the features are the CPU's, see exact_int8_kernels).
INT8_KERNELS = {
    kernel.name: kernel
    for kernel in (
        Int8Kernel("onednn", INT8_MAX, ("amx_int8",)),
        Int8Kernel("int_mm", INT8_MAX, ()),
        Int8Kernel("int_mm_7bit", INT7_MAX, ("avx2",)),
        Int8Kernel("onednn_7bit", INT7_MAX, ("avx2",)),
    )
}


@functools.lru_cache(maxsize=None)
def onednn_sums_exact(weight_levels: int = INT8_MAX) -> bool:
    """Whether oneDNN's int8 linear is present and gives ``fp32(exact sums) * scale``, bit for bit,
    for weights in ``[-weight_levels, weight_levels]`` and any number of rows on this CPU
    (``_sums_exact``)."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.onednn, "qlinear_pointwise"):
        return False
    return _sums_exact(lambda a, w, scale: _onednn_scaled_sums(a, _prepack(w, scale)), weight_levels)


@functools.lru_cache(maxsize=None)
def int_mm_sums_exact(weight_levels: int) -> bool:
    """Whether ``torch._int_mm`` sums exactly on this CPU for weights in ``[-weight_levels,
    weight_levels]`` and any number of rows (``_sums_exact``)."""
    if not hasattr(torch, "_int_mm"):
        return False
    return _sums_exact(lambda a, w, scale: int_mm(a, w.contiguous().t()).to(torch.float32).mul_(scale), weight_levels)


def _sums_exact(scaled_sums: Callable[[Tensor, Tensor, Tensor], Tensor], weight_levels: int) -> bool:
    """Whether ``scaled_sums(a (M, K), w (N, K), scale (N,))`` is ``fp32(a @ w.T) * scale`` bit
    for bit: compared with int64 sums on random operands and on rows of extremes (where a kernel
    summing pairs in int16 would saturate), for 1 to 300 rows, with K = 64 and K = 4099 (sums past
    2**24 must round as ``Tensor.to(float32)`` rounds)."""
    generator = torch.Generator().manual_seed(0)
    for inner in (_ONEDNN_MIN_SIZE, 4099):
        a = torch.randint(-INT8_MAX, INT8_MAX + 1, (300, inner), dtype=torch.int8, generator=generator)
        w = torch.randint(
            -weight_levels, weight_levels + 1, (_ONEDNN_MIN_SIZE, inner), dtype=torch.int8, generator=generator
        )
        a[0], a[1], a[2], w[0], w[1] = INT8_MAX, -INT8_MAX, -INT8_MAX, weight_levels, -weight_levels
        scale = torch.rand(_ONEDNN_MIN_SIZE, generator=generator) / 1000
        expected = (a.long() @ w.long().t()).to(torch.float32).mul_(scale)
        try:
            if not all(torch.equal(scaled_sums(a[:n], w, scale), expected[:n]) for n in (1, 2, 3, 17, 64, 300)):
                return False
        except PROBE_ERRORS:  # an op this build of torch lacks or this CPU cannot run
            return False
    return True
