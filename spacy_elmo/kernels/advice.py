"""How fast each precision is on this machine: advice, measured on request, never a switch.

``info --machine`` times ``select``'s kernels for each precision against fp32's at a model's matmul
shapes (``measure``) and keeps the result; a later load in a precision measured slower than fp32
warns once (``announce``) and still runs what was asked. A load times nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

import torch

from ..files import atomic_write_json, cache_dir
from ..warned import user_stacklevel
from . import machine
from .backends import Backend, KernelChoice
from .precision import PRECISIONS
from .select import PrecisionFallback, select

ADVICE_FORMAT = 1
BATCH_LANES = 32  # the batch estimate: sentences side by side in the step loop
WINDOWS_PER_TOKEN = 16  # convolution windows a token of a typical block brings (its trimmed length)


class SlowerPrecision(UserWarning):
    """A reduced precision runs as asked but is no faster than fp32 on this machine."""


@dataclass(frozen=True)
class ModelShapes:
    """The sizes of a biLM that set its matmuls' shapes."""

    projection_dim: int
    lstm_dim: int
    n_layers: int
    highway_dim: int
    n_highway: int
    token_inputs: int  # the token projection's input: the filters (and a word embedding)
    widest_filters: int  # the widest convolution's filters and its input (char dim x width)
    widest_inputs: int
    conv_share: float  # all convolutions' work over the widest one's

    @property
    def lstm_runs(self) -> int:
        return 2 * self.n_layers  # two directions


@dataclass(frozen=True)
class Site:
    """One matmul shape a model runs: weight (out_features, in_features) on ``lanes`` rows of
    work; ``step``: through the step loop (else position-wise)."""

    name: str
    out_features: int
    in_features: int
    lanes: int
    step: bool


@dataclass(frozen=True)
class Estimates:
    """Milliseconds per token, one sentence at a time and in a batch."""

    one_sentence: float
    batch: float


@dataclass(frozen=True)
class Advice:
    """A precision's measured speed against fp32 here: (one sentence, batch), and the timings it
    comes from (ms per site, under "fp32" and the precision's name)."""

    precision: str
    speedup: Tuple[float, float]
    timings: Dict[str, Dict[str, float]] = field(default_factory=dict)

    @property
    def slower(self) -> bool:
        return min(self.speedup) < 1.0

    def ratio_text(self) -> str:
        return f"{self.speedup[0]:.2f}x / {self.speedup[1]:.2f}x"


# (site, {label: the call to time}) -> {label: milliseconds}.
Timer = Callable[[Site, Dict[str, Callable[[], object]]], Dict[str, float]]


def sites(shapes: ModelShapes) -> List[Site]:
    """The matmul shapes of a model that are timed."""
    p, h = shapes.projection_dim, shapes.lstm_dim
    return [
        Site("lstm recurrent, 1 sentence", 4 * h, p, 1, True),
        Site("lstm projection, 1 sentence", p, h, 1, True),
        Site(f"lstm recurrent, {BATCH_LANES} sentences", 4 * h, p, BATCH_LANES, True),
        Site(f"lstm projection, {BATCH_LANES} sentences", p, h, BATCH_LANES, True),
        Site("lstm input projection", 4 * h, p, 256, False),
        Site("highway", shapes.highway_dim, shapes.highway_dim, 256, False),
        Site("token projection", p, shapes.token_inputs, 256, False),
        Site("widest convolution", shapes.widest_filters, shapes.widest_inputs, 1024, False),
    ]


def estimates(shapes: ModelShapes, ms: Dict[str, float]) -> Estimates:
    """Milliseconds per token from the sites' times: every LSTM run's step matmuls (at one lane, or
    shared by ``BATCH_LANES``) and input projection, the highways (gate and transform), the token
    projection and the convolutions (``WINDOWS_PER_TOKEN`` windows of every filter width)."""
    names = [site.name for site in sites(shapes)]
    single, batch = ms[names[0]] + ms[names[1]], (ms[names[2]] + ms[names[3]]) / BATCH_LANES
    shared = shapes.lstm_runs * ms[names[4]] / 256
    shared += 2 * shapes.n_highway * ms[names[5]] / 256 + ms[names[6]] / 256
    shared += ms[names[7]] / 1024 * WINDOWS_PER_TOKEN * shapes.conv_share
    return Estimates(shapes.lstm_runs * single + shared, shapes.lstm_runs * batch + shared)


def measure(shapes: ModelShapes, precision: str, device: torch.device, timer: Optional[Timer] = None) -> Advice:
    """Time ``precision``'s kernels (``select``) against fp32's at the model's shapes."""
    exact, reduced = select(device, "fp32"), select(device, precision)
    if reduced.runs == "fp32":
        return Advice(precision, (1.0, 1.0))
    labels = {"fp32": exact, precision: reduced}
    timings: Dict[str, Dict[str, float]] = {label: {} for label in labels}
    for site in sites(shapes):
        calls = {label: _call(kernels, site) for label, kernels in labels.items()}
        with torch.inference_mode():
            for label, ms in (timer or wall_clock)(site, calls).items():
                timings[label][site.name] = ms
    before, after = estimates(shapes, timings["fp32"]), estimates(shapes, timings[precision])
    speedup = (before.one_sentence / after.one_sentence, before.batch / after.batch)
    return Advice(precision, speedup, timings)


