"""docs/promises.md is the one list of the numbers README.md, docs/ and the package's own strings
(docstrings, errors, CLI help) promise: every such figure is in it, every row is on its pages, and
every promise is read by the test that checks it (tests/promises.py), so a test holds the code to the
figure the docs write, not to its own."""

import ast
import re
from pathlib import Path

import pytest
from promises import TABLE, promises

ROOT = Path(__file__).resolve().parents[1]
# What a precision promise looks like: a power-of-ten tolerance (2e-6, 4.9e-4) or a cosine near one
FIGURE = re.compile(r"(?<![\w.])(\d(?:\.\d+)?e-\d+|0\.99\d+)(?![\w.]*\d)")
# ... and a bound: "at most 20,000", "at least 25%", "at most 2 GiB" (a tolerance above is caught above)
BOUND = re.compile(r"\bat (?:most|least) ((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?!e-|\.?\d)( ?(?:%|GiB))?")
# ... and a plain decimal or share a few words after a bound: "within 0.03", "within 1% of", ">= 0.5"
NEAR = re.compile(
    r"(?:\bwithin|\bat most|\bat least|>=|<=|≥|≤)\W+(?:[A-Za-z]+\W+){0,3}?"
    r"(\d(?:\.\d+)?e-\d+|\d+\.\d+(?: ?%)?|\d+ ?%)(?![\w.]*\d)"
)
# A table whose header speaks of these holds promises; other tables are measured results, by run.
PROMISING_HEADER = re.compile(r"cosine|error|toleran|within|relative|differ", re.IGNORECASE)
SOURCES = ("spacy_elmo", "training")


def pages():
    return [ROOT / "README.md", *sorted(page for page in (ROOT / "docs").glob("*.md") if page != TABLE)]


def sources():
    return sorted(path for folder in SOURCES for path in (ROOT / folder).rglob("*.py"))


def prose(page: Path):
    """What a page says: a module's string literals (docstrings, errors, help), or a Markdown page's
    lines outside code blocks and tables, and the rows of tables whose header speaks of errors,
    tolerances or cosines."""
    if page.suffix == ".py":
        tree = ast.parse(page.read_text(encoding="utf-8"))
        yield from (
            node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
        )
        return
    fenced, header = False, None
    for line in page.read_text(encoding="utf-8").splitlines():
        in_table = line.lstrip().startswith("|")
        header = (header or line) if in_table else None
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (not in_table or PROMISING_HEADER.search(header or "")):
            yield line


def figures_in(text: str, counts: bool = True):
    """The figures ``text`` promises; ``counts``: whole numbers after a bound too (a page's "at most
    20,000"; a module's "at least 5 rounds" describes what the code does, not a number it promises)."""
    found = set(FIGURE.findall(text)) | set(NEAR.findall(text))
    return found | ({number + unit for number, unit in BOUND.findall(text)} if counts else set())


def figures_on(page: Path):
    return sorted(figure for line in prose(page) for figure in figures_in(line, counts=page.suffix != ".py"))


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


@pytest.mark.parametrize("source", sources(), ids=name_of)
def test_every_figure_the_package_prints_is_in_the_table(source):
    """A module's docstrings, errors and help are pages too: a figure there is a row naming the module."""
    listed = {row.figure for row in promises().values() if name_of(source) in row.pages}
    missing = [figure for figure in figures_on(source) if figure not in listed]
    assert not missing, f"{name_of(source)} prints {missing}: add each to docs/promises.md with the test that checks it"


def test_a_figure_is_found_in_a_docstring_an_error_a_table_and_beside_a_bound(pytester):
    """The scan finds what issue 66 found escaping it: a decimal after "within", a cosine in an error
    message, a tolerance in a docstring, a promise in a table."""
    module = pytester.makepyfile(
        precision_text='''
        """Within about 1e-3 of fp32."""
        def check():
            raise ValueError("bf16 is within 0.03 of fp32; int8 has cosine per token >= 0.9996")
        '''
    )
    assert figures_on(module) == ["0.03", "0.9996", "1e-3"]
    page = pytester.makefile(".md", page="| precision | max abs error |\n|---|---|\n| int8 | 0.05 within 2% |\n")
    assert figures_on(page) == ["2%"]
    assert figures_in("every value within 0.03 of fp32") == {"0.03"}
    assert figures_in("a cosine of at least 0.9999") == {"0.9999"}


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
    assert f'promised("{name}")' in text_with_helpers(test_file), f"{row.checked_by} never reads {name}"


def text_with_helpers(test_file: Path) -> str:
    """A test file's text with that of the helper modules of tests/ it imports (``close_to_fp32``)."""
    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    helpers = [test_file.parent / f"{module}.py" for module in sorted(imported)]
    return "\n".join(path.read_text(encoding="utf-8") for path in [test_file, *helpers] if path.is_file())
