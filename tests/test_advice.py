"""How fast a precision is here is advice (spacy_elmo.kernels.advice): measured by `info --machine`,
warned about at load, never a switch. A pipeline loaded while the timings say its precision is slow,
or while other processes saturate the cores, gives bitwise the vectors of a quiet load. Timings
here are injected, except in the one test that times for real and checks only what it records."""

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from conftest import make_nlp, random_bilm
from cpu_features import int8_kernel_should_be_exact, skip_where_it_falls_back

from spacy_elmo.kernels import advice, quantized
from spacy_elmo.kernels.advice import Advice, SlowerPrecision
from spacy_elmo.kernels.select import PrecisionFallback, select

CPU = torch.device("cpu")
SHAPES = random_bilm().config.kernel_shapes()
TEXT = "The bank raised its rates. We sat on the bank of the river."
PRECISIONS = ("fp32", "bf16", "int8")


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """An empty user cache, and no warning given yet in this process."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(advice, "_WARNED", set())
    return tmp_path / "cache"


def scaled_timer(factor):
    """Every site of the reduced precision takes ``factor`` ms, fp32's 1 ms."""
    return lambda site, calls: {label: 1.0 if label == "fp32" else factor for label in calls}


def runs_reduced(precision):
    return select(CPU, precision).runs == precision


def test_the_ratio_comes_from_the_timings(cache):
    skip_where_it_falls_back("int8", not runs_reduced("int8"), select(CPU, "int8").choice.reason)
    measured = advice.measure(SHAPES, "int8", CPU, scaled_timer(2.0))
    assert measured.speedup == (0.5, 0.5) and measured.slower
    assert set(measured.timings) == {"fp32", "int8"}
    assert set(measured.timings["int8"]) == {site.name for site in advice.sites(SHAPES)}
    assert advice.measure(SHAPES, "int8", CPU, scaled_timer(0.25)).speedup == (4.0, 4.0)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_load_the_timings_call_slow_runs_what_was_asked_with_the_quiet_vectors(
    cache, monkeypatch, tiny_weights, precision
):
    """Advice saying the precision is 0.4x fp32 (one sentence) and 0.7x (batch), and a timer that
    would say 100x slower were anything timed: the load warns with the measured ratio where the
    precision runs, and gives bitwise the vectors of a load with no advice."""
    quiet = make_nlp(tiny_weights, precision=precision)
    expected = quiet(TEXT)._.elmo_data
    advice.remember(Advice(precision, (0.4, 0.7)), quiet.get_pipe("elmo").bilm.config.kernel_shapes(), CPU)
    monkeypatch.setattr(advice, "wall_clock", scaled_timer(100.0))
    monkeypatch.setattr(advice, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loud = make_nlp(tiny_weights, precision=precision)
    assert loud.get_pipe("elmo").runner.backend == quiet.get_pipe("elmo").runner.backend
    np.testing.assert_array_equal(loud(TEXT)._.elmo_data, expected)
    messages = [str(w.message) for w in caught if issubclass(w.category, (SlowerPrecision, PrecisionFallback))]
    if precision != "fp32" and runs_reduced(precision):
        assert any("0.40x fp32's speed one sentence at a time and 0.70x on a batch" in text for text in messages)
        assert all("precision = 'fp32'" in text for text in messages)
    elif precision == "fp32":
        assert not messages


# stops by itself after 10 minutes, should the test die before it kills the loops
BUSY_LOOP = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_load_beside_processes_that_saturate_the_cores_gives_the_quiet_vectors(cache, tiny_weights, precision):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (SlowerPrecision, PrecisionFallback))
        quiet = make_nlp(tiny_weights, precision=precision)
        expected = quiet(TEXT)._.elmo_data
        loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(3)]
        try:
            busy = make_nlp(tiny_weights, precision=precision)
            got = busy(TEXT)._.elmo_data
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    assert busy.get_pipe("elmo").runner.backend == quiet.get_pipe("elmo").runner.backend
    np.testing.assert_array_equal(got, expected)


def test_a_load_times_nothing(cache, monkeypatch, tiny_weights):
    def refuse(*args, **kwargs):
        raise AssertionError("a load timed a kernel")

    monkeypatch.setattr(advice, "measure", refuse)
    monkeypatch.setattr(advice, "wall_clock", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (SlowerPrecision, PrecisionFallback))
        for precision in PRECISIONS:
            assert make_nlp(tiny_weights, precision=precision)(TEXT)._.elmo_data.shape[-1] == 32


def test_advice_of_a_precision_as_fast_as_fp32_says_nothing(cache):
    backend = select(CPU, "int8")
    skip_where_it_falls_back("int8", backend.choice.fell_back, backend.choice.reason)
    if backend.choice.slower is not None:
        dot_products = [k for k in quantized.INT8_KERNELS.values() if k.needs and int8_kernel_should_be_exact(k.needs)]
        assert not dot_products, f"int8 runs fp32 sums on a CPU with {dot_products[0].needs}: a probe regressed"
        pytest.skip(f"int8 warns here by the rule already: {backend.choice.slower}")
    advice.remember(Advice("int8", (1.3, 1.1)), SHAPES, CPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        advice.announce(backend, SHAPES)


def test_a_corrupt_or_foreign_entry_is_no_advice(cache):
    advice.remember(Advice("int8", (0.5, 0.5)), SHAPES, CPU)
    (entry,) = (cache / "advice").glob("*.json")
    assert advice.recalled(SHAPES, "int8", CPU) == Advice("int8", (0.5, 0.5))
    for broken in ("{not json", json.dumps({"key": {"torch": "another"}, "advice": {}})):
        entry.write_text(broken)
        assert advice.recalled(SHAPES, "int8", CPU) is None


def test_another_torch_or_thread_count_is_another_measurement(monkeypatch):
    key = advice.advice_key(SHAPES, "int8", CPU)
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert advice.advice_key(SHAPES, "int8", CPU)["digest"] != key["digest"]
    monkeypatch.undo()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert advice.advice_key(SHAPES, "int8", CPU)["digest"] != key["digest"]
    finally:
        torch.set_num_threads(threads)


def test_measured_for_real_every_site_has_a_time(cache):
    """On this machine's clock: every site of fp32 and of int8 is a positive number of ms."""
    skip_where_it_falls_back("int8", not runs_reduced("int8"), select(CPU, "int8").choice.reason)
    measured = advice.measure(SHAPES, "int8", CPU)
    sites = {site.name for site in advice.sites(SHAPES)}
    assert all(set(ms) == sites and min(ms.values()) > 0 for ms in measured.timings.values())
    assert min(measured.speedup) > 0


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_a_precision_warning_points_at_the_users_line(tiny_weights, monkeypatch, precision):
    """The warning a load gives names the user's ``nlp.initialize()``, not a frame of spacy_elmo,
    spaCy or thinc between it and the warning."""
    import spacy

    monkeypatch.setattr(advice, "_WARNED", set())  # once per process: as if this were the first load
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_weights), "precision": precision})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        nlp.initialize()
        line = sys._getframe().f_lineno - 1
    ours = [w for w in seen if issubclass(w.category, (PrecisionFallback, SlowerPrecision))]
    if not ours:
        pytest.skip(f"{precision} runs here as fast as asked: no warning to point")
    assert [(w.filename, w.lineno) for w in ours] == [(__file__, line)] * len(ours)
