"""scripts/install.sh installs again only where setup.py, pyproject.toml or itself changed, and
compiles the package's sources each time. Run in a copy of those files whose .venv/bin/python is a
script that logs what it is asked to run (no pip, no network)."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOGGING_PYTHON = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls.log"
case "$*" in *"pip install -q -e"*) [ -f "$(dirname "$0")/../fail-install" ] && exit 1 ;; esac
exit 0
"""


@pytest.fixture
def clone(tmp_path):
    """setup.py, pyproject.toml and scripts/install.sh as in the clone, and a logging .venv/bin/python."""
    for name in ("setup.py", "pyproject.toml", "scripts/install.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(LOGGING_PYTHON, encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def install(clone: Path) -> tuple:
    """Run install.sh; return its exit status and the commands it gave python, in order."""
    log = clone / ".venv" / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=clone, capture_output=True, text=True, timeout=60)
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return done.returncode, calls


def pip_calls(calls: list) -> list:
    return [call for call in calls if call.startswith("-m pip")]


def test_a_second_run_installs_nothing_and_a_change_to_setup_py_installs_again(clone):
    status, calls = install(clone)
    assert status == 0
    assert pip_calls(calls) == [
        "-m pip install -q --upgrade pip",
        "-m pip install -q torch==2.13.0",
        "-m pip install -q -e .[dev]",
    ]
    assert calls[-1] == "-m compileall -q spacy_elmo training"
    status, calls = install(clone)
    assert (status, calls) == (0, ["-m compileall -q spacy_elmo training"])
    with open(clone / "setup.py", "a", encoding="utf-8") as setup:
        setup.write("\n# a new requirement\n")
    status, calls = install(clone)
    assert status == 0 and len(pip_calls(calls)) == 3


def test_a_failed_install_is_tried_again_by_the_next_run(clone):
    (clone / ".venv" / "fail-install").touch()
    status, calls = install(clone)
    assert status != 0 and pip_calls(calls)[-1] == "-m pip install -q -e .[dev]"
    os.remove(clone / ".venv" / "fail-install")
    status, calls = install(clone)
    assert status == 0 and len(pip_calls(calls)) == 3
