"""The table of the heaviest tests that CONTRIBUTING.md keeps, from a run's ``--time-log``:

    .venv/bin/python -m pytest -q --time-log /tmp/times.tsv
    .venv/bin/python scripts/heaviest_tests.py /tmp/times.tsv [--top 20]

Wall time is the test's own (setup, call and teardown, its worker busy with it); CPU time is its
worker's and that of the processes it waited for (a Ray cluster's processes are not among them).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Tuple


def read_log(path: Path) -> List[Tuple[str, float, float]]:
    """(test, wall s, CPU s) per row of a ``--time-log`` file."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        test, wall, cpu = line.split("\t")
        rows.append((test, float(wall), float(cpu)))
    return rows


def table(rows: List[Tuple[str, float, float]], top: int) -> str:
    """A Markdown table of the ``top`` tests by wall time, then the totals."""
    lines = ["| test | wall s | CPU s |", "|---|---:|---:|"]
    for test, wall, cpu in sorted(rows, key=lambda row: -row[1])[:top]:
        lines.append(f"| `{test.removeprefix('tests/')}` | {wall:.0f} | {cpu:.0f} |")
    wall, cpu = sum(row[1] for row in rows), sum(row[2] for row in rows)
    lines.append(f"| all {len(rows)} tests, summed over the workers | {wall:.0f} | {cpu:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="the file a run's --time-log wrote")
    parser.add_argument("--top", type=int, default=20, help="how many tests the table lists")
    args = parser.parse_args()
    print(table(read_log(args.log), args.top))


if __name__ == "__main__":
    main()
