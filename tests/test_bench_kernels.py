"""bench/kernels.py runs as a user runs it, at a tiny size: each precision against fp32 on the
fixture's weights (1 sentence, 1 round) and the int8 matmul kernels at 1 row (1 call); their
results and sections, and each section again from its results file alone (the caps are not run)."""

import torch
from bench_runner import smoke
from conftest import FIXTURE

PRECISIONS = ["--weights", str(FIXTURE), "--workloads", "1", "--repeats", "1"]
PRECISIONS_RUN = smoke(
    "kernels-precisions",
    [("kernels.py", "precisions", *PRECISIONS)],
    [("kernels.py", "precisions", "--render-only")],
)
INT8_RUN = smoke(
    "kernels-int8",
    [("kernels.py", "int8", "--rows", "1", "--repeats", "1")],
    [("kernels.py", "int8", "--render-only")],
)


def test_precisions_bench_times_each_precision_against_fp32_and_renders_again(bench_smokes):
    run = bench_smokes.outcome(PRECISIONS_RUN)
    report = run.results("precisions-cpu")
    assert [row["precision"] for row in report["rows"]] == ["fp32", "bf16", "int8"]
    assert all(row["workload"] == "1 sentence" and row["words"] == 20 for row in report["rows"])
    assert all(row["words_per_s"] > 0 and len(row["runs_s"]) == 1 for row in report["rows"])
    assert report["rows"][0]["x_fp32"] == 1.0 and set(report["kernels"]) == {"fp32", "bf16", "int8"}
    assert "threads" in report["machine"] and torch.__version__ in report["machine"] and report["capped"] is None
    written = run.measured("kernels:precisions-cpu")
    assert report["machine"] in written and f"`python bench/kernels.py precisions {' '.join(PRECISIONS)}`" in written
    assert f"{report['rows'][2]['words_per_s']:,.1f}" in written
    assert run.rendered("kernels:precisions-cpu") == written


def test_int8_bench_times_the_int8_kernels_against_fp32_and_renders_again(bench_smokes):
    run = bench_smokes.outcome(INT8_RUN)
    report = run.results("int8-cpu")
    times = report["ms"]["1"]
    assert list(report["ms"]) == ["1"] and times["fp32 a @ w.t()"] > 0
    timed = [ms for ms in times.values() if not isinstance(ms, str)]
    assert len(timed) >= 3 and all(ms > 0 for ms in timed), times
    assert "threads" in report["machine"] and report["engine"]
    written = run.measured("kernels:int8-cpu")
    assert report["machine"] in written and "`python bench/kernels.py int8 --rows 1 --repeats 1`" in written
    assert f"| fp32 a @ w.t() | {times['fp32 a @ w.t()']:.2f} (0%) |" in written
    assert run.rendered("kernels:int8-cpu") == written
