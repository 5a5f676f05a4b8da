import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from conftest import make_nlp

LINES = ["The first line .", "", "A second line, with more tokens in it.", "The first line ."]


@pytest.fixture(scope="module")
def pipeline(tiny_weights, tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline") / "elmo-pipeline"
    make_nlp(tiny_weights, sentencizer=False).to_disk(path)
    return path


def run_embed(*args):
    result = subprocess.run([sys.executable, "-m", "spacy_elmo", "embed", *map(str, args)], capture_output=True, text=True)
    result.stdout = " ".join(result.stdout.split())  # messages wrap at the terminal width
    return result


@pytest.mark.parametrize("layers", ["all", "top", "average"])
def test_embed_writes_one_dataset_per_line(tmp_path, pipeline, layers):
    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = run_embed(source, tmp_path / "out.hdf5", "--pipeline", pipeline, "--layers", layers)
    assert result.returncode == 0, result.stdout + result.stderr
    nlp = spacy.load(pipeline)
    with h5py.File(tmp_path / "out.hdf5", "r") as output:
        assert sorted(output.keys(), key=lambda k: (len(k), k)) == ["0", "1", "2", "3", "sentence_to_index"]
        index = json.loads(output["sentence_to_index"][()])
        assert index == {"The first line .": "3", "": "1", "A second line, with more tokens in it.": "2"}
        for i, line in enumerate(LINES):
            data = nlp(line)._.elmo_data
            expected = {"all": data, "top": data[-1], "average": data.mean(axis=0)}[layers]
            np.testing.assert_allclose(output[str(i)][...], expected, rtol=0, atol=1e-7)
    assert not list(tmp_path.glob(".out.hdf5.*")), "no temporary file left behind"


def test_embed_pretokenized_lines(tmp_path, pipeline):
    source = tmp_path / "input.txt"
    source.write_text("don't split me\n", encoding="utf-8")
    assert run_embed(source, tmp_path / "out.hdf5", "-p", pipeline, "--tokenized").returncode == 0
    nlp = spacy.load(pipeline)
    with h5py.File(tmp_path / "out.hdf5", "r") as output:
        assert output["0"].shape == (3, 3, 32)
        np.testing.assert_array_equal(output["0"][...], nlp(Doc(nlp.vocab, words=["don't", "split", "me"]))._.elmo_data)


def test_embed_reports_problems(tmp_path, pipeline):
    missing = run_embed(tmp_path / "nothing.txt", tmp_path / "out.hdf5", "-p", pipeline)
    assert missing.returncode == 1 and "nothing.txt: file not found" in missing.stdout
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    bad = run_embed(tmp_path / "latin1.txt", tmp_path / "out.hdf5", "-p", pipeline)
    assert bad.returncode == 1 and "is not valid UTF-8" in bad.stdout
    spacy.blank("en").to_disk(tmp_path / "blank")
    (tmp_path / "ok.txt").write_text("fine\n")
    no_elmo = run_embed(tmp_path / "ok.txt", tmp_path / "out.hdf5", "-p", tmp_path / "blank")
    assert no_elmo.returncode == 1 and "has no 'elmo' component" in no_elmo.stdout
    assert not (tmp_path / "out.hdf5").exists()
