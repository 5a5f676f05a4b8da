"""The kernel plan (spacy_elmo.kernels.plan): each precision's kernel is chosen at load by timing the
candidates at the model's shapes; a precision no faster than fp32 runs fp32 with one warning. The
timings here are injected (the choice is what is tested, never a machine's speed), except in the
one test that times for real and checks only what the plan records."""

import json
import os
import warnings

import numpy as np
import pytest
import torch
from conftest import make_nlp, random_bilm

from spacy_elmo import embed_sentences
from spacy_elmo.kernels import kernel_choice, plan, quantized

CPU = torch.device("cpu")
SENTENCES = [["The", "bank", "raised", "its", "rates", "."], ["A", "river", "bank", "."]]
SHAPES = random_bilm().config.kernel_shapes()
ONE_SENTENCE = ("lstm recurrent, 1 sentence", "lstm projection, 1 sentence")
TWO_EXACT_KERNELS = (quantized.INT8_KERNELS["int_mm"], quantized.INT8_KERNELS["int_mm_7bit"])


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """Plans measured (not taken from features), cached under tmp_path, no warning given yet;
    ``timings({label: factor})`` forgets every plan made (in memory and in the cache) and makes
    every site of a candidate take factor x 1 ms from then on (``{label: {site: factor}}`` for
    single sites); it returns the list of what is timed."""
    monkeypatch.setenv("SPACY_ELMO_KERNEL_PLAN", "measure")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel_choice, "_WARNED", set())
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # a quiet machine, whatever runs beside
    plan.forget_plans()
    timed = []

    def timings(factors):
        def timer(site, calls):
            result = {}
            for label in calls:
                timed.append((label, site.name))
                factor = factors.get(label, 1.0)
                result[label] = factor.get(site.name, 1.0) if isinstance(factor, dict) else factor
            return result

        monkeypatch.setattr(plan, "TIMER", timer)
        plan.forget_plans()
        for entry in plan.plans_dir().glob("*.json"):
            entry.unlink()
        return timed

    yield timings
    plan.forget_plans()


@pytest.fixture
def two_int8_kernels(monkeypatch):
    """Two exact int8 candidates whatever this CPU has (VNNI sums 7-bit weights exactly too)."""
    if not quantized.int_mm_sums_exact(quantized.INT8_MAX):
        pytest.skip("torch._int_mm does not sum 8-bit weights exactly here (no VNNI)")
    monkeypatch.setattr(quantized, "exact_int8_kernels", lambda device, features=None: TWO_EXACT_KERNELS)
    kernel_choice._choose.cache_clear()  # decisions remembered from the real kernels
    yield
    kernel_choice._choose.cache_clear()  # and none from these


def test_the_fastest_exact_kernel_wins_and_runs(measured, two_int8_kernels):
    measured({"int8 int_mm": 2.0, "int8 int_mm_7bit": 0.5})  # int_mm slower than fp32, the 7-bit one faster
    bilm = random_bilm()
    bilm.precision = "int8"
    assert bilm.precision == "int8" and bilm.kernel_plan.int8_kernel == "int_mm_7bit"
    assert bilm.kernel_plan.speedup == (2.0, 2.0) and "7-bit" in bilm.precision_choice.kernel
    assert bilm.blocking_for_run().int8_kernel == "int_mm_7bit"
    chosen = embed_sentences(bilm, SENTENCES)
    with_int_mm = random_bilm()
    with_int_mm.load_state_dict(bilm.state_dict())
    measured({"int8 int_mm": 0.5, "int8 int_mm_7bit": 2.0})
    with_int_mm.precision = "int8"
    assert with_int_mm.kernel_plan.int8_kernel == "int_mm"
    other = embed_sentences(with_int_mm, SENTENCES)
    assert not all(np.array_equal(a, b) for a, b in zip(chosen, other)), "7-bit weights: other results"


