"""What setup.py declares is what the compatibility matrix verified (noxfile.py `nox -s compat`, its rows
in bench/results/compat/ and docs/compatibility.md), and the README says the same."""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "bench" / "results" / "compat"


def release(version: str) -> tuple:
    return tuple(int(part) for part in re.match(r"[\d.]+", version).group().strip(".").split("."))


def declared() -> dict:
    """setup.py's python_requires and install_requires, read from its source."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(
        node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup"
    )
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    requires = {}
    for item in ast.literal_eval(keywords["install_requires"]):
        name, bounds = re.match(r"([A-Za-z0-9_.-]+)(.*)", item).groups()
        requires[name.lower()] = dict(re.findall(r"(>=|<=|<|>|==)\s*([\w.]+)", bounds))
    return {"python": ast.literal_eval(keywords["python_requires"]), "requires": requires}


def matrix_rows():
    from noxfile import COMPAT, file_id

    return [(row, json.loads((ROWS / f"{file_id(row)}.json").read_text())) for row in COMPAT]


@pytest.fixture(scope="module")
def passed():
    try:
        rows = matrix_rows()
    except FileNotFoundError as missing:
        pytest.fail(f"a row of the matrix was never run ({missing.filename}): nox -s compat")
    return [(row, record) for row, record in rows if record["tests"]["failed"] == 0 and record["tests"]["passed"]]


def test_each_recorded_row_ran_the_versions_it_names():
    for row, record in matrix_rows():
        versions = record["versions"]
        assert versions["python"].startswith(row["python"] + "."), (row, versions)
        assert versions["torch"].split("+")[0] == row["torch"], (row, versions)
        for name in ("spacy", "numpy"):
            assert row.get(name) in (None, versions[name]), (row, versions)


def test_every_row_of_the_matrix_passed(passed):
    failing = sorted({json.dumps(row) for row, record in matrix_rows() if (row, record) not in passed})
    assert not failing, f"rows of noxfile.COMPAT that did not pass: {failing}; fix them, or leave them out of the range"


def test_the_lower_bounds_are_the_lowest_versions_that_passed(passed):
    bounds = declared()
    lowest = lambda name: min((record["versions"][name] for _, record in passed), key=release)  # noqa: E731
    assert bounds["python"] == ">=" + ".".join(lowest("python").split(".")[:2])
    for name in ("torch", "spacy", "thinc", "numpy"):
        minor = ".".join(lowest(name).split("+")[0].split(".")[:2])
        assert bounds["requires"][name][">="] == minor, f"{name}: setup.py says >= {bounds['requires'][name]['>=']}"


def test_torch_stays_open_below_the_next_major_while_the_newest_release_passes(passed):
    torch = declared()["requires"]["torch"]
    assert torch["<"] == "3"
    newest = max((record["versions"]["torch"] for _, record in passed), key=release)
    from noxfile import COMPAT

    assert release(newest) == max(release(row["torch"]) for row in COMPAT), "the newest torch in the matrix passed"


def test_the_table_in_the_docs_is_the_rows_recorded():
    import importlib.util

    spec = importlib.util.spec_from_file_location("compat_report", ROOT / "scripts" / "compat_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    from noxfile import COMPAT, file_id

    assert (ROOT / "docs" / "compatibility.md").read_text() == report.render([file_id(row) for row in COMPAT])


def test_the_readme_states_the_verified_ranges(passed):
    readme = " ".join((ROOT / "README.md").read_text().split())
    pythons = sorted({".".join(record["versions"]["python"].split(".")[:2]) for _, record in passed}, key=release)
    assert f"Python {pythons[0]} to {pythons[-1]}" in readme
    torch = declared()["requires"]["torch"]
    assert f"torch>={torch['>=']},<{torch['<']}" in readme
    assert "docs/compatibility.md" in readme


def test_every_page_that_names_a_torch_range_names_the_declared_one():
    """A range in the docs is setup.py's, so that a page cannot tell a user to install another."""
    import re

    torch = declared()["requires"]["torch"]
    declared_range = f"torch>={torch['>=']},<{torch['<']}"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {page.name: re.findall(r"torch[<>=!~][^`\s)]*", page.read_text()) for page in pages}
    named = {name: ranges for name, ranges in named.items() if ranges}
    assert "README.md" in named, named
    assert '--8<-- "README.md:install"' in (ROOT / "docs" / "index.md").read_text(), "the site shows README's"
    assert all(found == declared_range for ranges in named.values() for found in ranges), named
