"""What a loaded model's matmuls run: decided once, when the model is loaded, by measuring here.

A precision other than fp32 exists to be faster, and only a measurement on the user's own CPU can
say whether it is: tables of CPU features cannot. On an AMD EPYC Zen 3 (AVX2 only) int8's exact
kernel, ``torch._int_mm``, ran a reference loop 30 to 150 times slower than fp32, where a Zen 5
capped at AVX2 had run the same code 1.3x faster (a cap chooses kernels, not a real core's speed).
So when a model is loaded in a precision (``plan_for``):

1. the candidates are the kernels whose results probes find exact here (``kernel_choice``,
   ``quantized.exact_int8_kernels``), and exact fp32, the reference;
2. each is timed at the model's own matmul shapes (``sites``): the LSTM's recurrent and projection
   matmuls as the step loop runs them for one sentence and for a batch of 32, its input
   projection, a highway, the token projection and the widest convolution as the char encoder
   runs them (random weights of those shapes). At each shape the candidates run in turn, round
   after round, and each keeps its fastest round: a machine busy with other work slows them all
   alike instead of whichever ran last (measured with a benchmark running beside it, a median of
   runs timed one candidate after the other put int8 at 0.02x fp32, in turn 3x). A candidate
   slower than ``SCREEN`` times fp32 at a small shape first is not timed further (an exact
   reference kernel can be a thousand times slower);
3. the times make two estimates of the time per token, one sentence at a time and a batch
   (``Estimates``); a candidate's speed is the lower of its two ratios to fp32. The fastest
   candidate runs, and a precision whose fastest is not faster than fp32 runs exact fp32, with one
   warning that gives the measured ratios.

On a CUDA GPU nothing is timed: fp32 and bf16 run the Triton kernels of ``triton_ops`` (one tile
configuration each), int8 ``torch._int_mm``. With ``SPACY_ELMO_KERNEL_PLAN=features`` nothing is
timed on a CPU either: each precision runs the first exact
kernel its CPU features suggest, as decided before plans measured (reproducible runs and tests
that must exercise a precision whatever its speed here; the tests set it).

A machine busy with other work cannot be measured fairly (threads of two processes on the same
cores slowed ``torch._int_mm`` a hundredfold, fp32 twofold): a plan measured while the load
average was above the core count, or while fp32's time at the small shape moved by more than half
between the start and the end of the measurement, holds for this process only and is measured
again at the next load.

The outcome, a ``KernelPlan``, is immutable and kept on the model; every call reads it
(``Blocking.precision`` and ``Blocking.int8_kernel``). A steady plan is cached in the user cache
(``CACHE/plans``), keyed by the CPU (model, features, cap), the GPU, torch's version, the thread
count, the precision and the shapes: a second load measures nothing, and an entry that is corrupt
or was written for another key is ignored and rewritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ..files import atomic_write_json, cache_dir
from . import kernel_choice, machine, quantized
from .batch_invariant import Blocking, linear_rows, step_matmul, step_rows
from .kernel_choice import KernelChoice

PLAN_FORMAT = 1
PLAN_ENVIRONMENT_VARIABLE = "SPACY_ELMO_KERNEL_PLAN"  # "measure" (the default) or "features"
SCREEN = 8.0  # a candidate this many times slower than fp32 at the small shape is not timed further
BATCH_LANES = 32  # the batch estimate: sentences side by side in the step loop
WINDOWS_PER_TOKEN = 16  # convolution windows a token of a typical block brings (its trimmed length)


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
    work; ``step``: through the step loop (else position-wise, ``linear_rows``)."""

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
class KernelPlan:
    """What a model runs for the precision asked: ``choice`` (what runs, through which kernel and
    why), the int8 kernel where int8 runs, the timings it was decided on (ms per site, per
    candidate label; fp32 under "fp32") and the speed of what runs against fp32 (one sentence,
    batch; 1.0 for fp32). ``cached``: read from the cache, not measured in this process;
    ``steady``: measured on a machine that was not busy (else not cached)."""

    device: str
    choice: KernelChoice
    int8_kernel: Optional[str] = None
    speedup: Tuple[float, float] = (1.0, 1.0)
    timings: Dict[str, Dict[str, float]] = field(default_factory=dict, compare=False)
    cached: bool = field(default=False, compare=False)
    steady: bool = field(default=True, compare=False)

    @property
    def runs(self) -> str:
        return self.choice.runs

    def blocking(self, base: Blocking) -> Blocking:
        """``base`` set to run this plan."""
        return dataclasses.replace(base, precision=self.runs, int8_kernel=self.int8_kernel)


