"""The machine a figure was measured on, in words: every speed figure names its CPU."""

from __future__ import annotations

import os
import platform
from pathlib import Path

_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    for row in _cpuinfo().splitlines():
        if row.startswith("model name"):
            return row.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_description() -> str:
    """Model, core count and the vector features that decide which kernels run, e.g.
    'Intel(R) Xeon(R) Processor (2 cores; avx2, avx512f, amx_bf16)'."""
    flags = next((row for row in _cpuinfo().splitlines() if row.startswith("flags")), "") + " "
    features = [name for name in _FEATURES if f" {name} " in flags]
    return f"{cpu_model()} ({os.cpu_count()} cores; {', '.join(features) or 'no AVX2'})"


def _cpuinfo() -> str:
    path = Path("/proc/cpuinfo")
    return path.read_text() if path.exists() else ""
