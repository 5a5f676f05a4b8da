"""Run bench/ scripts as a user would, at a tiny size, with everything they write in a folder of the
test's (``SPACY_ELMO_BENCH_OUTPUT``: results/, out/ and BENCHMARKS.md there, never the repository's).
A measuring run is the script run as ``__main__`` in a child forked from a process that imported
torch, spaCy and spacy_elmo once (tests/fork_host.py), not a fresh process that imports them again.
Renders run there too, after the measuring runs: a forked child holds nothing of theirs (each run is
a child of its own), so a section rendered there comes from the results files alone, as a user's
``--render-only`` does later.

A script's smoke run is declared once, when its test module is imported (``smoke(...)``): its
measuring runs in order, then its sections rendered again from the results alone. The session's
``bench_smokes`` fixture (tests/conftest.py) starts every declared smoke run at the first test that
asks for one, two at a time, in a run of its own (most of a run is one process importing spaCy and
torch, so two side by side take little more than one); in a worker of a run side by side
(tests/suite_plugin.py), whose other workers use the other cores already, a smoke runs when a test
first asks for it. A test then checks what its smoke wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from fork_host import ForkHosts
from suite_plugin import side_by_side

BENCH = Path(__file__).resolve().parents[1] / "bench"
MEASURED = "BENCHMARKS.measured.md"  # the file as the measuring runs left it, beside the one rendered again
PNG = b"\x89PNG\r\n\x1a\n"


def run_bench(
    script: str, *arguments: str, output: Path, timeout: float = 300, hosts: Optional[ForkHosts] = None
) -> subprocess.CompletedProcess:
    """``python bench/SCRIPT ARGUMENTS`` with its outputs under ``output``, in a child of one of
    ``hosts`` where given, else a process of its own; raises, with the script's own output, where
    it exits non-zero."""
    environment = {**os.environ, "SPACY_ELMO_BENCH_OUTPUT": str(output)}
    command = [str(BENCH / script), *arguments]
    if hosts is not None:
        done = hosts.run(command, environment, timeout)
    else:
        done = subprocess.run(
            [sys.executable, *command], capture_output=True, text=True, env=environment, timeout=timeout
        )
    if done.returncode:
        raise AssertionError(
            f"bench/{script} {' '.join(arguments)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


@dataclass(frozen=True)
class Smoke:
    """One smoke run: ``runs`` ((script, arguments...) each) measure in order, then, with
    BENCHMARKS.md kept aside as ``MEASURED``, ``renders`` write the sections again from the results
    alone. ``prepare(output)`` makes the inputs first and returns arguments to add to every run."""

    name: str
    runs: Tuple[Tuple[str, ...], ...]
    renders: Tuple[Tuple[str, ...], ...] = ()
    prepare: Optional[Callable[[Path], Sequence[str]]] = None


@dataclass
class Outcome:
    """What a smoke run left: its folder and each measuring run's standard output."""

    output: Path
    stdout: List[str]

    def results(self, name: str) -> Dict[str, Any]:
        return results(self.output, name)

    def measured(self, key: str) -> str:
        return section(self.output, key, MEASURED)

    def rendered(self, key: str) -> str:
        return section(self.output, key)

    def is_png(self, name: str) -> bool:
        return (self.output / "results" / f"{name}.png").read_bytes()[:8] == PNG


DECLARED: Dict[str, Smoke] = {}


def smoke(
    name: str,
    runs: Sequence[Sequence[str]],
    renders: Sequence[Sequence[str]] = (),
    prepare: Optional[Callable[[Path], Sequence[str]]] = None,
) -> str:
    """Declare a smoke run (at import, so that the session knows them all); returns its name."""
    DECLARED[name] = Smoke(name, tuple(map(tuple, runs)), tuple(map(tuple, renders)), prepare)
    return name


def perform(declared: Smoke, output: Path, hosts: ForkHosts) -> Outcome:
    output.mkdir(parents=True)
    more = list(declared.prepare(output)) if declared.prepare else []
    stdout = [
        run_bench(script, *arguments, *more, output=output, hosts=hosts).stdout for script, *arguments in declared.runs
    ]
    if declared.renders:
        if (output / "BENCHMARKS.md").exists():
            shutil.move(output / "BENCHMARKS.md", output / MEASURED)
        for script, *arguments in declared.renders:
            run_bench(script, *arguments, output=output, hosts=hosts)
    return Outcome(output, stdout)


class SmokeRuns:
    """Every declared smoke run, each in a folder under ``base``, run in children of ``hosts``. In a
    run of its own, all started at once, two at a time (the other core is free); in a worker of a
    run side by side, each when a test first asks for it, in that test (the other workers use the
    other cores already, and a test that waited for smokes queued before its own could pass the
    bound on a test's time)."""

    def __init__(self, base: Path, hosts: ForkHosts) -> None:
        self.base = base
        self.hosts = hosts
        self.pool: Optional[ThreadPoolExecutor] = None
        self.started: Dict[str, Future] = {}
        self.done: Dict[str, Outcome] = {}
        if not side_by_side():
            self.pool = ThreadPoolExecutor(max_workers=2)
            self.started = {
                name: self.pool.submit(perform, declared, base / name, self.hosts)
                for name, declared in DECLARED.items()
            }

    def outcome(self, name: str) -> Outcome:
        if self.pool is not None:
            return self.started[name].result()
        if name not in self.done:
            self.done[name] = perform(DECLARED[name], self.base / name, self.hosts)
        return self.done[name]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def results(output: Path, name: str) -> Dict[str, Any]:
    """The results file ``name`` a smoke run wrote."""
    return json.loads((output / "results" / f"{name}.json").read_text(encoding="utf-8"))


def section(output: Path, key: str, file: str = "BENCHMARKS.md") -> str:
    """The text of section ``key`` of BENCHMARKS.md (or ``file``) under ``output``."""
    text = (output / file).read_text(encoding="utf-8")
    start, end = f"<!-- {key} start -->", f"<!-- {key} end -->"
    assert start in text and end in text, f"no section {key} in {output / file}"
    return text[text.index(start) + len(start) : text.index(end)]
