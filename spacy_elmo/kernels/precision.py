"""Opt-in reduced precision for inference matmuls: trade exactness for speed.

``fp32`` (the default) is exact. ``bf16`` multiplies bfloat16 copies of the operands (oneDNN's AMX
or AVX512_BF16 kernels, tensor cores on GPUs), accumulates and returns fp32. ``int8`` quantizes
weights once per output channel and activations per row per call (in two terms where the rounding
reaches the token representation undamped) and sums the products exactly (``quantized``): the same
bits on every CPU, the least exact. Elementwise work stays fp32, and results do not depend on batch
companions: bf16 matmuls run on fixed shapes where a probe finds oneDNN's kernels change with the row
count (``onednn``); int8 sums are exact. ``select`` says what runs on this machine. How close each
comes to fp32 is a row of docs/promises.md, held by tests/test_precision.py.

Copies derived from a weight (bfloat16, int8, oneDNN's reordered blocks, Triton's stacked weights) are
made once, under a lock, and kept beside it (``derived_copy``) until it is collected or changes in place.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, Hashable, Tuple

import torch
from torch import Tensor

PRECISIONS = ("fp32", "bf16", "int8")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision must be one of {PRECISIONS}, got {precision!r}: 'fp32' is exact; 'bf16' is "
            "faster on CPUs with AMX/AVX512_BF16 and on GPUs, and close to fp32; 'int8' (weights and "
            "activations quantized to int8) is faster on x86 CPUs with VNNI or AMX, a single sentence "
            "included, and is the least exact (how close each comes: the docs, The numbers we promise). "
            "`python -m spacy_elmo info --machine` says what each runs on this machine (the docs: Speed "
            "and precision per CPU)."
        )
    return precision


def operand(tensor: Tensor, precision: str = "fp32") -> Tensor:
    """``tensor`` as a matmul operand: fp32 as is, bf16 a copy (cached for parameters); int8: ``quantized.linear``."""
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


# id(base tensor) -> {(kind, view geometry, version): copy}
_COPIES: Dict[int, Dict[Tuple, Any]] = {}
_LOCK = threading.RLock()  # a copy's make may itself take a copy (a reordered block of a bf16 copy)


def derived_copy(tensor: Tensor, kind: Hashable, make: Callable[[Tensor], Any]) -> Any:
    """``make(tensor)``, cached per ``kind``, view (shape, strides, offset, device) and base version."""
    base = tensor._base if tensor._base is not None else tensor
    view = (tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), tensor.device)
    key = (kind, view, base._version)
    copy = _COPIES.get(id(base), {}).get(key)
    if copy is not None:
        return copy
    with _LOCK:
        copies = _COPIES.get(id(base))
        if copies is None:
            copies = _COPIES[id(base)] = {}
            weakref.finalize(base, _COPIES.pop, id(base), None)
        if key not in copies:
            for stale in [k for k in copies if k[-1] != base._version]:
                del copies[stale]  # the weight changed in place since
            copies[key] = make(tensor)
        return copies[key]
