"""The numbers the docs promise, read from the table in docs/promises.md: a test holds the code to
a promise at the figure written there (``promised("parity")``), never at a number of its own, so a
page and its test cannot drift apart."""

from functools import lru_cache
from pathlib import Path
from typing import Dict, NamedTuple, Tuple

TABLE = Path(__file__).resolve().parents[1] / "docs" / "promises.md"
MEASURED = "measured:"  # a row's "checked by" for a record of a run elsewhere (another machine, a GPU)


class Promise(NamedTuple):
    name: str
    figure: str  # as the pages write it: "2e-6", "0.9999"
    pages: Tuple[str, ...]  # README.md or docs/PAGE.md, relative to the repository
    what: str
    checked_by: str  # a test file that calls promised(name), or "measured: COMMAND, MACHINE"

    @property
    def value(self) -> float:
        return float(self.figure)

    @property
    def measured(self) -> bool:
        return self.checked_by.startswith(MEASURED)


@lru_cache(maxsize=1)
def promises() -> Dict[str, Promise]:
    """The table's rows by name (rows are lines whose first cell is a name in backticks)."""
    rows = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        name, figure, pages, what, checked_by = cells
        pages_named = tuple(page.strip().strip("`") for page in pages.split(","))
        rows[name.strip("`")] = Promise(name.strip("`"), figure, pages_named, what, checked_by.replace("`", ""))
    return rows


def promised(name: str) -> float:
    """The figure docs/promises.md gives for the promise ``name``."""
    return promises()[name].value