@dataclass(frozen=True)
class Candidate:
    """A way to run a precision: its label in the timings, the blocking that runs it, and what it
    is (the choice a plan adopts when it wins)."""

    label: str
    blocking: Blocking
    choice: KernelChoice


# (site, {candidate label: the call to time}) -> {candidate label: milliseconds}.
Timer = Callable[[Site, Dict[str, Callable[[], object]]], Dict[str, float]]


def sites(shapes: ModelShapes) -> List[Site]:
    """The matmul shapes of a model that the plan times."""
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


def plan_for(shapes: ModelShapes, precision: str, device: torch.device) -> KernelPlan:
    """The plan for a model of ``shapes`` in ``precision`` on ``device``: from this process's
    memory, else the cache, else measured (and cached). Warns once where it falls back."""
    if _policy() == "features" or device.type == "cuda":  # a GPU's kernels follow from the precision
        chosen = _by_features(precision, device)
        kernel_choice.warn_once(chosen.choice, stacklevel=4)
        return chosen
    key = plan_key(shapes, precision, device)
    with _LOCK:
        plan = _PLANS.get(str(key["digest"]))
        if plan is None:
            plan = _read_cached(key)
            if plan is None:
                plan = _measure(shapes, precision, device, TIMER)
                if plan.steady:
                    _write_cached(key, plan)
            _PLANS[str(key["digest"])] = plan
    kernel_choice.warn_once(plan.choice, stacklevel=4)
    return plan


_LOCK = threading.Lock()
_PLANS: Dict[str, KernelPlan] = {}


def _policy() -> str:
    policy = os.environ.get(PLAN_ENVIRONMENT_VARIABLE, "measure").strip().lower() or "measure"
    if policy not in ("measure", "features"):
        raise ValueError(
            f"{PLAN_ENVIRONMENT_VARIABLE}={policy!r}: use 'measure' (time the kernels at load, the default) or "
            "'features' (run each precision's first exact kernel without timing it)."
        )
    return policy


def _by_features(precision: str, device: torch.device) -> KernelPlan:
    """The plan without timing: what features and probes allow (``kernel_choice.decide``)."""
    choice = kernel_choice.choose(precision, device)
    kernel = quantized.int8_kernel(device) if choice.runs == "int8" else None
    return KernelPlan(device.type, choice, kernel.name if kernel is not None else None)


def _measure(shapes: ModelShapes, precision: str, device: torch.device, timer: Timer) -> KernelPlan:
    reference, candidates = _candidates(precision, device)
    if precision == "fp32":
        return KernelPlan(device.type, reference.choice)
    if not candidates:
        return KernelPlan(device.type, kernel_choice.decide(precision, device))
    screened = _time_site([reference, *candidates], _SCREEN_SITE, device, timer)
    kept = [reference, *(c for c in candidates if screened[c.label] <= SCREEN * screened[reference.label])]
    timings: Dict[str, Dict[str, float]] = {c.label: {} for c in kept}
    for site in sites(shapes):
        for label, ms in _time_site(kept, site, device, timer).items():
            timings[label][site.name] = ms
    again = _time_site([reference], _SCREEN_SITE, device, timer)[reference.label]
    plan = _choose(shapes, precision, device, reference, candidates, timings)
    return dataclasses.replace(plan, steady=_steady(screened[reference.label], again))