def machine_report(shapes: ModelShapes) -> Tuple[List[Tuple[str, ...]], List[Tuple[str, Advice]]]:
    """What ``info --machine`` prints: (device, precision, what runs, kernel, speed against fp32, CPU
    features, why) per precision on the CPU and any CUDA GPU; and each (device, advice) measured now, then kept."""
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    rows: List[Tuple[str, ...]] = []
    measured: List[Tuple[str, Advice]] = []
    for device in devices:
        for precision in PRECISIONS:
            choice = select(device, precision).choice
            speed = measure(shapes, precision, device) if choice.runs != "fp32" else None
            if speed is not None:
                remember(speed, shapes, device)
                measured.append((device.type, speed))
            runs = choice.runs if not choice.fell_back else "fp32 (fallback)"
            ratio = speed.ratio_text() if speed is not None else "-"
            why = choice.reason if choice.slower is None else f"{choice.reason}; {choice.slower}"
            rows.append((device.type, precision, runs, choice.kernel, ratio, ", ".join(choice.features) or "-", why))
    return rows, measured


def _call(kernels: Backend, site: Site) -> Callable[[], object]:
    generator = torch.Generator().manual_seed(0)
    weight = (torch.randn(site.out_features, site.in_features, generator=generator) * 0.05).to(kernels.device)
    if site.step:
        x = torch.randn(kernels.step_rows(site.lanes), site.in_features, generator=generator).to(kernels.device)
        return lambda: kernels.step_matmul(x, weight)
    x = torch.randn(site.lanes, site.in_features, generator=generator).to(kernels.device)
    return lambda: kernels.linear(x, weight)


def wall_clock(site: Site, calls: Dict[str, Callable[[], object]]) -> Dict[str, float]:
    """Each call's fastest of several rounds, in ms, the calls taking turns in every round, so other
    work slows all alike (at least 5 rounds, more up to 50 while a round takes under 10 ms in all)."""
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    def seconds(call: Callable[[], object]) -> float:
        started = time.perf_counter()
        call()
        synchronize()
        return time.perf_counter() - started

    for call in calls.values():
        call()  # a warm-up: weight copies and compiled kernels are made here
    rounds: Dict[str, List[float]] = {label: [] for label in calls}
    while len(rounds[next(iter(calls))]) < 5 or (_round_time(rounds) < 0.01 and len(rounds[next(iter(calls))]) < 50):
        for label, call in calls.items():
            rounds[label].append(seconds(call))
    return {label: 1000 * min(values) for label, values in rounds.items()}


def _round_time(rounds: Dict[str, List[float]]) -> float:
    count = len(next(iter(rounds.values())))
    return sum(sum(values) for values in rounds.values()) / max(count, 1)


def remember(advice: Advice, shapes: ModelShapes, device: torch.device) -> None:
    """Keep ``advice`` in the user cache, for the loads that follow (a read-only home: not kept)."""
    key = advice_key(shapes, advice.precision, device)
    try:
        atomic_write_json(advice_dir() / f"{key['digest']}.json", {"key": key, "advice": dataclasses.asdict(advice)})
    except OSError as err:
        warnings.warn(f"The speed measurement could not be kept in {advice_dir()}: {err}", stacklevel=2)


def recalled(shapes: ModelShapes, precision: str, device: torch.device) -> Optional[Advice]:
    """The advice kept for this machine, model and precision; None if none, unreadable or another key's."""
    key = advice_key(shapes, precision, device)
    try:
        record = json.loads((advice_dir() / f"{key['digest']}.json").read_text(encoding="utf-8"))
        if record["key"] != key:
            return None
        kept = record["advice"]
        one_sentence, batch = kept["speedup"]
        return Advice(kept["precision"], (float(one_sentence), float(batch)), kept["timings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def advice_key(shapes: ModelShapes, precision: str, device: torch.device) -> Dict[str, object]:
    """What a measurement depends on, and its digest (the cache file's name)."""
    key: Dict[str, object] = {
        "format": ADVICE_FORMAT,
        "cpu": machine.cpu_model(),
        "features": sorted(machine.cpu_features()),
        "cap": machine.isa_cap(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": device.type,
        "precision": precision,
        "shapes": dataclasses.asdict(shapes),
    }
    key["digest"] = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return key


def advice_dir() -> Path:
    return cache_dir() / "advice"


def announce(kernels: Backend, shapes: ModelShapes) -> None:
    """Warn once per process where what runs is not what was asked (``PrecisionFallback``) or is, by
    the rule or ``info --machine``'s measure, no faster than fp32 here (``SlowerPrecision``)."""
    choice = kernels.choice
    if choice.fell_back:
        _warn_once(choice, _fallback_text(choice), PrecisionFallback)
        return
    reasons = [choice.slower] if choice.slower is not None else []
    kept = recalled(shapes, choice.requested, kernels.device) if choice.runs != "fp32" else None
    if kept is not None and kept.slower:
        reasons.append(
            f"`info --machine` measured it at {kept.speedup[0]:.2f}x fp32's speed one sentence at a time and "
            f"{kept.speedup[1]:.2f}x on a batch, at this model's shapes."
        )
    if reasons:
        _warn_once(choice, _slower_text(choice, " ".join(reasons)), SlowerPrecision)


def _fallback_text(choice: KernelChoice) -> str:
    return (
        f"precision {choice.requested!r} runs as exact 'fp32' on this machine ({machine.cpu_description()}): "
        f"{choice.reason} Set precision = 'fp32' to say so (and silence this), or run on a CPU with the feature "
        "named."
    )


def _slower_text(choice: KernelChoice, why: str) -> str:
    return (
        f"precision {choice.requested!r} runs {choice.kernel} as asked, and is no faster than fp32 on this machine "
        f"({machine.cpu_description()}): {why} Its numbers are {choice.requested}'s on every load; set "
        "precision = 'fp32' for exact vectors at the same speed."
    )


def _warn_once(choice: KernelChoice, text: str, category: type) -> None:
    key = (choice, text)
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(text, category, stacklevel=user_stacklevel())


_WARNED: Set[Tuple[KernelChoice, str]] = set()
