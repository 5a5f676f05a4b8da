"""bench/gpu.py runs as a user runs it, at a tiny size, on the CPU (no GPU and no peer in the test
environment): the component's measurement with --device cpu on the fixture's weights (its results,
plot and section, and the section again from the results file alone), the host's steps, drift's
CPU check (bitwise 0) and a CPU profile."""

import torch
from bench_runner import smoke
from conftest import FIXTURE

TINY = ["--device", "cpu", "--threads", "1", "--weights", str(FIXTURE), "--workloads", "1", "--in-process"]
MEASURE = ["component", *TINY, "--precisions", "fp32", "--configurations", "fp32:4096", "--repeats", "2"]
COMPONENT = smoke(
    "gpu-component", [("gpu.py", *MEASURE)], [("gpu.py", "component", "--device", "cpu", "--render-only")]
)
HOST = smoke("gpu-host", [("gpu.py", "host", "--sentences", "8", "--rounds", "2")])
DRIFT = smoke("gpu-drift", [("gpu.py", "drift", "--device", "cpu", "--sentences", "4")])
PROFILE = smoke("gpu-profile", [("gpu.py", "profile", *TINY, "--label", "smoke", "--python")])


def test_the_component_bench_runs_on_the_cpu_and_renders_again(bench_smokes):
    run = bench_smokes.outcome(COMPONENT)
    report = run.results("component-cpu")
    (row,) = report["rows"]
    assert (row["workload"], row["precision"], row["max_batch_tokens"], row["peer"]) == (
        "1 sentence",
        "fp32",
        4096,
        None,
    )
    mine = row["ours"]
    assert mine["words"] == 20 and mine["words_per_s"] > 0 and len(mine["runs_s"]) == 2 and mine["peak_rss_mb"] > 0
    assert mine["runs"] == "fp32" and mine["batch_invariant"] == {"checked": 1, "bitwise_equal": 1}
    assert "threads" in report["device"]["cpu"] and report["device"]["torch"] == torch.__version__
    written = run.measured("gpu:component-cpu")
    assert "`python bench/gpu.py component --device cpu --threads 1 --weights " in written
    assert report["device"]["cpu"] in written and f"| {mine['words_per_s']:,.0f} |" in written
    assert run.is_png("component-cpu")
    assert run.rendered("gpu:component-cpu") == written


def test_the_host_steps_are_timed_in_turn(bench_smokes):
    run = bench_smokes.outcome(HOST)
    report = run.results("host-cpu")
    steps = report["steps"]
    assert len(steps) == 15 and all(len(t["runs_s"]) == 2 and t["best_s"] > 0 for t in steps.values())
    text = run.rendered("gpu:host-cpu")
    assert "`python bench/gpu.py host --sentences 8 --rounds 2`" in text and report["machine"] in text
    assert "| lane schedule (GPU, host tables) |" in text


def test_drift_on_the_cpu_is_bitwise_zero(bench_smokes):
    models = bench_smokes.outcome(DRIFT).results("drift-cpu")["models"]
    assert [len(m["layers"]) for m in models] == [3, 3]
    assert all(layer["max_abs_diff"] == 0 and layer["max_abs"] > 0 for m in models for layer in m["layers"])


def test_a_cpu_profile_leaves_the_gpus_figures_absent(bench_smokes):
    (profiled,) = bench_smokes.outcome(PROFILE).results("profile-cpu-smoke")["rows"]
    assert profiled["unprofiled_s"] > 0 and profiled["profiled_s"] > 0 and profiled["top_host"]
    assert profiled["gpu_busy_s"] is None and profiled["host_share"] is None and profiled["python_top"]
