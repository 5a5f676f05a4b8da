"""What the CPU says it has, read from /proc/cpuinfo apart from the package's probes, so that a
probe that regresses fails a test instead of skipping it: a test of a precision may skip only where
the CPU (or the kernel cap the process runs under) lacks the instructions that precision needs."""

import os
from pathlib import Path
from typing import FrozenSet, Tuple

import pytest

# The instructions on which each precision must run its own kernels (int8 runs on every CPU: where
# there is no VNNI or AMX its exact sums go through fp32 GEMMs, so it never falls back)
NEEDS = {"bf16": ("avx512_bf16", "amx_bf16"), "int8": ()}
# The instructions the precisions' kernels need, and which of them a kernel cap (ONEDNN_MAX_CPU_ISA,
# tests/simulated_cpus.py) still lets kernels use, as oneDNN documents its ISAs; a cap not listed
# here leaves none of them (claim nothing)
SPECIAL = frozenset({"avx_vnni", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"})
KEPT_BY_CAP = {
    "AVX2": frozenset(),
    "AVX2_VNNI": frozenset({"avx_vnni"}),
    "AVX512_CORE": frozenset(),
    "AVX512_CORE_VNNI": frozenset({"avx512_vnni"}),
    "AVX512_CORE_BF16": frozenset({"avx512_vnni", "avx512_bf16"}),
    "AVX512_CORE_AMX": frozenset({"avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"}),
}


def cpu_flags() -> FrozenSet[str]:
    """The flags of /proc/cpuinfo less what this process's kernel cap forbids (empty off Linux)."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.is_file() else ""
    lines = [line for line in text.splitlines() if line.startswith("flags")]
    flags = frozenset(lines[0].split(":", 1)[1].split() if lines else ())
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return flags - (SPECIAL - KEPT_BY_CAP.get(cap, frozenset())) if cap else flags


def cpu_has_instructions_for(precision: str) -> bool:
    needs = NEEDS[precision]
    return not needs or bool(cpu_flags() & frozenset(needs))


def skip_where_it_falls_back(precision: str, fell_back: bool, reason: str) -> None:
    """In a test: skip where ``precision`` falls back and the CPU agrees it must; fail where the CPU
    has its instructions (a probe regressed)."""
    if not fell_back:
        return
    if cpu_has_instructions_for(precision):
        has = NEEDS[precision] or "every CPU's"
        pytest.fail(f"{precision} fell back to fp32 ({reason}) on a CPU with {has} instructions: a probe regressed")
    pytest.skip(f"{precision} falls back to fp32 here: {reason} (CPU flags agree: none of {NEEDS[precision]})")


# The torch releases from which oneDNN's fp32 rows were found independent of the row count, and int8's
# kernels exact, on every CPU measured (docs/compatibility.md: torch 2.5 to 2.9 fail oneDNN's probe)
ONEDNN_ROWS_HOLD_FROM = (2, 13)


def int8_kernel_should_be_exact(needs: Tuple[str, ...]) -> bool:
    """Whether an int8 kernel that needs any of ``needs`` (CPU features) should sum exactly here: on
    every CPU measured with torch >= 2.13 each kernel whose instructions the CPU has did (AMX tiles
    on Xeons, VNNI through torch._int_mm on Zen 4 and Zen 5); one that needs nothing always does."""
    return not needs or (_torch_release() >= ONEDNN_ROWS_HOLD_FROM and bool(cpu_flags() & frozenset(needs)))


def _torch_release() -> Tuple[int, ...]:
    import torch

    return tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def onednn_rows_should_hold() -> bool:
    """Whether this machine's CPU and torch are of the kind where oneDNN's row-count probe held."""
    import torch

    return torch.backends.mkldnn.is_available() and _torch_release() >= ONEDNN_ROWS_HOLD_FROM and "avx2" in cpu_flags()


def skip_where_onednn_rows_vary(holds: bool) -> None:
    """In a test of oneDNN's any-row-count path: skip where the probe (``holds``) says its rows vary
    and this torch or CPU agrees they may; fail where they should not (a probe regressed)."""
    if holds:
        return
    if onednn_rows_should_hold():
        pytest.fail("oneDNN's row-count probe failed on a CPU with AVX2 and torch >= 2.13, where it held before")
    pytest.skip("oneDNN's row-count invariance does not hold on this machine (an older torch, or no AVX2)")
