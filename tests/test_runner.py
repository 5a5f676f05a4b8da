"""A BiLM is data, a BiLMRunner runs it (spacy_elmo.network.runner), and only the kernels room asks
what the machine is: running a loaded biLM every way it runs on a CPU leaves it as it was, and no
module outside spacy_elmo/kernels/ tests a device, a precision or a route."""

import dataclasses
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_bilm

from spacy_elmo import BiLMRunner, Blocking, embed_sentences
from spacy_elmo.kernels import onednn
from spacy_elmo.kernels.advice import SlowerPrecision
from spacy_elmo.kernels.backends import FixedShapes, Int8Sums, OneDnnAnyRows
from spacy_elmo.kernels.select import PrecisionFallback
from spacy_elmo.network.token_cache import TokenCache

PACKAGE = Path(__file__).resolve().parents[1] / "spacy_elmo"
SENTENCES = [["The", "cat", "sat", "."], ["A", "dog", "."], ["Birds", "sing", "in", "the", "morning", "."]]


def snapshot(bilm):
    """Every module's attributes (tensors by identity, version and bits; the rest by value)."""

    def value(item):
        if isinstance(item, torch.Tensor):
            return ("tensor", id(item), item._version, item.detach().clone())
        if isinstance(item, dict):
            return {key: value(inner) for key, inner in item.items()}
        if isinstance(item, torch.nn.Module):
            return ("module", id(item))
        return ("value", repr(item))

    return {name: value(dict(module.__dict__)) for name, module in bilm.named_modules()}


def assert_same(before, after, where=""):
    assert type(before) is type(after), where
    if isinstance(before, dict):
        assert before.keys() == after.keys(), f"{where}: attributes added or removed"
        for key in before:
            assert_same(before[key], after[key], f"{where}.{key}")
    elif isinstance(before, tuple) and before[0] == "tensor":
        assert before[:3] == after[:3], f"{where}: another tensor, or written in place"
        assert torch.equal(before[3], after[3]), f"{where}: values changed"
    else:
        assert before == after, where


def run_every_cpu_path(bilm, monkeypatch):
    """Each way a CPU runs a biLM: fp32 (oneDNN, any row count) by the step loop and by torch's fused
    kernel, bf16 (its kernels, or fp32 in their place), int8, fixed shapes, other blockings, the token
    cache warm and off, stateful calls carrying state, padded batches and a pickled runner. Returns the
    backends that ran."""
    char_ids = torch.from_numpy(np.stack([bilm.indexer.encode(s)[0] for s in (["a", "b"], ["c", "d"])])).long()
    backends = []
    for precision in ("fp32", "bf16", "int8"):
        for path in ("step", "fused") if precision == "fp32" else ("step",):
            runner = BiLMRunner(bilm, precision=precision, lstm_path=path)
            embed_sentences(runner, SENTENCES)
            embed_sentences(runner, SENTENCES)  # the token cache warm
            if path == "step":  # stateful calls run the step loop
                embed_sentences(runner, SENTENCES, stateful=True)
                embed_sentences(runner, SENTENCES[:2], stateful=True)  # carried state
            runner(char_ids)
            backends.append(type(runner.backend))
    small = BiLMRunner(
        bilm, blocking=Blocking(gemm_rows=32, token_block=32, step_columns=16), token_cache=TokenCache(0)
    )
    embed_sentences(small, SENTENCES)
    embed_sentences(pickle.loads(pickle.dumps(BiLMRunner(bilm))), SENTENCES)
    with monkeypatch.context() as patch:
        patch.setattr(onednn, "available", lambda *args, **kwargs: False)  # as where oneDNN's probe fails
        fixed = BiLMRunner(bilm)
        embed_sentences(fixed, SENTENCES, stateful=True)
        backends.append(type(fixed.backend))
    return backends


def test_running_a_loaded_bilm_every_way_leaves_it_as_it_was(monkeypatch):
    bilm = random_bilm()
    before = snapshot(bilm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionFallback)  # bf16 without its CPU features runs fp32
        warnings.simplefilter("ignore", SlowerPrecision)  # int8 without VNNI: its numbers, not its speed
        backends = run_every_cpu_path(bilm, monkeypatch)
    assert {OneDnnAnyRows, Int8Sums, FixedShapes} <= set(backends), backends
    assert_same(before, snapshot(bilm), "bilm")


def test_runners_over_one_bilm_run_their_own_ways():
    """Two runners share the weights (not copies) and keep their own backend, cache and state."""
    bilm = random_bilm()
    exact, quantized = BiLMRunner(bilm), BiLMRunner(bilm, precision="int8")
    assert exact.bilm is quantized.bilm
    assert exact.precision == "fp32" and quantized.precision == "int8"
    embed_sentences(exact, SENTENCES, stateful=True)
    assert exact.carried_state is not None and quantized.carried_state is None
    assert len(exact.token_cache) > 0 and len(quantized.token_cache) == 0
    assert not np.array_equal(embed_sentences(exact, SENTENCES)[0], embed_sentences(quantized, SENTENCES)[0])


def test_a_runner_refuses_a_bilm_moved_under_it():
    bilm = random_bilm()
    runner = BiLMRunner(bilm)
    runner.backend = dataclasses.replace(runner.backend, device=torch.device("meta"))  # made for another device
    with pytest.raises(RuntimeError, match="make a runner for the device"):
        embed_sentences(runner, SENTENCES)


def test_stateful_calls_need_a_runner():
    with pytest.raises(TypeError, match="BiLMRunner"):
        embed_sentences(random_bilm(), SENTENCES, stateful=True)


# What asks about the machine, written as it would be asked: a device's type, a CUDA tensor, a
# precision's name compared, a route, a backend's class.
MACHINE_QUESTIONS = re.compile(
    r"\.type\s*[!=]=|device\.type\b|\.is_cuda\b|[!=]=\s*[\"'](fp32|bf16|int8)[\"']|[\"'](fp32|bf16|int8)[\"']\s*[!=]="
    r"|\bin\s*\(\s*[\"'](fp32|bf16|int8)|\.route\b|isinstance\([^)]*\b(Backend|OneDnnAnyRows|OneDnnFixedRows|"
    r"FixedShapes|CudaFixedShapes|Int8Sums|TritonBackend)\b"
)


def machine_questions_outside_kernels():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "kernels":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if MACHINE_QUESTIONS.search(line.split("#")[0]):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    return found


def test_only_the_kernels_room_asks_about_the_device_the_precision_or_the_route():
    assert machine_questions_outside_kernels() == []


@pytest.mark.parametrize(
    "line",
    [
        'if bilm.device.type == "cuda":',
        "if x.is_cuda:",
        'if runner.precision == "int8":',
        'if "bf16" != precision:',
        "if backend.route is Route.TRITON:",
        "if isinstance(backend, TritonBackend):",
        'if precision in ("bf16", "int8"):',
    ],
)
def test_the_scan_finds_each_way_of_asking(line):
    assert MACHINE_QUESTIONS.search(line)
