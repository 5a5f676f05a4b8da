"""The table of the heaviest tests that CONTRIBUTING.md keeps, from a run's ``--time-log``, and how
the run's workers shared the time:

    .venv/bin/python -m pytest -q --time-log /tmp/times.tsv
    .venv/bin/python scripts/heaviest_tests.py /tmp/times.tsv [--top 20] [--groups]

Wall time is the test's own (setup, call and teardown, its worker busy with it); CPU time is its
worker's and that of the processes it waited for (a Ray cluster's processes are not among them).
A worker's idle time at the end is how long it waited, its tests done, for the last worker to end.
``--groups`` lists the groups a worker takes whole (tests/suite_plugin.py), longest first: what the
plugin's ``LONGEST_FIRST`` is made from.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple

PLUGIN = Path(__file__).resolve().parents[1] / "tests" / "suite_plugin.py"


class Row(NamedTuple):
    """One test of a ``--time-log`` file: its wall and CPU seconds, its worker and when it began
    (seconds since the epoch)."""

    test: str
    wall: float
    cpu: float
    worker: str
    began: float


def read_log(path: Path) -> List[Row]:
    """The rows of a ``--time-log`` file."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) != 5:
            raise SystemExit(f"{path}, line {number}: {len(fields)} fields, not 5 (test, wall, CPU, worker, began)")
        test, wall, cpu, worker, began = fields
        rows.append(Row(test, float(wall), float(cpu), worker, float(began)))
    return rows


def table(rows: List[Row], top: int) -> str:
    """A Markdown table of the ``top`` tests by wall time, then the totals."""
    lines = ["| test | wall s | CPU s |", "|---|---:|---:|"]
    for row in sorted(rows, key=lambda row: -row.wall)[:top]:
        lines.append(f"| `{row.test.removeprefix('tests/')}` | {row.wall:.0f} | {row.cpu:.0f} |")
    wall, cpu = sum(row.wall for row in rows), sum(row.cpu for row in rows)
    lines.append(f"| all {len(rows)} tests, summed over the workers | {wall:.0f} | {cpu:.0f} |")
    return "\n".join(lines)


def workers(rows: List[Row]) -> Dict[str, Dict[str, float]]:
    """Per worker: its tests, their wall and CPU seconds, and its idle seconds at the end (from
    its last test's end to the last end of any worker's)."""
    ends: Dict[str, float] = {}
    summary: Dict[str, Dict[str, float]] = {}
    for row in rows:
        figures = summary.setdefault(row.worker, {"tests": 0, "wall": 0.0, "cpu": 0.0})
        figures["tests"] += 1
        figures["wall"] += row.wall
        figures["cpu"] += row.cpu
        ends[row.worker] = max(ends.get(row.worker, row.began), row.began + row.wall)
    last = max(ends.values())
    for worker, figures in summary.items():
        figures["idle_at_end"] = last - ends[worker]
    return summary


def workers_table(rows: List[Row]) -> str:
    lines = ["| worker | tests | wall s | CPU s | idle at the end, s |", "|---|---:|---:|---:|---:|"]
    for worker, figures in sorted(workers(rows).items()):
        lines.append(
            f"| {worker} | {figures['tests']:.0f} | {figures['wall']:.0f} | {figures['cpu']:.0f} | "
            f"{figures['idle_at_end']:.0f} |"
        )
    return "\n".join(lines)


def group_of_file() -> Callable[[str], str]:
    """The suite plugin's ``group_of_file``, read from tests/suite_plugin.py (not a package)."""
    spec = importlib.util.spec_from_file_location("suite_plugin", PLUGIN)
    plugin = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(plugin)  # type: ignore[union-attr]
    return plugin.group_of_file


def groups(rows: List[Row], group_of: Callable[[str], str]) -> List[tuple]:
    """(group, wall seconds summed over its tests), longest first."""
    walls: Dict[str, float] = {}
    for row in rows:
        group = group_of(Path(row.test.split("::", 1)[0]).name)
        walls[group] = walls.get(group, 0.0) + row.wall
    return sorted(walls.items(), key=lambda item: -item[1])


def groups_table(rows: List[Row]) -> str:
    lines = ["| group | wall s |", "|---|---:|"]
    lines += [f"| {group} | {wall:.0f} |" for group, wall in groups(rows, group_of_file())]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="the file a run's --time-log wrote")
    parser.add_argument("--top", type=int, default=20, help="how many tests the table lists")
    parser.add_argument("--groups", action="store_true", help="also list the groups, longest first")
    args = parser.parse_args()
    rows = read_log(args.log)
    print(table(rows, args.top))
    print()
    print(workers_table(rows))
    if args.groups:
        print()
        print(groups_table(rows))


if __name__ == "__main__":
    main()
