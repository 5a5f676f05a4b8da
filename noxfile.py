"""What the default test run leaves out, each in a virtual environment of its own (outside the
repository: ``$SPACY_ELMO_NOX_DIR``, default ``~/.cache/spacy-elmo-nox``).

    nox -s matrix      # heavy matrices run once: an empty venv's install, every kernel cap (pytest -m matrix)
    nox -s serve       # a user's `pip install ".[serve]"`: no Ray, and the one-process service's tests pass
    nox -s compat      # the compatibility matrix: Python, torch, spaCy and numpy versions -> docs/compatibility.md
    nox -s "compat(py3.11, torch 2.15.0)"   # one row of it

The default run (`pytest -q`, what .ci/run runs) keeps a lighter check of each of these promises.
"""

import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["matrix"]
nox.options.envdir = os.environ.get("SPACY_ELMO_NOX_DIR", str(Path.home() / ".cache" / "spacy-elmo-nox"))
# The torch release the CPU-only CI installs; on other Pythons and releases torch is a CUDA build of
# several GB that runs on the CPU.
CI_TORCH = "2.13.0"
# The highest torch pip takes on the developers' machines, whose site-wide pip configuration caps it.
PIP_CAP = "2.14.1"


def release(version: str) -> tuple:
    return tuple(int(part) for part in version.split("+")[0].split("."))


def interpreter(version: str) -> str:
    """The newest pyenv Python of ``version`` where pyenv has one, else ``pythonX.Y`` on PATH."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(versions.glob(f"{version}.*"), key=lambda p: [int(part) for part in p.name.split(".")])
    return str(found[-1] / "bin" / f"python{version}") if found else f"python{version}"


# One row each: Python, torch, and a spaCy or numpy other than the newest a row's pip would take.
# The lowest torch is the lowest that passed, released at least two years before the matrix ran.
# Python 3.9 (past its end of life) failed to install: pip takes spaCy 3.8's newest release as a
# source archive there, whose build needs a thinc that needs Python 3.10 (docs/compatibility.md).
COMPAT: List[Dict[str, Optional[str]]] = [
    {"python": "3.10", "torch": "2.14.1"},  # torch 2.15.0 has no build for Python 3.10
    {"python": "3.11", "torch": "2.5.1"},
    {"python": "3.11", "torch": "2.9.1"},
    {"python": "3.11", "torch": CI_TORCH},
    {"python": "3.11", "torch": "2.14.1"},
    {"python": "3.11", "torch": "2.15.0"},
    {"python": "3.12", "torch": "2.15.0"},
    {"python": "3.13", "torch": "2.15.0"},
    {"python": "3.11", "torch": CI_TORCH, "spacy": "3.7.5"},
    {"python": "3.11", "torch": CI_TORCH, "numpy": "1.26.4"},
]


def row_id(row: Dict[str, Optional[str]]) -> str:
    extra = "".join(f", {name} {row[name]}" for name in ("spacy", "numpy") if row.get(name))
    return f"py{row['python']}, torch {row['torch']}{extra}"


def file_id(row: Dict[str, Optional[str]]) -> str:
    return row_id(row).replace(", ", "-").replace(" ", "")


@nox.session(python="3.11")
def matrix(session: nox.Session) -> None:
    """The tests marked `matrix`: a venv made from nothing installs spacy-elmo with its dependencies,
    the parity, invariance and precision tests pass with the kernels capped at each lesser CPU
    class this CPU can simulate (caps above it are skipped with the reason), and every GPU kernel
    compiles for an H100 (no GPU needed)."""
    session.install(f"torch=={CI_TORCH}")  # the CPU build first, so nothing pulls CUDA wheels
    session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", "-q", "-rs", "-m", "matrix", *session.posargs)


@nox.session(python="3.11")
def serve(session: nox.Session) -> None:
    """A user's `pip install ".[serve]"` in a venv made from nothing (torch first): Ray is not
    installed, and the one-process service's tests pass (tests/test_serve.py, test_serve_extras.py;
    the Ray engine's skip), with only what the serve extra brings beside the tests' own tools."""
    session.install(f"torch=={CI_TORCH}")  # the CPU build first, so nothing pulls CUDA wheels
    session.install(".[serve]", "pytest>=7", "pytest-xdist>=3.5", "httpx>=0.27", "hypothesis>=6", "openai>=1.40")
    no_ray = "import importlib.util, sys; sys.exit('ray is installed' if importlib.util.find_spec('ray') else 0)"
    session.run("python", "-c", no_ray)
    tests = ["tests/test_serve.py", "tests/test_serve_extras.py", "tests/test_serve_signals.py"]
    session.run("python", "-m", "pytest", "-q", "-rs", "-n", "0", *tests, *session.posargs)


@nox.session
@nox.parametrize(
    "python, torch, spacy, numpy",
    [nox.param(interpreter(r["python"]), r["torch"], r.get("spacy"), r.get("numpy"), id=row_id(r)) for r in COMPAT],
)
def compat(session: nox.Session, torch: str, spacy: Optional[str], numpy: Optional[str]) -> None:
    """A user's install: torch first, then spacy-elmo (`pip install ".[h5]"`), then the tests that
    exercise everything torch-dependent; the row goes to bench/results/compat/ and docs/compatibility.md.
    The venv (several GB with a CUDA build of torch) is removed afterwards."""
    row = next(
        r
        for r in COMPAT
        if (interpreter(r["python"]), r["torch"], r.get("spacy"), r.get("numpy"))
        == (session.python, torch, spacy, numpy)
    )
    env = {"PIP_NO_CACHE_DIR": "1"}  # wheels of GBs: not kept twice
    if release(torch) > release(PIP_CAP):  # a site-wide pip constraint here caps torch: lifted for this row
        env["PIP_CONFIG_FILE"] = os.devnull
    session.install(f"torch=={torch}", env=env)
    # spaCy 3.7's CLI imports click, which today's typer no longer brings: a spaCy 3.7 environment has it
    pins = [f"spacy=={spacy}", "click"] if spacy else []
    pins += [f"numpy=={numpy}"] if numpy else []
    session.install(".[h5]", *pins, "pytest>=7", "pytest-xdist>=3.5", "matplotlib>=3.5", env=env)
    ids = ",".join(file_id(r) for r in COMPAT)
    try:
        session.run("python", "scripts/compat_report.py", file_id(row), *session.posargs, env={"COMPAT_IDS": ids})
    finally:
        if not os.environ.get("SPACY_ELMO_NOX_KEEP"):
            shutil.rmtree(session.virtualenv.location, ignore_errors=True)