def _steady(before: float, after: float) -> bool:
    """Whether the machine was quiet enough to trust the measurement for later loads: fp32's
    time at the small shape within 1.5x from start to end, and the load average under the cores."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return 1 / 1.5 <= after / max(before, 1e-9) <= 1.5 and load <= (os.cpu_count() or 1)


def _choose(
    shapes: ModelShapes,
    precision: str,
    device: torch.device,
    reference: Candidate,
    candidates: List[Candidate],
    timings: Dict[str, Dict[str, float]],
) -> KernelPlan:
    """The fastest timed candidate by its lower ratio to fp32, or fp32 where none is faster."""
    exact = estimates(shapes, timings[reference.label])
    speeds = {}
    for candidate in candidates:
        if candidate.label in timings:
            mine = estimates(shapes, timings[candidate.label])
            speeds[candidate.label] = (exact.one_sentence / mine.one_sentence, exact.batch / mine.batch)
    best = max(candidates, key=lambda c: min(speeds.get(c.label, (0.0, 0.0))))
    speed = speeds.get(best.label)
    if speed is not None and min(speed) > 1.0:
        int8 = best.blocking.int8_kernel if precision == "int8" else None
        return KernelPlan(device.type, best.choice, int8, speed, timings)
    return KernelPlan(device.type, _slower(precision, best, speed), None, (1.0, 1.0), timings)


def _slower(precision: str, best: Candidate, speed: Optional[Tuple[float, float]]) -> KernelChoice:
    if speed is None:
        measured = f"slower than {SCREEN:.0f}x fp32's time at a small shape"
    else:
        measured = f"at {speed[0]:.2f}x fp32's speed one sentence at a time and {speed[1]:.2f}x on a batch"
    reason = (
        f"measured here at this model's shapes, its fastest exact kernel ({best.choice.kernel}) ran {measured}: "
        "no faster than exact fp32."
    )
    return KernelChoice(precision, "fp32", "exact fp32 in its place", reason, best.choice.features, measured=True)


def _candidates(precision: str, device: torch.device) -> Tuple[Candidate, List[Candidate]]:
    """Exact fp32, and the exact ways to run ``precision`` here (none where features or probes rule
    it out: ``kernel_choice.decide`` says why)."""
    base = Blocking.for_device(device)
    fp32 = Candidate("fp32", base, kernel_choice.decide("fp32", device))
    choice = kernel_choice.decide(precision, device)
    if precision == "fp32" or choice.fell_back:
        return fp32, []
    if precision == "bf16":
        return fp32, [Candidate("bf16", dataclasses.replace(base, precision="bf16"), choice)]
    found = []
    for kernel in quantized.exact_int8_kernels(device):
        blocking = dataclasses.replace(base, precision="int8", int8_kernel=kernel.name)
        name, why = kernel_choice.INT8_KERNEL_TEXT[kernel.name]
        found.append(
            Candidate(f"int8 {kernel.name}", blocking, KernelChoice("int8", "int8", name, why, kernel.features))
        )
    return fp32, found


_SCREEN_SITE = Site("screen", 256, 256, 32, True)


def _time_site(candidates: List[Candidate], site: Site, device: torch.device, timer: Timer) -> Dict[str, float]:
    """Milliseconds of the site's matmul in each candidate's way, on random operands of its shape."""
    calls = {candidate.label: _call(candidate, site, device) for candidate in candidates}
    with torch.inference_mode():
        return timer(site, calls)


def _call(candidate: Candidate, site: Site, device: torch.device) -> Callable[[], object]:
    generator = torch.Generator().manual_seed(0)
    weight = (torch.randn(site.out_features, site.in_features, generator=generator) * 0.05).to(device)
    blocking = candidate.blocking
    if site.step:
        x = torch.randn(step_rows(site.lanes, device, blocking), site.in_features, generator=generator).to(device)
        return lambda: step_matmul(x, weight, blocking)
    x = torch.randn(site.lanes, site.in_features, generator=generator).to(device)
    return lambda: linear_rows(
        x, weight, None, blocking.gemm_rows, blocking.precision, int8_kernel=blocking.int8_kernel
    )


def wall_clock(site: Site, calls: Dict[str, Callable[[], object]]) -> Dict[str, float]:
    """Each call's fastest of several rounds, in ms, the calls taking turns in every round (at
    least 5 rounds, more up to 50 while a round takes under 10 ms in all). A call whose first,
    untimed run took over 0.2 s is far behind already: that first run is its time."""
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    def seconds(call: Callable[[], object]) -> float:
        started = time.perf_counter()
        call()
        synchronize()
        return time.perf_counter() - started

    first = {label: seconds(call) for label, call in calls.items()}
    best = {label: value for label, value in first.items() if value > 0.2}
    racing = {label: call for label, call in calls.items() if label not in best}
    rounds: Dict[str, List[float]] = {label: [] for label in racing}
    while racing and (len(rounds[next(iter(racing))]) < 5 or _round_time(rounds) < 0.01):
        for label, call in racing.items():
            rounds[label].append(seconds(call))
        if len(rounds[next(iter(racing))]) >= 50:
            break
    best.update({label: min(values) for label, values in rounds.items()})
    return {label: 1000 * value for label, value in best.items()}


def _round_time(rounds: Dict[str, List[float]]) -> float:
    """The mean time of a round so far."""
    count = len(next(iter(rounds.values())))
    return sum(sum(values) for values in rounds.values()) / max(count, 1)


# What times a candidate at a site (``wall_clock``); tests put in their own timings.
TIMER: Timer = wall_clock


def forget_plans() -> None:
    """Forget the plans made in this process (the cache on disk stays)."""
    with _LOCK:
        _PLANS.clear()


def plan_key(shapes: ModelShapes, precision: str, device: torch.device) -> Dict[str, object]:
    """What a plan depends on, and its digest (the cache file's name)."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    key: Dict[str, object] = {
        "format": PLAN_FORMAT,
        "cpu": machine.cpu_model(),
        "features": sorted(machine.cpu_features()),
        "cap": machine.isa_cap(),
        "gpu": gpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": device.type,
        "precision": precision,
        "shapes": dataclasses.asdict(shapes),
    }
    key["digest"] = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return key


