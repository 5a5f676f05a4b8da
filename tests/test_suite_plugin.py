"""The suite's own rules (tests/suite_plugin.py): a test over the bound CONTRIBUTING.md states fails,
the groups it names are files that exist and keep a file's tests in one worker, and its time log is
what scripts/heaviest_tests.py reads."""

import os
from pathlib import Path

import pytest
import suite_plugin

TESTS = Path(__file__).resolve().parent

A_QUICK_TEST = """
def test_quick():
    assert True
"""


def test_a_test_longer_than_the_bound_fails_and_says_what_to_do(pytester, monkeypatch):
    pytester.makepyfile(test_inner=A_QUICK_TEST)
    kept = pytester.runpytest_inprocess("-p", "suite_plugin", "-n", "0")
    kept.assert_outcomes(passed=1)
    monkeypatch.setattr(suite_plugin, "SLOWEST_TEST_S", -1)  # every test is over it
    over = pytester.runpytest_inprocess("-p", "suite_plugin", "-n", "0")
    over.assert_outcomes(passed=1, errors=1)
    over.stdout.fnmatch_lines(["*test_quick took 0 s*no test may take longer than -1 s (CONTRIBUTING.md*"])


def test_the_bound_is_the_figure_contributing_states():
    text = " ".join(suite_plugin.CONTRIBUTING.read_text(encoding="utf-8").split())
    assert f"No test may take longer than **{suite_plugin.SLOWEST_TEST_S} s**" in text
    assert 0 < suite_plugin.SLOWEST_TEST_S <= 600


def test_the_groups_name_files_that_exist():
    for name in suite_plugin.RAY_FILES:
        assert (TESTS / name).is_file(), name
    assert list(TESTS.glob("test_bench_*.py"))
    for group in suite_plugin.LONGEST_FIRST:
        assert group in ("ray", "bench") or (TESTS / group).is_file(), group


SIX_TESTS = """
import pytest

@pytest.mark.parametrize("n", range(6))
def test_one_of_six(n):
    assert True
"""


def test_a_files_tests_run_in_one_worker_side_by_side(pytester, tmp_path):
    """Two workers, three files of six tests, two of them in one group (the bench smokes'): each
    group's tests all run in one worker (a file's module fixtures made once, and the files that
    start Ray never at once). With xdist's own loadgroup under pytest 9.2 every test was its own
    group, and a file's tests went to both workers."""
    pytester.makepyfile(test_bench_first=SIX_TESTS, test_bench_second=SIX_TESTS, test_third=SIX_TESTS)
    log = tmp_path / "times.tsv"
    environment = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        patch.delenv("PYTEST_XDIST_WORKER", raising=False)
        patch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
        result = pytester.runpytest_subprocess(
            "-p", "suite_plugin", "-n", "2", "--dist", "loadgroup", "--time-log", str(log)
        )
    result.assert_outcomes(passed=18)
    workers: dict = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        test, _, _, worker, _ = line.split("\t")
        workers.setdefault(suite_plugin.group_of_file(test.split("::")[0]), set()).add(worker)
    assert workers.keys() == {"bench", "test_third.py"}
    assert all(len(seen) == 1 for seen in workers.values()), workers


A_SLEEPING_TEST = """
import time

def test_sleeps():
    time.sleep(0.3)
"""


def test_the_time_log_names_each_tests_worker_and_start_and_the_script_sums_them(pytester, tmp_path, monkeypatch):
    """A run's --time-log holds one row per test that scripts/heaviest_tests.py reads: the table of
    the heaviest and each worker's busy and idle time."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("heaviest_tests", TESTS.parent / "scripts" / "heaviest_tests.py")
    heaviest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heaviest)
    pytester.makepyfile(test_inner=A_QUICK_TEST, test_sleeping=A_SLEEPING_TEST)
    log = tmp_path / "times.tsv"
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # the inner run is no worker's, even in one
    pytester.runpytest_inprocess("-p", "suite_plugin", "-n", "0", "--time-log", str(log)).assert_outcomes(passed=2)
    rows = {row.test: row for row in heaviest.read_log(log)}
    assert set(rows) == {"test_inner.py::test_quick", "test_sleeping.py::test_sleeps"}
    sleeping, quick = rows["test_sleeping.py::test_sleeps"], rows["test_inner.py::test_quick"]
    assert sleeping.wall >= 0.3 and sleeping.worker == quick.worker == "main"
    assert "| `test_sleeping.py::test_sleeps` |" in heaviest.table(list(rows.values()), top=1).splitlines()[2]
    (main,) = heaviest.workers(list(rows.values())).values()
    assert main["tests"] == 2 and main["wall"] >= 0.3 and main["idle_at_end"] == 0
    two_workers = [sleeping._replace(worker="gw0"), quick._replace(worker="gw1", began=sleeping.began)]
    summary = heaviest.workers(two_workers)
    assert summary["gw1"]["idle_at_end"] == pytest.approx(sleeping.wall - quick.wall, abs=0.011)
    assert summary["gw0"]["idle_at_end"] == 0
    bench = quick._replace(test="test_bench_x.py::test_a", wall=sleeping.wall + 1)
    by_group = heaviest.groups(two_workers + [bench], suite_plugin.group_of_file)
    assert by_group == [("bench", bench.wall), ("test_sleeping.py", sleeping.wall), ("test_inner.py", quick.wall)]
    assert heaviest.groups_table([bench]).splitlines()[2] == f"| bench | {bench.wall:.0f} |"
