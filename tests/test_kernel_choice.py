"""Each precision decides once, from this CPU's features (as capped) and probes of the kernels: a fast
kernel, exact fp32 with one warning, or a refusal at initialize (spacy_elmo.kernels.kernel_choice). Lesser
CPUs are simulated two ways: their features (monkeypatched), and oneDNN/ATen caps in subprocesses."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from conftest import ROOT, make_nlp, with_this_checkout

from spacy_elmo.kernels import kernel_choice, machine, quantized

CPU = torch.device("cpu")
AVX2 = frozenset({"avx2", "fma"})  # an AMD EPYC before Zen 4, an Intel before Ice Lake
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}  # Skylake-SP: no VNNI, no BF16
ZEN5 = AVX512 | {"avx512_vnni", "avx512_bf16", "avx_vnni"}  # AVX512_BF16 and VNNI, no AMX (AMD Zen 5)
SAPPHIRE_RAPIDS = ZEN5 | {"amx_bf16", "amx_int8"}
TEXT = "The bank raised its rates."


@pytest.fixture
def simulated_cpu(monkeypatch):
    """Set the CPU features the decisions read, and with ``probes`` whether every kernel probe
    passes (else this machine's probes run); decisions and warnings already made are forgotten."""
    monkeypatch.setattr(kernel_choice, "_WARNED", set())

    def simulate(features, probes=None):
        monkeypatch.setattr(machine, "cpu_features", lambda: frozenset(features))
        if probes is not None:
            for name in ("int_mm_sums_exact", "onednn_sums_exact"):
                monkeypatch.setattr(quantized, name, lambda *levels: probes)
            monkeypatch.setattr(kernel_choice.onednn, "bf16_runs", lambda: probes)
            monkeypatch.setattr(kernel_choice.onednn, "_probe_passes", lambda precision: probes)
        forget_decisions()

    yield simulate
    forget_decisions()


def forget_decisions():
    kernel_choice._choose.cache_clear()
    quantized._cpu_int8_kernels.cache_clear()


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
    reason = machine.why_not_cap(cap)
    assert reason == expected if expected is None else reason.startswith(expected)


def test_what_each_cpu_class_runs_where_its_kernels_probe_exact(simulated_cpu):
    """The decisions per CPU class, every probe passing (the probes are tested on this machine apart:
    test_the_exactness_probe_rejects_saturating_sums_unless_weights_are_7_bit, tests/test_onednn.py)."""
    simulated_cpu(AVX2, probes=True)
    assert kernel_choice.decide("fp32", CPU).runs == "fp32"
    bf16 = kernel_choice.decide("bf16", CPU)
    assert bf16.fell_back and "avx512_bf16" in bf16.reason and "amx_bf16" in bf16.reason
    int8 = kernel_choice.decide("int8", CPU)
    assert int8.runs == "int8" and "7-bit" in int8.kernel and int8.features == ("avx2",)
    assert [k.name for k in quantized.exact_int8_kernels(CPU)] == ["int_mm_7bit", "onednn_7bit"], "both timed"

    simulated_cpu(AVX512, probes=True)
    assert kernel_choice.decide("bf16", CPU).fell_back, "AVX-512 without BF16 converts in software: slower"

    simulated_cpu(ZEN5, probes=True)
    int8 = kernel_choice.decide("int8", CPU)
    assert int8.kernel == "torch._int_mm" and "avx512_vnni" in int8.features
    assert [k.name for k in quantized.exact_int8_kernels(CPU)] == ["int_mm"], "oneDNN's int8 without AMX: its reference"
    bf16 = kernel_choice.decide("bf16", CPU)
    assert bf16.runs == "bf16" and bf16.kernel == "oneDNN bf16, any row count"

    simulated_cpu(SAPPHIRE_RAPIDS, probes=True)
    assert quantized.int8_kernel(CPU).name == "onednn"
    bf16 = kernel_choice.decide("bf16", CPU)
    assert bf16.runs == "bf16" and "fixed shapes" in bf16.kernel, "AMX tiles change kernels with the row count"

    simulated_cpu(frozenset(), probes=True)  # no AVX2: an old x86, or where no flags can be read
    for precision in ("bf16", "int8"):
        choice = kernel_choice.decide(precision, CPU)
        assert choice.fell_back and choice.runs == "fp32" and choice.kernel == "exact fp32 in its place"


@pytest.mark.parametrize("features", [AVX2, ZEN5, SAPPHIRE_RAPIDS], ids=["AVX2", "ZEN5", "SAPPHIRE_RAPIDS"])
def test_where_no_kernel_probes_exact_each_precision_runs_fp32(simulated_cpu, features):
    simulated_cpu(features, probes=False)
    assert kernel_choice.decide("int8", CPU).fell_back and not quantized.exact_int8_kernels(CPU)
    bf16 = kernel_choice.decide("bf16", CPU)
    assert bf16.fell_back and bf16.runs == "fp32"
    assert kernel_choice.decide("fp32", CPU).kernel == "MKL fp32 on fixed shapes", "oneDNN's row-count probe failed"


def test_a_fallback_warns_once_naming_the_feature_and_the_alternative(simulated_cpu):
    simulated_cpu(AVX2)
    with pytest.warns(kernel_choice.PrecisionFallback, match=r"'bf16' runs as exact 'fp32'.*avx512_bf16.*'fp32'"):
        kernel_choice.choose("bf16", CPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_choice.choose("bf16", CPU).runs == "fp32", "a second time: no warning"
        assert not kernel_choice.choose("fp32", CPU).fell_back


def test_the_component_decides_at_initialize_and_on_load(simulated_cpu, tiny_weights, tmp_path):
    """On a CPU without bfloat16 dot products a bf16 pipeline warns when it is made or loaded, never
    inside nlp.pipe, and gives exact fp32 results; its setting is kept as asked."""
    import spacy

    exact = make_nlp(tiny_weights)(TEXT)._.elmo_data
    simulated_cpu(AVX2)
    with pytest.warns(kernel_choice.PrecisionFallback):
        nlp = make_nlp(tiny_weights, precision="bf16")
    elmo = nlp.get_pipe("elmo")
    assert elmo.bilm.precision == "fp32" and elmo.bilm.precision_choice.requested == "bf16"
    with warnings.catch_warnings():  # no fallback warning inside nlp.pipe (thinc 8.2 warns of its own deprecations)
        warnings.simplefilter("error", kernel_choice.PrecisionFallback)
        np.testing.assert_array_equal(nlp(TEXT)._.elmo_data, exact)
    nlp.to_disk(tmp_path / "pipeline")
    kernel_choice._WARNED.clear()
    with pytest.warns(kernel_choice.PrecisionFallback):
        loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").settings.precision == "bf16" and loaded.get_pipe("elmo").bilm.precision == "fp32"


def test_int8_is_refused_at_initialize_for_a_model_whose_sums_could_overflow(monkeypatch, tiny_weights):
    monkeypatch.setattr(quantized, "MAX_K", 40)  # the tiny preset sums up to 16 * 7 char products and more
    if kernel_choice.decide("int8", CPU).fell_back:
        pytest.skip("int8 falls back to fp32 here")
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


def test_the_exactness_probe_rejects_saturating_sums_unless_weights_are_7_bit():
    exact = lambda a, w, scale: (a.long() @ w.long().t()).to(torch.float32).mul_(scale)  # noqa: E731
    assert quantized._sums_exact(exact, quantized.INT8_MAX)
    assert not quantized._sums_exact(saturating_avx2_sums, quantized.INT8_MAX)
    assert quantized._sums_exact(saturating_avx2_sums, quantized.INT7_MAX), "255 * 63 * 2 < 2**15"


def info_machine(cap=None):
    env = {key: value for key, value in with_this_checkout().items() if key != "ONEDNN_MAX_CPU_ISA"}
    env.update(machine.SIMULATED_CPUS.get(cap, {}))
    done = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "info", "--machine"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_info_machine_says_what_each_precision_runs_and_why():
    rows = {line.split()[1]: line for line in info_machine("AVX2").splitlines() if line.startswith("cpu ")}
    assert set(rows) == {"fp32", "bf16", "int8"}
    assert "fp32 (fallback)" in rows["bf16"] and "avx512_bf16" in rows["bf16"]
    assert "7-bit weights" in rows["int8"] and "avx2" in rows["int8"]
    assert "capped at AVX2" in info_machine("AVX2")
    plain = info_machine()
    assert machine.cpu_model() in plain and "capped" not in plain


CAPPED_SUITES = ["test_parity.py", "test_precision.py", "test_onednn.py", "test_bilm.py", "test_threads.py"]


# The default run caps at AVX2 (the commonest lesser CPU class); `nox -s matrix` at every cap.
CAPS = [
    pytest.param(cap, marks=[] if cap == "AVX2" else [pytest.mark.matrix]) for cap in sorted(machine.SIMULATED_CPUS)
]


@pytest.mark.slow
@pytest.mark.parametrize("cap", CAPS)
def test_parity_invariance_and_precision_tests_pass_on_a_lesser_cpu(cap):
    """The parity, batch- and thread-invariance and precision tests, in a process whose kernels
    are capped as on an AVX2-only CPU (AMD EPYC before Zen 4) or on AVX-512 without VNNI/BF16."""
    reason = machine.why_not_cap(cap)
    if reason:
        pytest.skip(reason)
    env = {**with_this_checkout(), **machine.SIMULATED_CPUS[cap]}
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, *CAPPED_SUITES], capture_output=True, text=True, env=env, cwd=ROOT / "tests", timeout=900
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
    assert "bf16 falls back to fp32 here: it needs bfloat16 dot products" in done.stdout, "bf16's own tests skip"