def plans_dir() -> Path:
    return cache_dir() / "plans"


def _read_cached(key: Dict[str, object]) -> Optional[KernelPlan]:
    """The cached plan for ``key``; None where there is none, it is unreadable or it was written
    for another key (then it is measured and written again)."""
    path = plans_dir() / f"{key['digest']}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["key"] != key:
            return None
        plan = record["plan"]
        choice = KernelChoice(**{**plan["choice"], "features": tuple(plan["choice"]["features"])})
        return KernelPlan(
            plan["device"], choice, plan["int8_kernel"], tuple(plan["speedup"]), plan["timings"], cached=True
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached(key: Dict[str, object], plan: KernelPlan) -> None:
    record = {"key": key, "plan": {**dataclasses.asdict(plan), "cached": False}}
    try:
        atomic_write_json(plans_dir() / f"{key['digest']}.json", record)
    except OSError as err:  # a read-only home: the plan still holds for this process
        warnings.warn(f"The kernel plan could not be cached in {plans_dir()}: {err}", stacklevel=3)


def ratio_text(plan: KernelPlan) -> str:
    """The speed of what runs against fp32, for tables: '1.32x / 1.80x' (one sentence / batch)."""
    if plan.runs == "fp32":
        return "-"
    return f"{plan.speedup[0]:.2f}x / {plan.speedup[1]:.2f}x"
