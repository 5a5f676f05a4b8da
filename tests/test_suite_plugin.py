"""The suite's own rules (tests/suite_plugin.py): a test over the bound CONTRIBUTING.md states fails,
and the groups it names are files that exist."""

from pathlib import Path

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
