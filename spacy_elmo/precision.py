"""Opt-in reduced precision for inference matmuls: trade exactness for speed.

``fp32`` (the default) is exact. ``bf16`` multiplies bfloat16 copies of the operands (AMX or
AVX512_BF16 through oneDNN on recent x86 CPUs, tensor cores on GPUs), accumulating in fp32, and
returns fp32; elementwise work (gates, cell state, clipping) stays fp32. Results still do not
depend on batch companions: bf16 matmuls always run on fixed shapes (oneDNN's bf16 kernels
change with the row count; see ``onednn``).

The bfloat16 copy of a weight is made once and kept beside the weight (dropped with it, and
remade when the weight changes in place).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .weight_copies import derived_copy

PRECISIONS = ("fp32", "bf16")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision must be one of {PRECISIONS}, got {precision!r}: 'fp32' is exact, 'bf16' is "
            "faster on CPUs with AMX/AVX512_BF16 and on GPUs, within about 1e-3 of fp32."
        )
    return precision


def operand(tensor: Tensor, precision: str = "fp32") -> Tensor:
    """``tensor`` as a matmul operand in ``precision``: as it is for fp32; for bf16 a bfloat16 copy,
    made once and cached when it is a parameter (or a view of one)."""
    return tensor if precision == "fp32" else _bf16(tensor)


def _bf16(tensor: Tensor) -> Tensor:
    base = tensor._base if tensor._base is not None else tensor
    if not base.requires_grad and not isinstance(base, torch.nn.Parameter):
        return tensor.to(torch.bfloat16)  # an activation: converted every time
    return derived_copy(tensor, "bf16", lambda weight: weight.to(torch.bfloat16))
