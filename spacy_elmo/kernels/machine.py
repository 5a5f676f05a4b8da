"""The machine in words, and the CPU features kernels may rest on.

Every speed figure names its CPU (``cpu_description``). ``cpu_features`` is what the kernel
choices read (``select``): the CPU's own features, less those that oneDNN's
``ONEDNN_MAX_CPU_ISA`` cap forbids, so that a capped run makes the decisions a lesser CPU would
make (a cap chooses which kernels may run; it gives neither a lesser CPU's speed nor its rounding).
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Dict, FrozenSet, Optional

# The features the kernel choices read, as /proc/cpuinfo names them.
KERNEL_FEATURES = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "avx_ne_convert",
    "amx_bf16",
    "amx_int8",
)
_AVX2 = frozenset({"avx2", "fma"})
_AVX2_VNNI = _AVX2 | {"avx_vnni"}
_AVX512_CORE = _AVX2 | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}
_AVX512_VNNI = _AVX512_CORE | {"avx512_vnni"}
_AVX512_BF16 = _AVX512_VNNI | {"avx512_bf16"}
_AMX = _AVX512_BF16 | {"amx_bf16", "amx_int8"}
# ONEDNN_MAX_CPU_ISA value -> the features it lets kernels use (oneDNN's ISA names; a cap whose
# exact set we are unsure of is given the smaller set: a capped run then errs towards fallbacks).
ISA_CAPS: Dict[str, FrozenSet[str]] = {
    "SSE41": frozenset(),
    "AVX": frozenset(),
    "AVX2": _AVX2,
    "AVX2_VNNI": _AVX2_VNNI,
    "AVX2_VNNI_2": _AVX2_VNNI | {"avx_ne_convert"},
    "AVX512_CORE": _AVX512_CORE,
    "AVX512_CORE_VNNI": _AVX512_VNNI,
    "AVX512_CORE_BF16": _AVX512_BF16,
    "AVX512_CORE_FP16": _AVX512_BF16,
    "AVX10_1_512": _AVX512_BF16,
    "AVX512_CORE_AMX": _AMX,
    "AVX10_1_512_AMX": _AMX,
    "AVX512_CORE_AMX_FP16": _AMX,
    "AVX10_1_512_AMX_FP16": _AMX,
}


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers where /proc/cpuinfo gives them (a
    virtual machine may name only the vendor's line: "AMD EPYC, family 26 model 2" is a Zen 5)."""
    fields: Dict[str, str] = {}
    for row in _cpuinfo().splitlines():
        key, _, value = row.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if fields.get("cpu family") and fields.get("model"):
        name += f", family {fields['cpu family']} model {fields['model']}"
    return name


def cpu_description() -> str:
    """Model, core count, the vector features that decide which kernels run and the cap if one
    is set, e.g. 'AMD EPYC (2 cores; avx2, fma, avx512f, avx512_vnni; capped at AVX2)'."""
    features = [name for name in KERNEL_FEATURES if name in _cpu_flags()]
    cap = isa_cap()
    capped = f"; capped at {cap}" if cap else ""
    return f"{cpu_model()} ({os.cpu_count()} cores; {', '.join(features) or 'no AVX2'}{capped})"


def isa_cap() -> Optional[str]:
    """The oneDNN ISA cap of this process (``ONEDNN_MAX_CPU_ISA``), None when there is none."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return None if cap in ("", "ALL", "DEFAULT") else cap


def cpu_features() -> FrozenSet[str]:
    """The kernel features (``KERNEL_FEATURES``) this CPU has and the cap allows (an unknown
    cap allows nothing beyond AVX2's)."""
    features = frozenset(name for name in KERNEL_FEATURES if name in _cpu_flags())
    cap = isa_cap()
    return features if cap is None else features & ISA_CAPS.get(cap, _AVX2)


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> FrozenSet[str]:
    row = next((row for row in _cpuinfo().splitlines() if row.startswith("flags")), "")
    return frozenset(row.split(":", 1)[-1].split())


def _cpuinfo() -> str:
    path = Path("/proc/cpuinfo")
    return path.read_text() if path.exists() else ""
