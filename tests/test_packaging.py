"""`spacy package` builds a wheel that installs into a fresh virtual environment and loads."""
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import make_nlp

ROOT = Path(__file__).resolve().parents[1]


def run(*command, **kwargs):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_packaged_pipeline_installs_and_loads(tiny_weights, tmp_path):
    nlp = make_nlp(tiny_weights)
    nlp.meta["name"] = "elmo_tiny_test"
    nlp.meta["version"] = "0.0.1"
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "packages").mkdir()
    run(sys.executable, "-m", "spacy", "package", tmp_path / "pipeline", tmp_path / "packages", "--build", "wheel", "--force")
    (wheel,) = (tmp_path / "packages").glob("*/dist/*.whl")
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "torch==2.13.0")
    run(python, "-m", "pip", "install", "-q", ROOT)
    run(python, "-m", "pip", "install", "-q", wheel)
    check = (
        "import spacy\n"
        "nlp = spacy.load('en_elmo_tiny_test')\n"
        "doc = nlp('The packaged pipeline runs. It has sentences.')\n"
        "print(doc._.elmo_data.shape, len(list(doc.sents)), doc[1].vector.shape)\n"
    )
    assert run(python, "-c", check, cwd=tmp_path).strip() == "(3, 9, 32) 2 (32,)"
