"""``select``: what a model's matmuls run, decided once when a precision is set.

What runs is a pure function of the machine (CPU features as ``ONEDNN_MAX_CPU_ISA`` caps them,
kernel exactness probes, the CUDA device, torch's version, the thread count) and the precision.
Nothing is timed, so a busy machine loads the same kernels and gives the same vectors as a quiet
one; speed is ``advice``, never a switch. Each rule's reason is in its ``KernelChoice``, which
``info --machine`` prints. A precision with no kernel here runs exact fp32 (``PrecisionFallback``).
"""

from __future__ import annotations

from typing import Optional, Tuple, Type

import torch

from . import machine, onednn, quantized, triton_ops
from .backends import (
    Backend,
    CudaFixedShapes,
    FixedShapes,
    Int8Sums,
    KernelChoice,
    OneDnnAnyRows,
    OneDnnFixedRows,
    TritonBackend,
)
from .batch_invariant import Blocking
from .precision import check_precision

BF16_FEATURES = ("amx_bf16", "avx512_bf16")


class PrecisionFallback(UserWarning):
    """A reduced precision runs as exact fp32 on this machine: it has no kernel for it."""


def select(device: torch.device, precision: str, blocking: Optional[Blocking] = None) -> Backend:
    """The backend that runs ``precision`` on ``device`` (the same for the same machine, torch,
    thread count and settings), on ``blocking``'s fixed sizes (default: the device's)."""
    check_precision(precision)
    if device.type == "cuda":
        choice, kind, int8 = _on_cuda(precision)
    else:
        choice, kind, int8 = _on_cpu(precision, machine.cpu_features())
    gpu = triton_ops.for_device(device, choice.runs) if kind is TritonBackend else None
    return kind(device, choice, blocking or Blocking.for_device(device), int8, gpu)


# what runs, in words; the class of backend that runs it; its int8 kernel, for int8
Decision = Tuple[KernelChoice, Type[Backend], Optional[quantized.Int8Kernel]]


def _on_cpu(precision: str, features: frozenset) -> Decision:
    if precision == "bf16":
        return _bf16_on_cpu(features)
    if precision == "int8":
        return _int8_on_cpu(features)
    return _fp32_on_cpu(features)


def _fp32_on_cpu(features: frozenset, requested: str = "fp32", why_not: Optional[str] = None) -> Decision:
    vector = tuple(name for name in ("avx512f", "avx2") if name in features)[:1]
    kind: Type[Backend]
    if onednn.available(torch.device("cpu")):
        kernel, kind = "oneDNN fp32, any row count", OneDnnAnyRows
        reason = "exact; oneDNN's rows were probed independent of the row count on this CPU"
    else:
        kernel, kind = "MKL fp32 on fixed shapes", FixedShapes
        reason = "exact; oneDNN's row-count probe failed here"
    if why_not is not None:
        kernel, reason, vector = "exact fp32 in its place", why_not, ()
    return KernelChoice(requested, "fp32", kernel, reason, vector), kind, None


def _bf16_on_cpu(features: frozenset) -> Decision:
    present = tuple(name for name in BF16_FEATURES if name in features)
    if not present:
        return _fp32_on_cpu(
            features,
            "bf16",
            "it needs bfloat16 dot products (AVX512_BF16 or AMX, CPU features avx512_bf16 or amx_bf16), and this "
            "CPU has neither: its bf16 matmuls would convert in software, 3 to 4 times slower than fp32 "
            "(or be refused by torch on AVX2-only CPUs).",
        )
    if not onednn.bf16_runs():
        why = f"this torch's oneDNN bf16 linear did not run on this CPU ({', '.join(present)})."
        return _fp32_on_cpu(features, "bf16", why)
    kind: Type[Backend]
    if onednn.available(torch.device("cpu"), "bf16"):
        kernel, kind = "oneDNN bf16, any row count", OneDnnAnyRows
        why = "rows probed independent of the row count on this CPU"
    else:
        kernel = "oneDNN bf16 on fixed shapes"
        kind = OneDnnFixedRows if onednn.available(torch.device("cpu")) else FixedShapes
        why = "its kernels change with the row count here (AMX tiles), so calls keep a fixed 32-row shape"
    reason = f"bfloat16 dot products, fp32 accumulation; {why}"
    return KernelChoice("bf16", "bf16", kernel, reason, present), kind, None


def _int8_on_cpu(features: frozenset) -> Decision:
    kernels = quantized.exact_int8_kernels(torch.device("cpu"), features)
    if not kernels:
        return _fp32_on_cpu(features, "int8", "no int8 kernel summed exactly in this torch's probes.")
    kernel = kernels[0]
    present = tuple(name for name in kernel.needs if name in features)
    slower = None
    if not kernel.needs:
        slower = (
            "this CPU has no int8 dot products that sum in int32 (VNNI: avx512_vnni or avx_vnni; AMX: amx_int8), "
            "so int8's exact sums run through fp32 GEMMs: int8's numbers, no faster than fp32."
        )
    reason = "exact integer sums: the same bits as every other int8 kernel"
    return KernelChoice("int8", "int8", kernel.title, reason, present, slower), Int8Sums, kernel


def _on_cuda(precision: str) -> Decision:
    if precision == "int8":
        int_mm = quantized.INT8_KERNELS["int_mm"]
        return KernelChoice("int8", "int8", "torch._int_mm (cuBLASLt)", "exact integer sums"), Int8Sums, int_mm
    triton = triton_ops.triton_available()
    kind = TritonBackend if triton else CudaFixedShapes
    if precision == "bf16":
        if not torch.cuda.is_bf16_supported():
            why = "this GPU has no bfloat16 arithmetic (compute capability 8.0 or later has)."
            return _fp32_on_cuda(triton, "bf16", why)
        name = "Triton bf16 (tensor cores, fp32 sums)" if triton else "cuBLAS bf16 (tensor cores)"
        return KernelChoice("bf16", "bf16", name, "this GPU computes in bfloat16"), kind, None
    return _fp32_on_cuda(triton)


def _fp32_on_cuda(triton: bool, requested: str = "fp32", why_not: Optional[str] = None) -> Decision:
    kind = TritonBackend if triton else CudaFixedShapes
    kernel = "Triton fp32 (IEEE, fixed tiles)" if triton else "torch on cuda (fixed shapes)"
    if why_not is not None:
        return KernelChoice(requested, "fp32", "exact fp32 in its place", why_not), kind, None
    return KernelChoice("fp32", "fp32", kernel, "exact; the default"), kind, None
