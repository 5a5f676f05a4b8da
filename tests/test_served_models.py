"""Catalogue names end to end: an NLPL-layout bilm-tf zip, an ELMoForManyLangs zip and a model
trained on lemmas, each served from 127.0.0.1 and used by name through `embed --weights NAME` and
``add_pipe("elmo", config={"weights": NAME})``."""

import io
import json
import shutil
import zipfile

import numpy as np
import pytest
import spacy
from file_server import FileServer
from test_efml import write_handmade_model
from test_parity import as_directions, reference_top_layer
from typer.testing import CliRunner

from spacy_elmo import embed_sentences, import_original
from spacy_elmo.cli import app
from spacy_elmo.corpus.output_folder import EmbeddedCorpus
from spacy_elmo.hub.catalogue import BILM_TF, CATALOGUE, EFML, PublishedModel
from spacy_elmo.hub.download import RemoteFile
from spacy_elmo.weights.elmo_for_many_langs import import_efml

TOLERANCE = 1e-5
# Lemmas that spaCy's English lookup table gives for these words (spacy-lookups-data).
SURFACE = ["The", "cats", "were", "sitting", "on", "mats", "."]


def nlpl_zip(fixture_dir) -> bytes:
    """The fixture model as the NLPL repository zips its bilm-tf models: options.json (n_characters
    left at the training value 261, as bilm-tf writes it) and model.hdf5 at the root, meta.json and
    a README beside them, and no vocab.txt."""
    options = json.loads((fixture_dir / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 261
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("options.json", json.dumps(options))
        archive.write(fixture_dir / "lm_weights.hdf5", "model.hdf5")
        archive.writestr("meta.json", json.dumps({"id": 999, "algorithm": {"name": "ELMo"}}))
        archive.writestr("README", "NLPL repository model 999 (a test copy).")
    return buffer.getvalue()


def efml_zip(directory) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for item in directory.iterdir():
            archive.write(item, f"xx.model/{item.name}")
    return buffer.getvalue()


def entry(server, name, path, format, language="en", input_attr="ORTH"):
    return PublishedModel(
        name=name,
        language=language,
        format=format,
        files=(RemoteFile(server.url(path), path.rsplit("/", 1)[-1]),),
        trained_on="a test model",
        licence="test",
        citation="test",
        source="https://example.org/",
        input_attr=input_attr,
    )


@pytest.fixture
def served(fixture_dir, tmp_path, monkeypatch):
    """The three models in the catalogue, served from 127.0.0.1 into an empty cache."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    efml_dir = tmp_path / "efml"
    efml_dir.mkdir()
    write_handmade_model(efml_dir, word_dim=5)
    files = {"/repository/20/999.zip": nlpl_zip(fixture_dir), "/repository/11/998.zip": efml_zip(efml_dir)}
    with FileServer(files) as server:
        for model in (
            entry(server, "nlpl-test", "/repository/20/999.zip", BILM_TF),
            entry(server, "efml-test", "/repository/11/998.zip", EFML, language="xx"),
            entry(server, "nlpl-lemmas", "/repository/20/999.zip", BILM_TF, input_attr="LEMMA"),
        ):
            monkeypatch.setitem(CATALOGUE, model.name, model)
        yield {"efml": efml_dir, "server": server}


def run_embed(tmp_path, lines, *options):
    source, target = tmp_path / "input.txt", tmp_path / "vectors"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)  # a test may embed twice
    result = CliRunner().invoke(app, ["embed", str(source), str(target), "--tokenized", *options])
    assert result.exit_code == 0, result.output
    with EmbeddedCorpus(target) as output:
        return [output[index] for index in range(len(lines))]


def test_an_nlpl_zip_by_name_matches_the_original_biLM(served, fixture_dir, fixture_sentences, tmp_path):
    firsts = [stream[0] for stream in fixture_sentences]  # a sentence each, as the original ran them
    embedded = run_embed(tmp_path, [" ".join(sentence) for sentence in firsts], "--weights", "nlpl-test")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "nlpl-test"})
    nlp.initialize()
    for stream, (sentence, layers) in enumerate(zip(firsts, embedded, strict=True)):
        expected = reference_top_layer(fixture_dir, stream, 0)
        assert np.abs(as_directions(layers) - expected).max() < TOLERANCE
        doc = nlp(spacy.tokens.Doc(nlp.vocab, words=sentence))
        assert np.abs(as_directions(doc._.elmo_data) - expected).max() < TOLERANCE
    assert [path for path, _ in served["server"].requests] == ["/repository/20/999.zip"]  # then from the cache


def test_an_efml_zip_by_name(served, tmp_path):
    lines = ["cat abc", "a b c cat"]
    expected = embed_sentences(import_efml(served["efml"]), [line.split() for line in lines])
    for got, want in zip(run_embed(tmp_path, lines, "--weights", "efml-test"), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": "efml-test"})
    nlp.initialize()
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=lines[1].split()))
    np.testing.assert_allclose(doc._.elmo_data, expected[1], atol=TOLERANCE, rtol=0)


@pytest.fixture
def lemmas():
    pytest.importorskip("spacy_lookups_data")
    nlp = spacy.blank("en")
    nlp.add_pipe("lemmatizer", config={"mode": "lookup"})
    nlp.initialize()
    words = [token.lemma_ for token in nlp(spacy.tokens.Doc(nlp.vocab, words=SURFACE))]
    assert words[1:4] == ["cat", "be", "sit"]  # a real lemmatizer at work
    return words


def test_a_lemma_model_reads_the_lemmas_of_a_real_lemmatizer(served, fixture_dir, lemmas, tmp_path):
    bilm = import_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    of_lemmas, of_text = embed_sentences(bilm, [lemmas, SURFACE])
    assert np.abs(of_lemmas - of_text).max() > 0.1  # the test can tell the two inputs apart
    nlp = spacy.blank("en")
    nlp.add_pipe("lemmatizer", config={"mode": "lookup"})
    nlp.add_pipe("elmo", config={"weights": "nlpl-lemmas"})
    nlp.initialize()
    assert nlp.get_pipe("elmo").input_attr == "LEMMA"
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=SURFACE))
    np.testing.assert_allclose(doc._.elmo_data, of_lemmas, atol=TOLERANCE, rtol=0)
    (embedded,) = run_embed(tmp_path, [" ".join(SURFACE)], "--weights", "nlpl-lemmas")  # adds the lemmatizer
    np.testing.assert_allclose(embedded, of_lemmas, atol=TOLERANCE, rtol=0)


def test_a_lemma_model_without_a_lemmatizer_says_which_component_to_add(served):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "nlpl-lemmas"})
    with pytest.raises(ValueError, match=r"no component before it sets them.*add_pipe\('lemmatizer'"):
        nlp.initialize()
    assert served["server"].requests == [], "said before the model's download, from the catalogue"


def test_docs_without_lemmas_are_refused_by_a_lemma_model(served):
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": "nlpl-lemmas"})
    elmo.initialize()  # without nlp: nothing to check the pipeline against
    with pytest.raises(ValueError, match="reads lemmas .* but a doc has none"):
        elmo(nlp("The cats sat."))


def test_input_attr_overrides_what_the_weights_read_with_a_warning(served, fixture_dir):
    bilm = import_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "nlpl-lemmas", "input_attr": "LOWER"})
    with pytest.warns(UserWarning, match="trained on LEMMA but input_attr is LOWER"):
        nlp.initialize()
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=SURFACE))
    np.testing.assert_allclose(
        doc._.elmo_data, embed_sentences(bilm, [[w.lower() for w in SURFACE]])[0], atol=TOLERANCE
    )


def test_a_lemma_pipeline_carries_spacys_lemmatizer_and_its_table(served, fixture_dir, lemmas, tmp_path):
    from spacy_elmo.pipeline.assembly import published_pipeline

    nlp = published_pipeline(CATALOGUE["nlpl-lemmas"], progress=False)
    assert nlp.pipe_names == ["sentencizer", "lemmatizer", "elmo"]
    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "lemmatizer" / "lookups" / "lookups.bin").is_file()  # no data package needed
    bilm = import_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    doc = spacy.load(tmp_path / "pipeline")(spacy.tokens.Doc(nlp.vocab, words=SURFACE))
    np.testing.assert_allclose(doc._.elmo_data, embed_sentences(bilm, [lemmas])[0], atol=TOLERANCE, rtol=0)


def test_packaging_a_lemma_model_of_a_language_without_spacy_lemmas_says_so(served, monkeypatch, tmp_path):
    model = entry(served["server"], "nlpl-latin", "/repository/20/999.zip", BILM_TF, "la", input_attr="LEMMA")
    monkeypatch.setitem(CATALOGUE, model.name, model)
    result = CliRunner().invoke(app, ["package", "nlpl-latin", str(tmp_path / "packages")])
    assert result.exit_code == 1
    assert "spaCy has no lemmatizer data for the language 'la'" in " ".join(result.output.split())
    assert served["server"].requests == [] and not (tmp_path / "packages").exists()  # said before any download


def test_an_unknown_input_attr_is_refused_at_add_pipe():
    with pytest.raises(ValueError, match=r"input_attr must be one of \('ORTH', 'LEMMA', 'LOWER', 'NORM'\), got 'POS'"):
        spacy.blank("en").add_pipe("elmo", config={"input_attr": "POS"})
