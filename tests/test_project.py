"""The spaCy project workflow, end to end on a tiny configuration (a slice of the built-in text,
the tiny preset, a few steps), in a copy of the project so the checkout stays clean."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import spacy

from spacy_elmo import load_bilm
from training.vocab import Vocabulary

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_workflow_all_on_a_tiny_configuration(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "project.yml", project)
    shutil.copytree(ROOT / "training", project / "training", ignore=shutil.ignore_patterns("__pycache__"))
    tiny = ["--vars.text_docs=12", "--vars.preset=tiny", "--vars.max_steps=4", "--vars.max_minutes=0", "--vars.vocab_size=800"]
    result = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "all", str(project), *tiny], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    manifest = json.loads((project / "corpus" / "manifest.json").read_text())
    assert all(manifest["splits"][split]["sentences"] > 0 for split in ("train", "dev", "test"))
    assert len(Vocabulary.load(project / "corpus" / "vocab.txt")) == 800
    assert load_bilm(project / "runs" / "elmo" / "bilm").config.projection_dim == 16
    perplexity = json.loads((project / "metrics" / "perplexity.json").read_text())
    assert perplexity["perplexity"] > 1 and perplexity["unigram_perplexity"] > 1
    nlp = spacy.load(project / "pipelines" / "elmo")
    assert nlp.pipe_names == ["sentencizer", "elmo"] and nlp("Works. Twice.")._.elmo_data.shape == (3, 4, 32)
    assert list((project / "packages").glob("en_elmo_sample-0.0.1/dist/*.whl"))
    demo = (project / "metrics" / "demo.txt").read_text()
    assert "Loaded en_elmo_sample" in demo and "sentence similarities" in demo

    again = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "all", str(project), *tiny], capture_output=True, text=True)
    assert again.returncode == 0
    assert again.stdout.count("Skipping") >= 6, "finished steps are skipped on a rerun"
