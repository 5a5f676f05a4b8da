"""Opt-in reduced precision for inference matmuls: trade exactness for speed.

``fp32`` (the default) is exact. ``bf16`` multiplies bfloat16 copies of the operands (AMX or
AVX512_BF16 through oneDNN on recent x86 CPUs, tensor cores on GPUs), accumulating in fp32, and
returns fp32. ``int8`` quantizes the weights once per output channel and the activations per row
at each call, and sums the int8 products exactly (``quantized``): fastest on CPUs with int8 dot
products (VNNI/AMX), a single sentence included, the same bits on every CPU; the least exact. In both, elementwise work
(gates, cell state, clipping) stays fp32, and results still do not depend on batch companions:
bf16 matmuls run on fixed shapes where oneDNN's bf16 kernels change with the row count (AMX), and
on any row count where a probe finds they do not (see ``onednn``); int8 sums are exact integers,
the same for any row count. What runs for each precision on this machine is ``select``'s rule.

int8 covers every matmul of inference: the LSTM's input, recurrent and projection weights, and
the char CNN's convolutions, highways and token projection. The char CNN's share of the error is
small: on the full-size model it alone moves layer 0 by at most 8e-4 (cosine >= 0.99997) and
leaves the LSTM layers' error as it is.

The bfloat16 or int8 copy of a weight is made once and kept beside the weight (dropped with it,
and remade when the weight changes in place).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .weight_copies import derived_copy

PRECISIONS = ("fp32", "bf16", "int8")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision must be one of {PRECISIONS}, got {precision!r}: 'fp32' is exact; 'bf16' is "
            "faster on CPUs with AMX/AVX512_BF16 and on GPUs, within about 1e-3 of fp32; 'int8' (weights "
            "and activations quantized to int8) is faster on x86 CPUs with AVX2 or better, most with "
            "VNNI/AMX, a single sentence included, and is the least exact: cosine per token >= 0.9996 "
            "against fp32 on the full-size model. `python -m spacy_elmo info --machine` says what each "
            "runs on this machine (see the docs: Speed and precision per CPU)."
        )
    return precision


def operand(tensor: Tensor, precision: str = "fp32") -> Tensor:
    """``tensor`` as a floating-point matmul operand in ``precision``: as it is for fp32; for bf16
    a bfloat16 copy, made once and cached when it is a parameter (or a view of one). int8 matmuls
    are not products of operands: they run through ``quantized.linear``."""
    if precision == "fp32":
        return tensor
    if precision == "bf16":
        return _bf16(tensor)
    raise ValueError(f"operand() takes 'fp32' or 'bf16', got {precision!r}: run int8 through quantized.linear.")


def _bf16(tensor: Tensor) -> Tensor:
    base = tensor._base if tensor._base is not None else tensor
    if not base.requires_grad and not isinstance(base, torch.nn.Parameter):
        return tensor.to(torch.bfloat16)  # an activation: converted every time
    return derived_copy(tensor, "bf16", lambda weight: weight.to(torch.bfloat16))
