"""int8 matmuls: weights quantized once per output channel, activations per row at each call,
products summed exactly in int32.

A row v (of a weight (N, K), or of an activation (M, K)) becomes ``round(v / s)`` in int8 with
its own scale ``s = max|v| / 127`` (symmetric; a row of zeros gets scale 0 and zeros).
``torch._int_mm`` sums the int8 products of a row in int32, exactly: |sum| <= K * 127 * 127,
below 2**31 for K up to 133,000. So a row's integer result is the same whatever the number of
rows, the kernel or the thread count: int8 needs neither the fixed shapes nor the K blocks of
``batch_invariant``. It is turned back into fp32 by a fixed sequence of elementwise IEEE
operations, ``(sum * s_x) * s_w (+ bias)``, which round alike on every code path (the scale's
inverse is taken with ``reciprocal``, never by dividing by a broadcast scalar, which ATen may
compute as a multiplication by the reciprocal for one row and as a division for several).

cuBLASLt's int8 GEMM (CUDA) takes more than 16 rows and K, N multiples of 8: there the weight
copy is padded once with zero rows and columns, and each activation with zero rows and columns,
which add nothing to the integer sums. CPUs take any shape.

The quantized copy of a weight is made once and kept beside it (``weight_copies``), like the
bfloat16 copies of ``precision``: a quarter of the weight's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .weight_copies import derived_copy

INT8_MAX = 127
# The longest sum whose int32 total cannot overflow: K * 127 * 127 < 2**31.
MAX_K = (2**31 - 1) // (INT8_MAX * INT8_MAX)
# cuBLASLt's int8 GEMM: more than 16 rows; K and N multiples of 8.
_CUDA_MIN_ROWS, _CUDA_MULTIPLE = 17, 8


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight (N, K) in int8 for ``torch._int_mm``.

    values_t: (K', N') int8, column-major (the transpose of a contiguous (N', K')); K' >= K and
        N' >= N where the device needs padded shapes (the padding is zeros).
    scale: (N,) fp32, one per output channel.
    """

    values_t: Tensor
    scale: Tensor

    @property
    def out_features(self) -> int:
        return self.scale.shape[0]


def quantize_rows(x: Tensor) -> Tuple[Tensor, Tensor]:
    """Symmetric per-row int8 quantization, rounding to nearest.

    Args:
        x: (M, K) float.
    Returns:
        values (M, K) int8 in [-127, 127] and scale (M,) fp32 with values * scale[:, None] ~ x;
        a row of zeros (padding) gets scale 0 and zeros, without NaN.
    """
    x = x.float()
    scale = x.abs().amax(dim=1) / INT8_MAX
    # A scale too small for a finite reciprocal only comes from a row of zeros or of subnormals.
    usable = scale >= torch.finfo(torch.float32).tiny
    inverse = torch.where(usable, scale.reciprocal(), torch.zeros_like(scale))
    values = (x * inverse[:, None]).round_().clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return values, torch.where(usable, scale, torch.zeros_like(scale))


def quantized_weight(weight: Tensor) -> QuantizedWeight:
    """The int8 copy of ``weight`` (N, K), made once per weight (or view of one) and version."""
    return derived_copy(weight, "int8", _quantize_weight)


def _quantize_weight(weight: Tensor) -> QuantizedWeight:
    if weight.shape[1] > MAX_K:
        raise ValueError(
            f"int8 sums of {weight.shape[1]} products could overflow int32 (at most {MAX_K}); "
            "use precision 'bf16' or 'fp32' for this model."
        )
    with torch.no_grad():
        values, scale = quantize_rows(weight)
        multiple = _CUDA_MULTIPLE if weight.device.type == "cuda" else 1
        padding = (0, -values.shape[1] % multiple, 0, -values.shape[0] % multiple)
        if any(padding):
            values = F.pad(values, padding)
        return QuantizedWeight(values_t=values.contiguous().t(), scale=scale)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``x @ weight.T + bias`` with int8 operands and exact int32 sums.

    Args:
        x: (M, K) float, any M >= 0. weight: (N, K), a parameter (its int8 copy is cached).
        bias: (N,) or None, added in fp32.
    Returns:
        (M, N) fp32, contiguous; each row bitwise independent of M and of the other rows.
    """
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features but the weight takes {weight.shape[1]}.")
    packed = quantized_weight(weight)
    values, x_scale = quantize_rows(x)
    sums = int_mm(values, packed.values_t)[:, : packed.out_features]
    out = sums.to(torch.float32).mul_(x_scale[:, None]).mul_(packed.scale)
    if bias is not None:
        out.add_(bias)
    return out.contiguous()


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Exact int32 ``a @ b`` for a (M, K) int8 and b (K', N) int8 with K' >= K (the rows past K
    must be zeros): a is padded to K' columns, and on CUDA to at least 17 rows (cuBLASLt).
    Returns (M, N) int32."""
    rows, columns = a.shape
    min_rows = _CUDA_MIN_ROWS if a.device.type == "cuda" else 1
    if rows == 0:
        return a.new_zeros((0, b.shape[1]), dtype=torch.int32)
    padding = (0, b.shape[0] - columns, 0, max(min_rows - rows, 0))
    if any(padding):
        a = F.pad(a, padding)
    return torch._int_mm(a, b)[:rows]
