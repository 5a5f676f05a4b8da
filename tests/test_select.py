"""What a precision runs is decided once, by ``select``, from what the machine is: its CPU features (as
capped) and exactness probes of the kernels, never from timing (spacy_elmo.kernels.select). Lesser
CPUs are simulated two ways: their features (monkeypatched), and oneDNN/ATen caps in subprocesses."""

import dataclasses
import re
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from conftest import ROOT, make_nlp, random_bilm, with_this_checkout
from cpu_features import int8_kernel_should_be_exact, skip_where_it_falls_back
from simulated_cpus import SIMULATED_CPUS, why_not_cap

from spacy_elmo import BiLMRunner, embed_sentences
from spacy_elmo.kernels import advice, machine, onednn, quantized
from spacy_elmo.kernels.backends import Route
from spacy_elmo.kernels.select import PrecisionFallback, select

CPU = torch.device("cpu")
AVX2 = frozenset({"avx2", "fma"})  # an AMD EPYC before Zen 4, an Intel before Ice Lake
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}  # Skylake-SP: no VNNI, no BF16
ZEN5 = AVX512 | {"avx512_vnni", "avx512_bf16", "avx_vnni"}  # AVX512_BF16 and VNNI, no AMX (AMD Zen 5)
SAPPHIRE_RAPIDS = ZEN5 | {"amx_bf16", "amx_int8"}
TEXT = "The bank raised its rates."
SENTENCES = [["The", "bank", "raised", "its", "rates", "."], ["A", "river", "bank", "."]]


@pytest.fixture
def simulated_cpu(monkeypatch):
    """Set the CPU features the decisions read, and with ``probes`` whether every kernel probe
    passes (else this machine's probes run); probe answers and warnings given are forgotten."""
    monkeypatch.setattr(advice, "_WARNED", set())

    def simulate(features, passes=None):
        monkeypatch.setattr(machine, "_ANSWERS", {})
        monkeypatch.setattr(machine, "cpu_features", lambda: frozenset(features))
        if passes is not None:
            monkeypatch.setattr(quantized, "sums_exact", lambda kernel: passes)
            monkeypatch.setattr(onednn, "bf16_runs", lambda: passes)
            monkeypatch.setattr(onednn, "_probe_passes", lambda precision: passes)

    return simulate


def test_the_oneDNN_cap_removes_features_as_a_lesser_cpu_lacks_them(monkeypatch):
    monkeypatch.setattr(machine, "_cpu_flags", lambda: frozenset(SAPPHIRE_RAPIDS | {"sse4_2"}))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert machine.cpu_features() == SAPPHIRE_RAPIDS
    for cap, expected in (("AVX2", AVX2), ("avx512_core", AVX512), ("AVX512_CORE_BF16", ZEN5 - {"avx_vnni"})):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert machine.cpu_features() == expected, cap
        assert f"capped at {cap.upper()}" in machine.cpu_description()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2_VNNI")
    assert machine.cpu_features() == AVX2 | {"avx_vnni"}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "ALL")
    assert machine.cpu_features() == SAPPHIRE_RAPIDS and machine.isa_cap() is None


@pytest.mark.parametrize(
    "flags, cap, expected",
    [
        (AVX2, "AVX2", "this CPU has nothing above AVX2: the cap would change nothing"),
        (AVX2, "AVX512_CORE", "this CPU lacks avx512bw, avx512dq, avx512f, avx512vl: a cap at AVX512_CORE would"),
        (ZEN5, "AVX2", None),
        (ZEN5, "AVX512_CORE", None),
        (AVX512, "AVX512_CORE", "this CPU has nothing above AVX512_CORE"),
    ],
)
def test_a_cap_only_ever_lowers(monkeypatch, flags, cap, expected):
    monkeypatch.setattr(machine, "_cpu_flags", lambda: frozenset(flags))
    reason = why_not_cap(cap)
    assert reason == expected if expected is None else reason.startswith(expected)


def test_the_rule_per_cpu_class_where_every_probe_passes(simulated_cpu):
    """The rule table of select's docstring, one CPU class at a time (the probes are tested on this
    machine apart: test_the_exactness_probe_rejects_saturating_sums, tests/test_onednn.py)."""
    simulated_cpu(AVX2, passes=True)
    assert select(CPU, "fp32").route is Route.ONEDNN_ANY_ROWS
    bf16 = select(CPU, "bf16").choice
    assert bf16.fell_back and "avx512_bf16" in bf16.reason and "amx_bf16" in bf16.reason
    int8 = select(CPU, "int8")
    assert int8.runs == "int8" and int8.int8 == quantized.INT8_KERNELS["fp32_sums"]
    assert "avx512_vnni" in int8.choice.slower and "no faster than fp32" in int8.choice.slower

    simulated_cpu(AVX512, passes=True)
    assert select(CPU, "bf16").choice.fell_back, "AVX-512 without BF16 converts in software: slower"

    simulated_cpu(ZEN5, passes=True)
    int8 = select(CPU, "int8")
    assert int8.int8.name == "int_mm" and "avx512_vnni" in int8.choice.features and int8.choice.slower is None
    bf16 = select(CPU, "bf16")
    assert bf16.runs == "bf16" and bf16.route is Route.ONEDNN_ANY_ROWS

    simulated_cpu(SAPPHIRE_RAPIDS, passes=True)
    assert select(CPU, "int8").int8.name == "onednn"
    bf16 = select(CPU, "bf16")
    assert bf16.runs == "bf16" and bf16.route is Route.ONEDNN_FIXED_ROWS, "AMX tiles change kernels with the rows"

    simulated_cpu(frozenset(), passes=True)  # no AVX2: an old x86, or where no flags can be read
    assert select(CPU, "bf16").choice.fell_back
    assert select(CPU, "int8").int8.name == "fp32_sums", "int8's numbers need no feature"


