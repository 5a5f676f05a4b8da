"""The catalogue of published models."""

from urllib.parse import urlparse

import pytest
import spacy

from spacy_elmo.hub.catalogue import BILM_TF, CATALOGUE, EFML, UnknownModelError, get_model, models_for_language
from spacy_elmo.pipeline.assembly import package_name


def test_catalogue_holds_allennlp_models_and_44_efml_languages():
    allennlp = {name for name, model in CATALOGUE.items() if model.format == BILM_TF}
    assert {"small", "medium", "original", "original-5.5B", "pubmed", "pt"} <= allennlp
    efml = [model for model in CATALOGUE.values() if model.format == EFML]
    assert len(efml) == 44 and len({model.language for model in efml}) == 44


@pytest.mark.parametrize("model", list(CATALOGUE.values()), ids=list(CATALOGUE))
def test_every_entry_is_complete_and_fetchable(model):
    expected_files = 2 if model.format == BILM_TF else 1
    assert len(model.files) == expected_files
    for remote in model.files:
        assert urlparse(remote.url).scheme in ("http", "https") and remote.filename
        assert remote.sha256 is None or len(remote.sha256) == 64
    assert model.licence and model.citation and model.source.startswith("https://")
    spacy.util.get_lang_class(model.spacy_language)  # a pipeline can be built for it


def test_names_are_case_insensitive_and_typos_get_suggestions():
    assert get_model("ORIGINAL") is CATALOGUE["original"]
    with pytest.raises(UnknownModelError, match="Did you mean .*efml-de"):
        get_model("efml-dee")


def test_models_for_a_language():
    assert {m.name for m in models_for_language("pt")} == {"pt", "efml-pt"}


def test_package_names_are_python_identifiers():
    assert package_name("original-5.5B") == "elmo_original_5_5b"
    assert all(package_name(name).isidentifier() for name in CATALOGUE)