def test_a_precision_no_faster_than_fp32_runs_fp32_and_warns_once_with_the_ratio(measured, two_int8_kernels):
    measured({"int8 int_mm": 1.25, "int8 int_mm_7bit": 4.0})
    bilm = random_bilm()
    with pytest.warns(kernel_choice.PrecisionFallback) as caught:
        bilm.precision = "int8"
    (warning,) = caught
    assert "0.80x fp32's speed one sentence at a time and 0.80x on a batch" in str(warning.message)
    assert "torch._int_mm" in str(warning.message) and "Set precision = 'fp32'" in str(warning.message)
    assert "spacy_elmo info --machine` prints the timings" in str(warning.message)
    assert bilm.precision == "fp32" and bilm.kernel_plan.int8_kernel is None
    assert [np.array_equal(a, b) for a, b in zip(embed_sentences(bilm, SENTENCES), exact_layers(bilm))] == [True] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = random_bilm()
        again.precision = "int8"  # the same plan: no second warning
    assert again.precision == "fp32"


def exact_layers(bilm):
    fp32 = random_bilm()
    fp32.load_state_dict(bilm.state_dict())
    return embed_sentences(fp32, SENTENCES)


def test_faster_on_batches_but_slower_for_one_sentence_falls_back(measured):
    """Both ways of calling count: bf16 on AMX tiles was faster on batches and slower one sentence
    at a time (0.77x on a Xeon), which the plan does not accept."""
    if kernel_choice.decide("bf16", CPU).fell_back:
        pytest.skip("bf16 has no exact kernel here to time")
    measured({"bf16": {**{site: 3.0 for site in ONE_SENTENCE}, "lstm recurrent, 32 sentences": 0.1}})
    bilm = random_bilm()
    with pytest.warns(kernel_choice.PrecisionFallback, match=r"at 0\.\d\dx fp32's speed one sentence at a time"):
        bilm.precision = "bf16"
    assert bilm.precision == "fp32"


def test_a_candidate_far_behind_at_the_small_shape_is_not_timed_further(measured, two_int8_kernels):
    timed = measured({"int8 int_mm": {"screen": 100.0}, "int8 int_mm_7bit": 0.5})
    made = plan.plan_for(SHAPES, "int8", CPU)
    assert made.int8_kernel == "int_mm_7bit" and "int8 int_mm" not in made.timings
    assert [site for label, site in timed if label == "int8 int_mm"] == ["screen"]


def test_a_plan_is_cached_and_a_second_load_measures_nothing(measured, two_int8_kernels):
    timed = measured({"int8 int_mm": 0.5, "int8 int_mm_7bit": 2.0})
    first = plan.plan_for(SHAPES, "int8", CPU)
    assert timed and not first.cached
    (entry,) = plan.plans_dir().glob("*.json")
    plan.forget_plans()  # as a new process
    timed.clear()
    second = plan.plan_for(SHAPES, "int8", CPU)
    assert not timed and second.cached and second == first and second.timings == first.timings
    assert json.loads(entry.read_text())["key"]["torch"] == torch.__version__


@pytest.mark.parametrize("busy", ["load average", "fp32 drifted"])
def test_a_plan_measured_on_a_busy_machine_holds_for_this_process_only(measured, two_int8_kernels, monkeypatch, busy):
    timed = measured({"int8 int_mm": 0.5})
    quiet_timer = plan.TIMER
    if busy == "load average":
        monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * (os.cpu_count() or 1), 0.0, 0.0))
    else:
        screens = iter([1.0, 2.0])  # fp32 at the small shape: at the start, then twice as slow at the end

        def drifting(site, calls):
            times = quiet_timer(site, calls)
            return {**times, "fp32": next(screens)} if site.name == "screen" else times

        monkeypatch.setattr(plan, "TIMER", drifting)
    made = plan.plan_for(SHAPES, "int8", CPU)
    assert made.int8_kernel == "int_mm" and not made.steady
    assert not list(plan.plans_dir().glob("*.json")), "not cached"
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(plan, "TIMER", quiet_timer)
    plan.forget_plans()
    timed.clear()
    assert plan.plan_for(SHAPES, "int8", CPU).steady and timed, "measured again at the next load"
    assert list(plan.plans_dir().glob("*.json")), "and cached once steady"