@pytest.mark.parametrize("features", [AVX2, ZEN5, SAPPHIRE_RAPIDS], ids=["AVX2", "ZEN5", "SAPPHIRE_RAPIDS"])
def test_where_no_kernel_probes_exact_each_precision_runs_fp32(simulated_cpu, features):
    simulated_cpu(features, passes=False)
    assert select(CPU, "int8").choice.fell_back and not quantized.exact_int8_kernels(CPU, features)
    bf16 = select(CPU, "bf16")
    assert bf16.choice.fell_back and bf16.runs == "fp32"
    fp32 = select(CPU, "fp32")
    assert fp32.choice.kernel == "MKL fp32 on fixed shapes" and fp32.route is Route.FIXED_SHAPES


def test_the_rule_is_pure_whatever_the_clock_says(simulated_cpu, monkeypatch):
    """The same machine gives the same kernels, with the clock running normally, a thousand times
    slower, or frozen: select reads no time."""
    simulated_cpu(machine.cpu_features())
    quiet = {precision: select(CPU, precision) for precision in ("fp32", "bf16", "int8")}
    for clock in (lambda: time.monotonic() * 1000, lambda: 0.0):
        monkeypatch.setattr(time, "perf_counter", clock)
        monkeypatch.setattr(machine, "_ANSWERS", {})
        for precision, kernels in quiet.items():
            assert select(CPU, precision) == kernels, precision


def test_every_exact_int8_kernel_here_gives_the_same_layers():
    """Two kernels that may serve int8 give bitwise the same layers on a model: features change
    int8's speed, never its numbers (every kernel this machine sums exactly, whatever its features)."""
    kernels = quantized.exact_int8_kernels(CPU, frozenset(machine.KERNEL_FEATURES))
    assert quantized.INT8_KERNELS["fp32_sums"] in kernels
    expected = [kernel for kernel in quantized.INT8_KERNELS.values() if int8_kernel_should_be_exact(kernel.needs)]
    assert all(kernel in kernels for kernel in expected), f"a probe regressed: {expected} should all be exact here"
    if len(kernels) < 2:
        pytest.skip("one exact int8 kernel on this machine, which has no int8 dot products (VNNI, AMX)")
    runner, layers = BiLMRunner(random_bilm(), precision="int8"), []
    chosen = runner.backend
    for kernel in kernels:
        runner.backend = dataclasses.replace(chosen, int8=kernel)
        runner.token_cache.clear()
        layers.append(embed_sentences(runner, SENTENCES))
    for other in layers[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(layers[0], other, strict=True))


