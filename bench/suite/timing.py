"""How the benchmarks time a call: untimed warm-up runs, then timed repeats, each run's seconds
kept, so that a figure comes with its spread.

    timing = timed(lambda docs: list(nlp.pipe(docs)), repeats=5, prepare=fresh_docs)
    timing.rate(words)      # words/s at the median run
    timing.summary(words)   # the same, with the runs and their spread, for a result file
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence


@dataclass(frozen=True)
class Timing:
    """The seconds of each timed run (warm-up runs not included)."""

    runs_s: Sequence[float]

    def __post_init__(self) -> None:
        if not self.runs_s:
            raise ValueError("a Timing needs at least one timed run")

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)

    @property
    def best_s(self) -> float:
        return min(self.runs_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.runs_s)

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median: 0.1 means the runs lay within 10% of the median's time."""
        return (max(self.runs_s) - min(self.runs_s)) / self.median_s

    def rate(self, amount: float) -> float:
        """``amount`` (words, tokens, requests) per second at the median run."""
        return amount / self.median_s

    def summary(self, amount: Optional[float] = None, unit: str = "words") -> Dict[str, Any]:
        """The figures a result file keeps: median, fastest, spread, every run; with ``amount``,
        the rate at the median (``{unit}_per_s``) and the amount itself."""
        figures: Dict[str, Any] = {
            "median_s": self.median_s,
            "best_s": self.best_s,
            "spread": self.spread,
            "runs_s": list(self.runs_s),
        }
        if amount is not None:
            figures.update({unit: amount, f"{unit}_per_s": self.rate(amount)})
        return figures


def _no_sync() -> None:
    return None


def timed(
    call: Callable[..., object],
    repeats: int,
    warmup: int = 1,
    prepare: Optional[Callable[[], object]] = None,
    sync: Optional[Callable[[], None]] = None,
) -> Timing:
    """Run ``call`` ``warmup`` times untimed, then ``repeats`` times timed. ``prepare()`` makes each
    run's argument outside the clock (fresh docs, say); ``sync()`` runs before the clock starts and
    before it stops (``torch.cuda.synchronize`` on a GPU, whose calls return before they finish)."""
    return timed_in_turn({"call": call}, repeats, warmup, prepare, sync)["call"]


def timed_in_turn(
    calls: Dict[str, Callable[..., object]],
    repeats: int,
    warmup: int = 1,
    prepare: Optional[Callable[[], object]] = None,
    sync: Optional[Callable[[], None]] = None,
) -> Dict[str, Timing]:
    """Like ``timed`` for several calls that are compared: each round runs every call once, in
    turn, so that a machine that speeds up or slows down during the run weighs on all of them
    alike (and each sees the heap as the others leave it)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    runs: Dict[str, list] = {name: [] for name in calls}
    sync = sync or _no_sync
    for round_ in range(warmup + repeats):
        for name, call in calls.items():
            argument = prepare() if prepare is not None else None
            sync()
            started = time.perf_counter()
            call(argument) if prepare is not None else call()
            sync()
            if round_ >= warmup:
                runs[name].append(time.perf_counter() - started)
    return {name: Timing(tuple(seconds)) for name, seconds in runs.items()}


def timed_for(call: Callable[[], object], seconds: float) -> Timing:
    """Run ``call`` again and again for ``seconds`` (at least once): one timing per call, for a
    figure over a fixed span of time (a latency's percentiles, calls per second)."""
    runs, started = [], time.perf_counter()
    while not runs or time.perf_counter() - started < seconds:
        begun = time.perf_counter()
        call()
        runs.append(time.perf_counter() - begun)
    return Timing(tuple(runs))
