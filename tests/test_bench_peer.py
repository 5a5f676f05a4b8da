"""bench/peer.py runs as a user runs it, at a tiny size: ours alone on the fixture's weights (the
peer's venv is not in the test environment), its results, plot and section, and the section again
from the results file alone; and ours under a given Python (``--pythons``)."""

import sys

import torch
from bench_runner import smoke
from conftest import FIXTURE

TINY = ["--weights", str(FIXTURE), "--workloads", "1"]
MEASURE = [*TINY, "--precisions", "fp32", "--caches", "off", "--repeats", "2", "--no-roof"]
AGAINST = smoke("peer", [("peer.py", *MEASURE)], [("peer.py", "--render-only")])
TORCHES = smoke("peer-torches", [("peer.py", *TINY, "--repeats", "1", "--pythons", sys.executable)])


def test_peer_bench_measures_ours_and_renders_its_section_again_from_the_results(bench_smokes):
    run = bench_smokes.outcome(AGAINST)
    report = run.results("peer-cpu")
    (row,) = report["rows"]
    assert (row["workload"], row["precision"], row["cache"], row["peer"]) == ("1 sentence", "fp32", "off", None)
    assert row["ours"]["words"] == 20 and row["ours"]["words_per_s"] > 0 and len(row["ours"]["runs_s"]) == 2
    assert row["ours"]["runs"] == "fp32" and row["ours"]["torch"] == torch.__version__
    assert "threads" in report["machine"] and torch.__version__ in report["machine"]
    written = run.measured("peer:peer-cpu")
    assert report["command"] == f"python bench/peer.py {' '.join(MEASURE)}"  # no peer: no PEER_DIR in it
    assert f"`{report['command']}`" in written and report["machine"] in written
    assert f"{row['ours']['words_per_s']:,.1f}" in written
    assert run.is_png("peer-cpu")
    assert run.rendered("peer:peer-cpu") == written


def test_peer_bench_runs_ours_under_a_given_python(bench_smokes):
    run = bench_smokes.outcome(TORCHES)
    (row,) = run.results("peer-cpu-torch")["rows"]
    assert row["torch"] == torch.__version__ and row["ours"]["words_per_s"] > 0
    assert f"| 1 sentence | {torch.__version__} |" in run.rendered("peer:peer-cpu-torch")  # as measured
