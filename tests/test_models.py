"""The catalogue of published models."""

from urllib.parse import urlparse

import pytest
import spacy

from spacy_elmo.hub.catalogue import BILM_TF, CATALOGUE, EFML, UnknownModelError, get_model, models_for_language
from spacy_elmo.pipeline.assembly import package_name
from spacy_elmo.pipeline.token_input import TOKEN_STRINGS


def test_catalogue_holds_allennlp_models_and_44_efml_languages():
    allennlp = {name for name, model in CATALOGUE.items() if model.format == BILM_TF}
    assert {"small", "medium", "original", "original-5.5B", "pubmed", "pt"} <= allennlp
    efml = [model for model in CATALOGUE.values() if model.format == EFML]
    assert len(efml) == 44 and len({model.language for model in efml}) == 44


@pytest.mark.parametrize("model", list(CATALOGUE.values()), ids=list(CATALOGUE))
def test_every_entry_is_complete_and_fetchable(model):
    if model.format == EFML or model.name.startswith("nlpl-"):
        assert model.is_archive and model.files[0].url.endswith(".zip")
    else:
        assert [remote.filename for remote in model.files] == ["options.json", "weights.hdf5"]
    for remote in model.files:
        assert urlparse(remote.url).scheme in ("http", "https") and remote.filename
        pinned = (remote.size, remote.sha256, remote.pinned_by)
        assert pinned == (None, None, None) or (remote.size > 0 and len(remote.sha256) == 64 and remote.pinned_by)
    assert model.licence and model.citation and model.source.startswith("https://")
    assert model.input_attr in TOKEN_STRINGS
    spacy.util.get_lang_class(model.spacy_language)  # a pipeline can be built for it


NLPL_IDS = {"nlpl-210": "LEMMA", "nlpl-211": "ORTH", "nlpl-217": "ORTH", "nlpl-218": "ORTH", "nlpl-195": "ORTH"}
NLPL_IDS.update({"nlpl-196": "LEMMA", "nlpl-199": "LEMMA"})
NLPL_IDS.update({f"nlpl-{i}": "LEMMA" for i in (209, 201, 203, 202)})


def test_the_nlpl_elmo_models_are_listed_with_what_they_read():
    nlpl = {name: model for name, model in CATALOGUE.items() if name.startswith("nlpl-")}
    assert {name: model.input_attr for name, model in nlpl.items()} == NLPL_IDS
    assert all(model.format == BILM_TF and "/repository/20/" in model.files[0].url for model in nlpl.values())
    assert (nlpl["nlpl-217"].vocabulary_size, nlpl["nlpl-218"].vocabulary_size) == (30_000, 100_000)
    assert {m.name for m in models_for_language("no")} >= {"nlpl-210", "nlpl-211", "efml-nb", "efml-nn"}


def test_allennlps_two_weights_files_are_pinned_with_their_source():
    for name, size in (("original", 374_434_792), ("small", 54_402_456)):
        weights = CATALOGUE[name].files[1]
        assert weights.size == size and "third-party" in weights.pinned_by


def test_models_command_shows_input_and_pinned_files():
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["models", "--language", "ru", "--files"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.output.splitlines() if line.startswith("nlpl-")}
    assert rows["nlpl-196"][3] == "LEMMA" and rows["nlpl-195"][3] == "ORTH"
    assert "http://vectors.nlpl.eu/repository/20/196.zip" in result.output
    original = " ".join(CliRunner().invoke(app, ["models", "--language", "en", "--files"]).output.split())
    assert "374,434,792 bytes, sha256 a6b92b9c" in original and "third-party" in original


def test_names_are_case_insensitive_and_typos_get_suggestions():
    assert get_model("ORIGINAL") is CATALOGUE["original"]
    with pytest.raises(UnknownModelError, match="Did you mean .*efml-de"):
        get_model("efml-dee")


def test_models_for_a_language():
    assert {m.name for m in models_for_language("pt")} == {"pt", "efml-pt"}


def test_package_names_are_python_identifiers():
    assert package_name("original-5.5B") == "elmo_original_5_5b"
    assert all(package_name(name).isidentifier() for name in CATALOGUE)
