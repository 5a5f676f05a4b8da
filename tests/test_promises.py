"""docs/promises.md is the one list of the numbers README.md and docs/ promise: every such figure on a
page is in it, every row is on its pages, and every promise is read by the test that checks it
(tests/promises.py), so a test holds the code to the figure the docs write, not to its own."""

import re
from pathlib import Path

import pytest
from promises import TABLE, promises

ROOT = Path(__file__).resolve().parents[1]
# What a precision promise looks like: a power-of-ten tolerance (2e-6, 4.9e-4) or a cosine near one
FIGURE = re.compile(r"(?<![\w.])(\d(?:\.\d+)?e-\d+|0\.99\d+)(?![\w.]*\d)")
# ... and a bound: "at most 20,000", "at least 25%", "at most 2 GiB" (a tolerance above is caught above)
BOUND = re.compile(r"\bat (?:most|least) (\d[\d,]*(?:\.\d+)?)(?!e-|\.?\d)( ?(?:%|GiB))?")


def pages():
    return [ROOT / "README.md", *sorted(page for page in (ROOT / "docs").glob("*.md") if page != TABLE)]


def prose(page: Path):
    """The page's lines outside code blocks and tables (tables there are measured results, by run)."""
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.lstrip().startswith("|"):
            yield line


def figures_on(page: Path):
    found = set()
    for line in prose(page):
        found.update(FIGURE.findall(line))
        found.update(number + unit for number, unit in BOUND.findall(line))
    return sorted(found)


def says(page: Path, figure: str) -> bool:
    written = re.compile(r"(?<![\w.])" + re.escape(figure) + r"(?!\w|\.\d)")
    return any(written.search(line) for line in prose(page))


def name_of(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_table_has_rows_and_every_figure_reads_as_a_number():
    rows = promises()
    assert len(rows) >= 10, f"docs/promises.md's table was not read: {sorted(rows)}"
    for row in rows.values():
        assert row.value > 0 and row.pages and row.what and row.checked_by, row


@pytest.mark.parametrize("page", pages(), ids=name_of)
def test_every_figure_a_page_promises_is_in_the_table(page):
    listed = {row.figure for row in promises().values() if name_of(page) in row.pages}
    missing = [figure for figure in figures_on(page) if figure not in listed]
    assert not missing, f"{name_of(page)} gives {missing}: add each to docs/promises.md with the test that checks it"


@pytest.mark.parametrize("name", sorted(promises()))
def test_every_row_is_written_on_its_pages_and_checked(name):
    row = promises()[name]
    for page in row.pages:
        assert says(ROOT / page, row.figure), f"{page} does not say {row.figure} ({name})"
    if row.measured:
        assert "python" in row.checked_by or "spacy project" in row.checked_by, f"{name}: measured by what command?"
        return
    test_file = ROOT / row.checked_by
    assert test_file.is_file(), f"{name}: no test file {row.checked_by}"
    assert f'promised("{name}")' in test_file.read_text(encoding="utf-8"), f"{row.checked_by} never reads {name}"