def test_a_fallback_warns_once_naming_the_feature_and_the_alternative(simulated_cpu):
    simulated_cpu(AVX2)
    with pytest.warns(PrecisionFallback, match=r"'bf16' runs as exact 'fp32'.*avx512_bf16.*'fp32'"):
        BiLMRunner(random_bilm(), precision="bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner = BiLMRunner(random_bilm(), precision="bf16")  # a second time: no warning
        assert runner.precision == "fp32"
        runner.with_settings(precision="fp32")


def test_the_component_decides_at_initialize_and_on_load(simulated_cpu, tiny_weights, tmp_path):
    """On a CPU without bfloat16 dot products a bf16 pipeline warns when it is made or loaded, never
    inside nlp.pipe, and gives exact fp32 results; its setting is kept as asked."""
    import spacy

    exact = make_nlp(tiny_weights)(TEXT)._.elmo_data
    simulated_cpu(AVX2)
    with pytest.warns(PrecisionFallback):
        nlp = make_nlp(tiny_weights, precision="bf16")
    elmo = nlp.get_pipe("elmo")
    assert elmo.runner.precision == "fp32" and elmo.runner.choice.requested == "bf16"
    with warnings.catch_warnings():  # no fallback warning inside nlp.pipe (thinc 8.2 warns of its own deprecations)
        warnings.simplefilter("error", PrecisionFallback)
        np.testing.assert_array_equal(nlp(TEXT)._.elmo_data, exact)
    nlp.to_disk(tmp_path / "pipeline")
    advice._WARNED.clear()
    with pytest.warns(PrecisionFallback):
        loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").settings.precision == "bf16" and loaded.get_pipe("elmo").runner.precision == "fp32"


def test_int8_is_refused_at_initialize_for_a_model_whose_sums_could_overflow(monkeypatch, tiny_weights):
    monkeypatch.setattr(quantized, "MAX_K", 40)  # the tiny preset sums up to 16 * 7 char products and more
    skip_where_it_falls_back("int8", select(CPU, "int8").choice.fell_back, select(CPU, "int8").choice.reason)
    with pytest.raises(
        ValueError, match=r"'int8' cannot run this model \(its weight .*\): int8 sums of \d+ products.*'fp32'"
    ):
        make_nlp(tiny_weights, precision="int8")


def saturating_avx2_sums(a, w, scale):
    """What AVX2 without VNNI computes for int8 x int8: the activation made unsigned (+128),
    multiplied by the weight, adjacent products summed into a saturating int16 (vpmaddubsw), then
    widened and the +128 taken back out."""
    unsigned = a.long() + 128
    inner = a.shape[1] + a.shape[1] % 2
    unsigned = torch.nn.functional.pad(unsigned, (0, inner - a.shape[1]))
    weights = torch.nn.functional.pad(w.long(), (0, inner - a.shape[1]))
    rows = []
    for row in unsigned:
        pairs = (row * weights).view(weights.shape[0], -1, 2).sum(-1).clamp(-(2**15), 2**15 - 1)
        rows.append(pairs.sum(-1) - 128 * weights.sum(1))
    return torch.stack(rows).to(torch.float32).mul_(scale)


def test_the_exactness_probe_rejects_saturating_sums():
    exact = lambda a, w, scale: (a.long() @ w.long().t()).to(torch.float32).mul_(scale)  # noqa: E731
    assert quantized._sums_exact(exact)
    assert not quantized._sums_exact(saturating_avx2_sums)


def info_machine(tmp_path, cap):
    """``info --machine`` in a process whose kernels are capped at ``cap`` (set before torch loads)."""
    env = {key: value for key, value in with_this_checkout().items() if key != "ONEDNN_MAX_CPU_ISA"}
    env.update(SIMULATED_CPUS[cap], SPACY_ELMO_CACHE=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "spacy_elmo", "info", "--machine", str(tmp_path / "bilm")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_info_machine_says_what_each_precision_runs_why_and_how_fast(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from spacy_elmo.cli.app import app
    from spacy_elmo.weights.native import save_bilm

    save_bilm(random_bilm(), tmp_path / "bilm")
    report = info_machine(tmp_path, "AVX2")
    rows = {line.split()[1]: line for line in report.splitlines() if line.startswith("cpu ")}
    assert set(rows) == {"fp32", "bf16", "int8"}
    assert "fp32 (fallback)" in rows["bf16"] and "avx512_bf16" in rows["bf16"]
    assert "fp32 GEMMs" in rows["int8"] and re.search(r"\d\.\d\dx / \d\.\d\dx", rows["int8"]), rows["int8"]
    assert "capped at AVX2" in report and "lstm recurrent, 1 sentence" in report
    assert list((tmp_path / "cache" / "advice").glob("*.json")), "kept as advice for later loads"
    # uncapped, the command needs no process of its own
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    plain = CliRunner().invoke(app, ["info", "--machine", str(tmp_path / "bilm")])
    assert plain.exit_code == 0, plain.output
    assert machine.cpu_model() in plain.output and "capped" not in plain.output


def test_the_network_and_pipeline_ask_no_precision():
    """What runs is the Backend's to know: no precision tests or oneDNN checks outside kernels/."""
    pattern = re.compile(r"precision\s*(==|!=|in\s*\()|onednn\.available\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("network", "pipeline")
        for path in sorted((ROOT / "spacy_elmo" / folder).glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders


CAPPED_SUITES = ["test_parity.py", "test_precision.py", "test_onednn.py", "test_bilm.py", "test_threads.py"]
# Of those, what no kernel decides (which modules loading imports), run once uncapped
NOT_KERNELS = "not does_not_import_sympy"


# The default run caps at AVX2 (the commonest lesser CPU class); `nox -s matrix` at every cap.
CAPS = [pytest.param(cap, marks=[] if cap == "AVX2" else [pytest.mark.matrix]) for cap in sorted(SIMULATED_CPUS)]


@pytest.mark.slow
@pytest.mark.parametrize("cap", CAPS)
def test_parity_invariance_and_precision_tests_pass_on_a_lesser_cpu(cap):
    """The parity, batch- and thread-invariance and precision tests, in a process whose kernels
    are capped as on an AVX2-only CPU (AMD EPYC before Zen 4) or on AVX-512 without VNNI/BF16."""
    reason = why_not_cap(cap)
    if reason:
        pytest.skip(reason)
    env = {**with_this_checkout(), **SIMULATED_CPUS[cap]}
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-k", NOT_KERNELS, *CAPPED_SUITES],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT / "tests",
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
    assert "bf16 falls back to fp32 here: it needs bfloat16 dot products" in done.stdout, "bf16's own tests skip"
