"""bench/ is a suite: at most eight scripts, each smoke-run by a test of its own, over one timing
helper; every section of BENCHMARKS.md is one a script writes from a results file that exists."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# by its file: bench/ on sys.path would put its scripts' names (kernels, memory, ...) among modules
_spec = importlib.util.spec_from_file_location("bench_timing", ROOT / "bench" / "suite" / "timing.py")
timing_module = sys.modules["bench_timing"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing_module)
Timing, timed, timed_in_turn = timing_module.Timing, timing_module.timed, timing_module.timed_in_turn

SCRIPTS = sorted(path.stem for path in (ROOT / "bench").glob("*.py"))


def test_bench_has_at_most_eight_scripts_and_each_has_its_smoke_test():
    assert 0 < len(SCRIPTS) <= 8, SCRIPTS
    missing = [name for name in SCRIPTS if not (ROOT / "tests" / f"test_bench_{name}.py").is_file()]
    assert missing == []


def test_every_section_of_benchmarks_is_a_scripts_rendering_of_an_existing_results_file():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    keys = re.findall(r"<!-- ([\w-]+):([\w.-]+) start -->", text)
    assert keys, "BENCHMARKS.md has no sections written by the suite"
    for script, name in keys:
        assert script in SCRIPTS, f"section {script}:{name}: no bench/{script}.py writes it"
        assert (ROOT / "bench" / "results" / f"{name}.json").is_file(), f"section {script}:{name}: no results file"
        assert f"<!-- {script}:{name} end -->" in text


def test_a_timing_keeps_each_run_and_gives_median_best_and_spread():
    timing = Timing((0.2, 0.1, 0.4))
    assert (timing.median_s, timing.best_s) == (0.2, 0.1)
    assert timing.spread == pytest.approx((0.4 - 0.1) / 0.2)
    assert timing.rate(10) == pytest.approx(50.0)
    summary = timing.summary(10)
    assert summary["words_per_s"] == pytest.approx(50.0) and summary["runs_s"] == [0.2, 0.1, 0.4]
    with pytest.raises(ValueError):
        Timing(())


def test_timed_runs_the_warm_up_untimed_and_prepares_each_run_outside_the_clock():
    calls, prepared = [], []
    timing = timed(calls.append, repeats=3, warmup=2, prepare=lambda: prepared.append(1) or len(prepared))
    assert calls == [1, 2, 3, 4, 5] and len(timing.runs_s) == 3


def test_timed_in_turn_alternates_the_calls_round_by_round():
    order = []
    timings = timed_in_turn({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=2)
    assert order == ["a", "b"] * 3
    assert {name: len(t.runs_s) for name, t in timings.items()} == {"a": 2, "b": 2}
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        timed_in_turn({"a": lambda: None}, repeats=0)


def test_naming_the_machine_imports_neither_torch_nor_spacy():
    """A script's parent process, which only starts workers, names the machine and renders, names it
    without importing torch or spaCy (each process that does pays for both before it starts)."""
    import subprocess

    from spacy_elmo.kernels.machine import cpu_description

    script = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
        "from suite.report import machine\n"
        "print(machine(2)); print(sorted({'torch', 'spacy', 'spacy_elmo'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    named, imported = done.stdout.splitlines()
    assert named == f"{cpu_description()}, 2 threads, torch {torch_version()}"
    assert imported == "[]"
    direct = [
        script for script in SCRIPTS if "spacy_elmo.kernels.machine" in (ROOT / "bench" / f"{script}.py").read_text()
    ]
    assert direct == [], "the scripts name the CPU through suite.report, which loads it without torch"


def torch_version() -> str:
    import torch

    return torch.__version__
