"""The numbers the docs promise, read from the table in docs/promises.md: a test holds the code to
a promise at the figure written there (``promised("parity")``), never at a number of its own, so a
page and its test cannot drift apart."""

import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, NamedTuple, Tuple

TABLE = Path(__file__).resolve().parents[1] / "docs" / "promises.md"
MEASURED = "measured:"  # a row's "checked by" for a record of a run elsewhere (another machine, a GPU)
UNITS = {"": 1.0, "%": 0.01, "GiB": float(2**30)}
WRITTEN = re.compile(r"(\d[\d,]*(?:\.\d+)?(?:e-\d+)?) ?(%|GiB)?")


class Promise(NamedTuple):
    name: str
    figure: str  # as the pages write it: "2e-6", "0.9999", "20,000", "25%", "2 GiB"
    pages: Tuple[str, ...]  # README.md or docs/PAGE.md, relative to the repository
    what: str
    checked_by: str  # a test file that calls promised(name), or "measured: COMMAND, MACHINE"

    @property
    def value(self) -> float:
        """The figure as a number: thousands' commas dropped, a per cent as a fraction, GiB in bytes."""
        written = WRITTEN.fullmatch(self.figure)
        assert written, f"{self.name}: {self.figure!r} is not a figure"
        return float(written[1].replace(",", "")) * UNITS[written[2] or ""]

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
