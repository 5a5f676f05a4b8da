"""Measuring raw against centred vectors (spacy_elmo.training.downstream.centering), its RESULTS.md section, and
pipelines assembled with a centering corpus (spacy_elmo.training.packaging.assemble)."""

import json

import numpy as np
import pytest
import spacy
from conftest import SHARED
from typer.testing import CliRunner

from spacy_elmo.training.corpus import ShardWriter

DATA = SHARED / "data"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Corpus shards of real text (spaCy-tokenized valid.txt paragraphs)."""
    folder = tmp_path_factory.mktemp("corpus") / "train"
    writer = ShardWriter(folder, 200)
    nlp = spacy.blank("en")
    for line in (DATA / "corpus" / "valid.txt").read_text().splitlines()[:150]:
        if line.strip():
            writer.add([t.text for t in nlp.make_doc(line.strip()) if not t.is_space])
    writer.flush()
    return folder


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The first lines of the shared WiC and word-similarity files, in the shared layout."""
    folder = tmp_path_factory.mktemp("data")
    for name, lines in (
        ("wic/dev.data.txt", 60),
        ("wic/dev.gold.txt", 60),
        ("wic/test.data.txt", 60),
        ("wic/test.gold.txt", 60),
        ("word-similarity/EN-MEN-TR-3k.txt", 80),
        ("word-similarity/EN-WS-353-ALL.txt", 80),
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("\n".join((DATA / name).read_text().splitlines()[:lines]) + "\n")
    return folder


def test_assembled_pipeline_is_centred_on_its_corpus(tiny_weights, shards, tmp_path):
    from spacy_elmo.training.corpus import read_sentences
    from spacy_elmo.training.packaging.assemble import assemble

    nlp = assemble(tiny_weights, tmp_path / "pipeline", centering_corpus=shards)
    centering = spacy.load(tmp_path / "pipeline").get_pipe("elmo").centering
    assert centering is not None and centering.tokens == sum(len(s) for s in read_sentences(shards))
    assert spacy.load(tmp_path / "pipeline").get_pipe("elmo").settings.center_vectors, "the corpus turns it on"
    np.testing.assert_array_equal(centering.mean, nlp.get_pipe("elmo").centering.mean)
    with pytest.raises(ValueError, match="no shard-"):
        assemble(tiny_weights, tmp_path / "other", centering_corpus=tmp_path)


def test_centering_measures_raw_against_centred_and_reports_it(tiny_weights, shards, small_data, tmp_path, monkeypatch):
    import typer

    from spacy_elmo.training.downstream import centering, report, wic
    from spacy_elmo.training.packaging.assemble import assemble

    assemble(tiny_weights, tmp_path / "pipeline")
    monkeypatch.chdir(tmp_path)
    app = typer.Typer()
    app.command()(centering.main)
    sets = ["MEN=word-similarity/EN-MEN-TR-3k.txt", "WS-353=word-similarity/EN-WS-353-ALL.txt"]
    arguments = ["--elmo", "pipeline", "--data", str(small_data), "--text", str(shards), "--plot", "centering.png"]
    arguments += ["--directions", "1", "--directions", "2", *(x for s in sets for x in ("--sets", s))]
    arguments += ["--note", "a biLM of random weights"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    found = json.loads((tmp_path / "metrics" / "downstream" / "centering.json").read_text())
    names = ["raw", "mean removed", "mean and top 1 removed", "mean and top 2 removed"]
    assert list(found["wic"]) == names and list(found["similarity"]) == ["MEN", "WS-353"]
    kinds = ["layer 0", "layer 1", "layer 2", "mix: average"]
    assert all(list(found["anisotropy"][name]) == kinds for name in names)
    for kind in kinds:
        assert abs(found["anisotropy"]["mean removed"][kind]) < found["anisotropy"]["raw"][kind]
    app = typer.Typer()
    app.command()(wic.main)
    assert CliRunner().invoke(app, ["--elmo", "pipeline", "--data", str(small_data)]).exit_code == 0
    plain = json.loads((tmp_path / "metrics" / "downstream" / "wic.json").read_text())
    for kind in kinds:
        assert found["wic"]["raw"][kind] == plain[kind], "raw is what the wic step measures"
    assert (tmp_path / "centering.png").stat().st_size > 10000
    section = report.centering_section(found, tmp_path / "centering.png", tmp_path)
    average = found["wic"]["mean removed"]["mix: average"]
    assert f"| mean removed | {found['anisotropy']['mean removed']['mix: average']:.3f} | " in section
    assert f"{100 * average['dev_accuracy']:.1f} | {100 * average['test_accuracy']:.1f} |" in section
    assert "![raw against centred](centering.png)" in section
    assert f"Vectors from {report._shown(found['pipeline'])}: a biLM of random weights" in section
