"""What the machine is: its CPU in words (every speed figure names it), the CPU features kernels may
rest on, and what exactness probes (bits, never times) find its kernels compute.

``cpu_features`` (what ``select`` reads) leaves out what ``ONEDNN_MAX_CPU_ISA`` forbids, so a capped
run makes a lesser CPU's kernel choices (not its speed or rounding). ``remembered`` keys each probe's
answer by what it depends on, so a decision made from probes is the same on every load.
"""

from __future__ import annotations

import functools
import os
import platform
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Hashable, Optional, Sequence, Tuple, TypeVar

if TYPE_CHECKING:
    from torch import Tensor

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
# ONEDNN_MAX_CPU_ISA value -> the features it allows; an unsure cap gets the smaller set (errs to fallbacks).
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
    """Model, core count, kernel features and any cap, e.g. 'AMD EPYC (2 cores; avx2, fma; capped at AVX2)'."""
    features = [name for name in KERNEL_FEATURES if name in _cpu_flags()]
    cap = isa_cap()
    capped = f"; capped at {cap}" if cap else ""
    return f"{cpu_model()} ({os.cpu_count()} cores; {', '.join(features) or 'no AVX2'}{capped})"


def isa_cap() -> Optional[str]:
    """The oneDNN ISA cap of this process (``ONEDNN_MAX_CPU_ISA``), None when there is none."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return None if cap in ("", "ALL", "DEFAULT") else cap


def cpu_features() -> FrozenSet[str]:
    """The ``KERNEL_FEATURES`` this CPU has and the cap allows (an unknown cap: AVX2's at most)."""
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


T = TypeVar("T")

# What a private op of another torch may raise; a probe that meets one says no and the public path runs.
PROBE_ERRORS = (RuntimeError, AttributeError, TypeError, NotImplementedError)

_ANSWERS: Dict[Hashable, object] = {}
_LOCK = threading.RLock()  # a probe may ask another probe


def remembered(key: Hashable, probe: Callable[[], T]) -> T:
    """``probe()``, run once per ``key`` in this process; later calls return its answer."""
    if key in _ANSWERS:
        return _ANSWERS[key]  # type: ignore[return-value]
    with _LOCK:
        if key not in _ANSWERS:
            _ANSWERS[key] = probe()
        return _ANSWERS[key]  # type: ignore[return-value]


def probed_thread_counts() -> Tuple[int, ...]:
    """1, the powers of two up to the core count, the core count and the current thread count: the
    counts a process here runs with (each probed count costs the memory of its thread pool)."""
    import torch  # here, not above: the CPU's description is read without torch (bench/suite/report.py)

    cores = os.cpu_count() or 1
    powers = [2**power for power in range(cores.bit_length()) if 2**power <= cores]
    return tuple(sorted({*powers, cores, torch.get_num_threads()}))


def holds_at_thread_counts(check: Callable[[], bool], thread_counts: Sequence[int]) -> bool:
    """Whether ``check()`` holds at each of ``thread_counts`` torch threads; the thread count is restored."""
    import torch

    threads = torch.get_num_threads()
    try:
        for count in thread_counts:
            torch.set_num_threads(count)
            if not check():
                return False
    finally:
        torch.set_num_threads(threads)
    return True


def rows_agree(
    linear: Callable[[Tensor], Tensor],
    x: Tensor,
    rows: Sequence[int],
    thread_counts: Sequence[int] = (),
    reference: Optional[Callable[[Tensor], Tensor]] = None,
) -> bool:
    """Whether ``linear(x[:n])`` is bitwise ``reference(x)[:n]`` (default ``linear``, at the current thread
    count) for each n in ``rows`` at each of ``thread_counts`` (default: current); False if an op is missing."""
    import torch

    try:
        every_row = (reference or linear)(x)
        return holds_at_thread_counts(
            lambda: all(torch.equal(linear(x[:n]), every_row[:n]) for n in rows),
            thread_counts or (torch.get_num_threads(),),
        )
    except PROBE_ERRORS:  # an op this build of torch lacks
        return False


def smallest_agreeing(start: int, agrees: Callable[[int], bool], problem: str) -> int:
    """The smallest count of rows or lanes in ``start .. start + max(8, start // 4)`` that ``agrees``
    (``batch_invariant.clean_rows``, ``lstm_steps.fused_lanes``); else RuntimeError ``problem`` ({} = range)."""
    most = start + max(8, start // 4)
    for count in range(start, most + 1):
        if agrees(count):
            return count
    raise RuntimeError(problem.format(f"{start} to {most}"))
