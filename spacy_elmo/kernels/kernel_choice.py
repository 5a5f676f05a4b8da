"""What each precision runs on this machine: a fast kernel, exact fp32 in its place, or a refusal.

A precision other than fp32 exists to be faster. Where this CPU (or this torch) has no kernel
that makes it so, it runs exact fp32 instead and says so once, naming the missing CPU feature and
what to choose (``PrecisionFallback``): never a traceback from inside ``nlp.pipe``, never silently
slower. The decision reads the CPU's features as capped by ``ONEDNN_MAX_CPU_ISA``
(``machine.cpu_features``) and probes the kernels' results; it is made once per process and
device kind, when a pipeline is initialized or loaded (the component sets its biLM's precision
then), and is the same on every call after.

Measured (the module docstrings of ``quantized`` and ``onednn`` give the details; BENCHMARKS.md
the figures per CPU class):

- bf16 runs where oneDNN has bfloat16 dot products: ``avx512_bf16`` or ``amx_bf16``. Without
  them its bf16 matmuls convert in software: on AVX-512 without BF16, 3x slower than fp32 on 64
  rows; on AVX2, torch refuses them ("bf16 path needs the cpu support avx_ne_convert or
  avx512bw, avx512vl and avx512dq") and ATen's fallback is 4x slower than fp32.
- int8 runs where an exact integer kernel exists (``quantized.int8_kernel``): AMX, VNNI, or
  AVX2 with 7-bit weights; elsewhere it falls back.
- A model whose int8 sums could overflow int32 is refused when int8 is chosen for it.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Optional, Set, Tuple

import torch

from . import machine, onednn, quantized, triton_ops
from .precision import check_precision

BF16_FEATURES = ("amx_bf16", "avx512_bf16")


class PrecisionFallback(UserWarning):
    """A reduced precision runs as exact fp32 on this machine (see ``kernel_choice``)."""


@dataclass(frozen=True)
class KernelChoice:
    """requested: the precision asked for; runs: the one that runs ("fp32" where it fell back);
    kernel: what computes the matmuls; reason: why this kernel (or why not the requested one);
    features: the CPU features it rests on; measured: decided by timing (``kernels.plan``), not
    for a missing feature."""

    requested: str
    runs: str
    kernel: str
    reason: str
    features: Tuple[str, ...] = ()
    measured: bool = False

    @property
    def fell_back(self) -> bool:
        return self.runs != self.requested

    def warning(self) -> str:
        remedy = (
            "`python -m spacy_elmo info --machine` prints the timings"
            if self.measured
            else "or run on a CPU with the feature named"
        )
        return (
            f"precision {self.requested!r} runs as exact 'fp32' on this machine "
            f"({machine.cpu_description()}): {self.reason} Set precision = 'fp32' to say so "
            f"(and silence this); {remedy}."
        )


def decide(precision: str, device: torch.device) -> KernelChoice:
    """What ``precision`` runs on ``device``: decided once per process and device kind."""
    return _choose(check_precision(precision), device.type, machine.cpu_features() if device.type == "cpu" else None)


def choose(precision: str, device: torch.device) -> KernelChoice:
    """``decide``, warning once (``PrecisionFallback``) where it falls back to fp32."""
    choice = decide(precision, device)
    warn_once(choice, stacklevel=4)
    return choice


def warn_once(choice: KernelChoice, stacklevel: int = 3) -> None:
    """The ``PrecisionFallback`` warning of a choice that fell back, once per process."""
    if choice.fell_back and choice not in _WARNED:
        _WARNED.add(choice)
        warnings.warn(choice.warning(), PrecisionFallback, stacklevel=stacklevel)


_WARNED: Set[KernelChoice] = set()


def check_int8_fits(model: torch.nn.Module) -> None:
    """Refuse int8 for a model with a matmul summing more than ``quantized.MAX_K`` products: its
    int32 sums could overflow. Raises ValueError naming the weight and the alternative."""
    for name, weight in model.named_parameters():
        if weight.dim() >= 2:
            quantized.check_sum_length(weight[0].numel(), f"this model (its weight {name})")


@functools.lru_cache(maxsize=None)
def _choose(precision: str, device_type: str, features: Optional[frozenset]) -> KernelChoice:
    if precision == "fp32":
        return _fp32(device_type, features)
    if precision == "bf16":
        return _bf16(device_type, features)
    return _int8(device_type, features)


def _fp32(device_type: str, features: Optional[frozenset]) -> KernelChoice:
    if device_type == "cuda" and triton_ops.triton_available():
        return KernelChoice("fp32", "fp32", "Triton fp32 (IEEE, fixed tiles)", "exact; the default")
    if device_type != "cpu":
        return KernelChoice("fp32", "fp32", f"torch on {device_type} (fixed shapes)", "exact; the default")
    vector = tuple(name for name in ("avx512f", "avx2") if name in (features or ()))[:1]
    if onednn.available(torch.device("cpu")):
        return KernelChoice(
            "fp32",
            "fp32",
            "oneDNN fp32, any row count",
            "exact; oneDNN's rows were probed independent of the row count on this CPU",
            vector,
        )
    return KernelChoice(
        "fp32", "fp32", "MKL fp32 on fixed shapes", "exact; oneDNN's row-count probe failed here", vector
    )


def _bf16(device_type: str, features: Optional[frozenset]) -> KernelChoice:
    if device_type == "cuda":
        if torch.cuda.is_bf16_supported() and triton_ops.triton_available():
            return KernelChoice(
                "bf16", "bf16", "Triton bf16 (tensor cores, fp32 sums)", "this GPU computes in bfloat16"
            )
        if torch.cuda.is_bf16_supported():
            return KernelChoice("bf16", "bf16", "cuBLAS bf16 (tensor cores)", "this GPU computes in bfloat16")
        return _fallback("bf16", "this GPU has no bfloat16 arithmetic (compute capability 8.0 or later has).")
    present = tuple(name for name in BF16_FEATURES if name in (features or ()))
    if not present:
        return _fallback(
            "bf16",
            "it needs bfloat16 dot products (AVX512_BF16 or AMX, CPU features avx512_bf16 or amx_bf16), and this "
            "CPU has neither: its bf16 matmuls would convert in software, 3 to 4 times slower than fp32 "
            "(or be refused by torch on AVX2-only CPUs).",
        )
    if not onednn.bf16_runs():
        return _fallback("bf16", f"this torch's oneDNN bf16 linear did not run on this CPU ({', '.join(present)}).")
    if onednn.available(torch.device("cpu"), "bf16"):
        kernel = "oneDNN bf16, any row count"
        why = "rows probed independent of the row count on this CPU"
    else:
        kernel = "oneDNN bf16 on fixed shapes"
        why = (
            "its kernels change with the row count here (AMX tiles), so calls keep a fixed 32-row shape: faster "
            "on batches, slower than fp32 one sentence at a time (0.77x on a Xeon with AMX; int8 is not)"
        )
    return KernelChoice("bf16", "bf16", kernel, f"bfloat16 dot products, fp32 accumulation; {why}", present)


def _int8(device_type: str, features: Optional[frozenset]) -> KernelChoice:
    kernel = quantized.int8_kernel(torch.device(device_type), features)
    if kernel is None:
        return _fallback(
            "int8",
            "it needs exact int8 sums: VNNI (avx512_vnni or avx_vnni), AMX (amx_int8) or at least AVX2, "
            "and this CPU has none of them.",
        )
    return KernelChoice("int8", "int8", *INT8_KERNEL_TEXT[kernel.name], features=kernel.features)


# An int8 kernel's name (quantized.INT8_KERNELS) -> what it is, and why it is exact.
INT8_KERNEL_TEXT = {
    "onednn": ("oneDNN int8 linear (AMX tiles)", "int8 dot products summing in int32; exact integer sums"),
    "int_mm": ("torch._int_mm", "int8 dot products summing in int32 (VNNI, or cuBLASLt); exact integer sums"),
    "int_mm_7bit": (
        "torch._int_mm with 7-bit weights",
        "no VNNI: AVX2's int8 pairs saturate int16 unless weights are 7-bit; exact integer sums, "
        "results differ from VNNI CPUs'",
    ),
    "onednn_7bit": (
        "oneDNN int8 linear with 7-bit weights",
        "no VNNI: 7-bit weights keep AVX2's int8 pairs from saturating; exact integer sums, results differ from "
        "VNNI CPUs'",
    ),
}


def _fallback(requested: str, reason: str) -> KernelChoice:
    return KernelChoice(requested, "fp32", "exact fp32 in its place", reason)
