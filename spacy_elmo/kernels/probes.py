"""Exactness probes: what a kernel's results are on this machine, found by running it on random
operands and comparing bits, never by timing it.

Every probe's answer is remembered here, in one table, under a key that names the probe and what it
depends on (shapes, layout, precision, thread counts): the same machine, torch and thread counts
always give the same answer, so a kernel decision made from probes is the same on every load.

``smallest_agreeing`` is the shared search "the smallest block of rows (or lanes) from ``start`` up
that a kernel computes alike at every thread count", used for fixed-shape matmuls
(``batch_invariant.clean_rows``) and torch's fused LSTM kernel (``network.fused_lstm``).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Dict, Hashable, Optional, Sequence, Tuple, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")

# What a private op of another torch may raise where a probe calls it: missing (AttributeError),
# another signature (TypeError), refused on this CPU or build (RuntimeError, NotImplementedError). A
# probe that meets one says no, and the public path runs: slower, never an error.
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
    cores = os.cpu_count() or 1
    powers = [2**power for power in range(cores.bit_length()) if 2**power <= cores]
    return tuple(sorted({*powers, cores, torch.get_num_threads()}))


def holds_at_thread_counts(check: Callable[[], bool], thread_counts: Sequence[int]) -> bool:
    """Whether ``check()`` holds with torch running on each of ``thread_counts`` threads (stops at
    the first that fails); the thread count is restored."""
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
    """Whether ``linear(x[:n])`` is bitwise the first n rows of ``reference(x)`` (default
    ``linear``, all of x at the current thread count) for each n in ``rows``, at each of
    ``thread_counts`` (none: the current one). False where an op is missing."""
    try:
        every_row = (reference or linear)(x)
        return holds_at_thread_counts(
            lambda: all(torch.equal(linear(x[:n]), every_row[:n]) for n in rows),
            thread_counts or (torch.get_num_threads(),),
        )
    except PROBE_ERRORS:  # an op this build of torch lacks
        return False


def smallest_agreeing(start: int, agrees: Callable[[int], bool], problem: str) -> int:
    """The smallest count from ``start`` to ``start + max(8, start // 4)`` for which ``agrees``
    holds (a block of rows or lanes that a kernel computes alike); else RuntimeError with
    ``problem``, whose ``{}`` names the range tried."""
    most = start + max(8, start // 4)
    for count in range(start, most + 1):
        if agrees(count):
            return count
    raise RuntimeError(problem.format(f"{start} to {most}"))