def test_a_corrupt_or_foreign_cache_entry_is_ignored_and_rewritten(measured, two_int8_kernels):
    timed = measured({"int8 int_mm": 0.5})
    plan.plan_for(SHAPES, "int8", CPU)
    (entry,) = plan.plans_dir().glob("*.json")
    for broken in ("{not json", json.dumps({"key": {"torch": "another"}, "plan": {}})):
        entry.write_text(broken)
        plan.forget_plans()
        timed.clear()
        assert plan.plan_for(SHAPES, "int8", CPU).int8_kernel == "int_mm"
        assert timed, "measured again"
        assert json.loads(entry.read_text())["key"] == plan.plan_key(SHAPES, "int8", CPU)


def test_another_torch_or_thread_count_is_another_plan(measured, monkeypatch):
    measured({})
    key = plan.plan_key(SHAPES, "int8", CPU)
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert plan.plan_key(SHAPES, "int8", CPU)["digest"] != key["digest"]
    monkeypatch.undo()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert plan.plan_key(SHAPES, "int8", CPU)["digest"] != key["digest"]
    finally:
        torch.set_num_threads(threads)


def test_the_component_decides_at_initialize_and_runs_what_the_plan_says(measured, tiny_weights):
    measured({"int8 int_mm": 3.0, "int8 int_mm_7bit": 3.0, "int8 onednn": 3.0, "int8 onednn_7bit": 3.0})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp = make_nlp(tiny_weights, precision="int8")
    elmo = nlp.get_pipe("elmo")
    if not quantized.exact_int8_kernels(CPU):
        pytest.skip("no exact int8 kernel here: int8 falls back by features")
    assert elmo.bilm.precision == "fp32" and any("0.33x" in str(w.message) for w in caught)
    text = "The bank raised its rates."
    assert np.array_equal(nlp(text)._.elmo_data, make_nlp(tiny_weights)(text)._.elmo_data)


def test_without_measuring_each_precision_runs_its_first_exact_kernel(measured, monkeypatch):
    timed = measured({})
    monkeypatch.setenv("SPACY_ELMO_KERNEL_PLAN", "features")
    made = plan.plan_for(SHAPES, "int8", CPU)
    kernel = quantized.int8_kernel(CPU)
    assert not timed and made.int8_kernel == (kernel.name if kernel else None)
    monkeypatch.setenv("SPACY_ELMO_KERNEL_PLAN", "guess")
    with pytest.raises(ValueError, match="SPACY_ELMO_KERNEL_PLAN='guess': use 'measure'"):
        plan.plan_for(SHAPES, "int8", CPU)


def test_measured_for_real_the_plan_records_every_timing(monkeypatch, tmp_path):
    """On this machine's clock: whatever it chooses, every site of fp32 and of each candidate
    timed is a positive number of milliseconds, and the plan is the cached one next time."""
    monkeypatch.setenv("SPACY_ELMO_KERNEL_PLAN", "measure")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    plan.forget_plans()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", kernel_choice.PrecisionFallback)
            made = plan.plan_for(SHAPES, "int8", CPU)
        if not made.timings:
            pytest.skip(f"int8 falls back here by features: {made.choice.reason}")
        sites = {site.name for site in plan.sites(SHAPES)}
        assert all(set(ms) == sites and min(ms.values()) > 0 for ms in made.timings.values())
        assert (made.runs == "int8") == (min(made.speedup) > 1.0)
        plan.forget_plans()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", kernel_choice.PrecisionFallback)
            again = plan.plan_for(SHAPES, "int8", CPU)
        assert again.cached == made.steady, "cached where the machine was quiet"
    finally:
        plan.forget_plans()
