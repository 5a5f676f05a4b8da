"""What the CPU says it has, read from /proc/cpuinfo apart from the package's probes, so that a
probe that regresses fails a test instead of skipping it: a test of a precision may skip only where
the CPU (or the kernel cap the process runs under) lacks the instructions that precision needs."""

import os
from pathlib import Path
from typing import FrozenSet

import pytest

# The instructions on which each precision must run its own kernels (int8 runs on every CPU: where
# there is no VNNI or AMX its exact sums go through fp32 GEMMs, so it never falls back)
NEEDS = {"bf16": ("avx512_bf16", "amx_bf16"), "int8": ()}
# What a kernel cap (ONEDNN_MAX_CPU_ISA, tests/simulated_cpus.py) takes away, as oneDNN documents its ISAs
TAKEN_BY_CAP = {
    "AVX2": ("avx512_bf16", "amx_bf16", "avx512_vnni", "amx_int8", "avx512f"),
    "AVX512_CORE": ("avx512_bf16", "amx_bf16", "avx512_vnni", "amx_int8"),
    "AVX512_CORE_VNNI": ("avx512_bf16", "amx_bf16", "amx_int8"),
    "AVX512_CORE_BF16": ("amx_bf16", "amx_int8"),
}


def cpu_flags() -> FrozenSet[str]:
    """The flags of /proc/cpuinfo less what this process's kernel cap forbids (empty off Linux)."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.is_file() else ""
    lines = [line for line in text.splitlines() if line.startswith("flags")]
    flags = frozenset(lines[0].split(":", 1)[1].split() if lines else ())
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap and cap not in TAKEN_BY_CAP and not cap.startswith("AVX512_CORE_AMX"):
        return frozenset()  # a cap this table does not know: claim nothing
    return flags - frozenset(TAKEN_BY_CAP.get(cap, ()))


def cpu_has_instructions_for(precision: str) -> bool:
    needs = NEEDS[precision]
    return not needs or bool(cpu_flags() & frozenset(needs))


def why_it_may_skip(precision: str, fell_back: bool, reason: str):
    """None where a test of ``precision`` must run; else the reason to skip it. Fails at once where
    the package fell back on a CPU whose instructions say it should not (a probe regressed)."""
    if not fell_back:
        return None
    if cpu_has_instructions_for(precision):
        has = NEEDS[precision] or "every CPU's"
        pytest.fail(f"{precision} fell back to fp32 ({reason}) on a CPU with {has} instructions: a probe regressed")
    return f"{precision} falls back to fp32 here: {reason} (CPU flags agree: none of {NEEDS[precision]})"


def skip_where_it_falls_back(precision: str, fell_back: bool, reason: str) -> None:
    """In a test: skip where ``precision`` falls back and the CPU agrees it must; fail where it does not."""
    why = why_it_may_skip(precision, fell_back, reason)
    if why:
        pytest.skip(why)
