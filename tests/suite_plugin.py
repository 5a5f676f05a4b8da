"""How the suite shares the machine, and the bound that keeps it short (CONTRIBUTING.md, "The checks").

- **Side by side.** The README's command runs the tests in pytest-xdist workers (``-n auto`` in
  pyproject.toml: ``workers_for`` this machine). Many tests wait more than they compute (a process
  importing torch, a server, Ray), so a second worker uses what the first leaves idle.
- **Threads.** Each worker runs torch on ``cores // workers`` threads (at least one), and so do the
  processes its tests start (``OMP_NUM_THREADS``): a thread per core in each of two workers would
  ask for twice the cores, and OpenMP's threads spin while they wait for each other. A test about
  threads sets the counts it is about itself.
- **Ray's workers at the tests' priority.** Ray starts its workers at niceness 15, to leave the
  CPU to its own daemons; beside another worker's tests they would get a few per cent of a core
  (``RAY_worker_niceness=0`` in each worker, for the clusters its tests start).
- **Groups.** A file's tests run in one worker, in order (its module fixtures are made once); the
  files that start a local Ray cluster share one worker, as do the bench smokes, whose session
  fixture starts every smoke run at once (tests/bench_runner.py). The plugin gives xdist its
  scheduler for that (``GroupScheduling``): xdist's own ``loadgroup`` reads a test's group from a
  suffix it writes into the node id, which pytest 9.2 no longer takes (pytest-xdist issue 1386),
  and then sends each test on its own.
- **The bound.** A test whose own duration (setup, call and teardown) passes ``SLOWEST_TEST_S``,
  the figure CONTRIBUTING.md states, fails: the next slow test is made cheaper, not added.
- **Where the time goes.** ``--time-log PATH`` appends one row per test: its wall time (setup, call
  and teardown), the CPU time its worker and the processes it waited for spent in it, the worker
  and when the test began (``scripts/heaviest_tests.py PATH`` prints the table CONTRIBUTING.md
  keeps, and how long each worker was busy and how long it waited for the last one).
"""

from __future__ import annotations

import os
import re
import resource
import sys
import time
from pathlib import Path

import pytest

CONTRIBUTING = Path(__file__).resolve().parents[1] / "CONTRIBUTING.md"
BOUND_SENTENCE = re.compile(r"No test may take longer\s+than\s+\*\*(\d+) s\*\*")
SLOWEST_TEST_S = int(BOUND_SENTENCE.search(CONTRIBUTING.read_text(encoding="utf-8")).group(1))  # type: ignore[union-attr]

# Files whose tests start a local Ray cluster: one at a time on the machine.
RAY_FILES = {"test_serve_ray.py", "test_embed_ray.py", "test_serve_signals.py", "test_serve_gateway.py"}
# The groups that took longest in a run of the suite (`scripts/heaviest_tests.py LOG --groups`), longest
# first: a worker free takes the next, so the short files left at the end even out the workers.
LONGEST_FIRST = [
    "ray",
    "bench",
    "test_training.py",
    "test_project.py",
    "test_packaging.py",
    "test_bilm.py",
    "test_hardening.py",
    "test_component.py",
    "test_triton_kernels.py",
    "test_docs.py",
    "test_precision.py",
    "test_downstream_precision.py",
]
SPENT = pytest.StashKey[float]()


def workers_for(cores: int) -> int:
    """Workers for ``cores`` CPU cores: one per core, at most 8 (each imports torch and spaCy and
    holds its own fixtures)."""
    return max(1, min(cores, 8))


def group_of(item: pytest.Item) -> str:
    """The group of a test: its file's, or the group its file shares with others."""
    return group_of_file(item.path.name)


def group_of_file(file: str) -> str:
    """The group of the tests of ``file`` (a test file's name)."""
    if file in RAY_FILES:
        return "ray"
    if file.startswith("test_bench_"):
        return "bench"
    return file


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``GroupScheduling`` where the run asks for ``--dist loadgroup`` (pyproject.toml's addopts);
    another ``--dist`` gets xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling, a test's scope its group (``group_of_file``): a worker takes a
        whole group, in the order of the collection (``--no-loadscope-reorder``)."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of_file(Path(nodeid.split("::", 1)[0]).name)

    return GroupScheduling(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--time-log", metavar="PATH", help="append each test's wall and CPU time, worker and start to PATH (TSV)"
    )


def cpu_seconds() -> float:
    """CPU time of this process and of the processes it has waited for."""
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: object):
    path = item.config.getoption("time_log")
    began, started, cpu = time.time(), time.perf_counter(), cpu_seconds()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        row = f"{item.nodeid}\t{time.perf_counter() - started:.2f}\t{cpu_seconds() - cpu:.2f}\t{worker}\t{began:.2f}"
        with open(path, "a", encoding="utf-8") as log:  # one short line per write: appends do not interleave
            log.write(row + "\n")


def side_by_side() -> bool:
    """Whether this process is a worker of a run side by side (the other workers use the other cores)."""
    return "PYTEST_XDIST_WORKER_COUNT" in os.environ


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return workers_for(os.cpu_count() or 1)


def pytest_configure(config: pytest.Config) -> None:
    if side_by_side():
        threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch where it is imported later
        os.environ["RAY_worker_niceness"] = "0"
        torch = sys.modules.get("torch")
        if torch is not None:  # imported already (the suite's conftest.py): its threads set here
            torch.set_num_threads(threads)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """The longest groups first: a worker takes the next group when it is free, and a long group
    started last would leave the other workers idle at the end."""
    rank = {group: place for place, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item), len(LONGEST_FIRST)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    spent = item.stash.get(SPENT, 0.0) + report.duration
    item.stash[SPENT] = spent
    if report.when == "teardown" and spent > SLOWEST_TEST_S and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {spent:.0f} s (setup, call and teardown): no test may take longer than "
            f'{SLOWEST_TEST_S} s (CONTRIBUTING.md, "The checks"). Make it cheaper: share what it builds '
            "through a fixture, or check in this process what needs no process of its own."
        )
