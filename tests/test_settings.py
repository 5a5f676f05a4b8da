"""The component's settings live in one typed place (pipeline/settings.py): the factory's signature
and default config agree with it, every setting reaches the component, and what the component
learns about its weights is a record of its own, saved with it."""

import dataclasses
import inspect
import json
import re
import typing
from pathlib import Path

import pytest
import spacy
from conftest import make_nlp

from spacy_elmo.pipeline.component import Elmo, make_elmo
from spacy_elmo.pipeline.settings import ElmoSettings
from spacy_elmo.pipeline.weights_record import WeightsRecord

SETTINGS = [field for field in dataclasses.fields(ElmoSettings) if field.init]

# A value other than the default for every setting, each valid for the tiny test weights (3 layers).
NOT_DEFAULT = {
    "input_attr": "NORM",
    "layer_weights": [0.5, 0.25, 0.25],
    "gamma": 2.0,
    "layer_norm": False,
    "pooling": "max",
    "set_vector_hooks": False,
    "max_sentence_length": 40,
    "max_batch_tokens": 512,
    "sentence_cache_tokens": 100,
    "sentence_cache_mb": 8.0,
    "token_cache_mb": 4.0,
    "precision": "int8",
    "store": "mix",
    "store_dtype": "float16",
    "center_vectors": True,
    "remove_directions": 1,
}


def test_the_factory_takes_exactly_the_settings_with_their_types():
    parameters = list(inspect.signature(make_elmo).parameters)
    assert parameters[:3] == ["nlp", "name", "model"]
    assert sorted(parameters[3:]) == sorted(field.name for field in SETTINGS)
    factory_types, settings_types = typing.get_type_hints(make_elmo), typing.get_type_hints(ElmoSettings)
    for field in SETTINGS:
        expected = settings_types[field.name]
        if field.name == "layer_weights":  # the config gives a list; the settings keep it as a tuple
            expected = typing.Optional[typing.List[float]]
        assert factory_types[field.name] == expected, field.name


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"nonsense": 1}, "unexpected argument: 'nonsense'"),
        ({"max_batch_tokens": "many"}, "max_batch_tokens"),
        ({"gamma": "x"}, "gamma"),
    ],
)
def test_spacy_checks_a_config_against_the_settings_the_factory_takes(config, said):
    """The factory is written once (``**settings``); spaCy still sees every setting, with its type."""
    from thinc.api import ConfigValidationError

    with pytest.raises(ConfigValidationError, match=said):
        spacy.blank("en").add_pipe("elmo", config=config)


def test_the_default_config_is_the_settings_defaults():
    assert spacy.registry.factories.get("elmo") is make_elmo
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    config = nlp.config["components"]["elmo"]
    defaults = {key: value for key, value in config.items() if key not in ("factory", "model")}
    assert defaults == ElmoSettings().to_config()
    assert set(NOT_DEFAULT) | {"weights"} == set(defaults), "NOT_DEFAULT covers every setting"


def test_every_setting_given_in_the_config_reaches_the_component(tiny_weights):
    with pytest.warns(UserWarning, match="With center_vectors on"):  # nlp.initialize() gives no text
        elmo = make_nlp(tiny_weights, **NOT_DEFAULT).get_pipe("elmo")
    assert isinstance(elmo, Elmo)
    given = elmo.settings.to_config()
    for name, value in NOT_DEFAULT.items():
        assert given[name] == value, name
    assert given["weights"] == str(tiny_weights)


def test_settings_are_checked_when_made_and_fixed_after():
    with pytest.raises(ValueError, match="max_batch_tokens must be a positive integer, got 0"):
        ElmoSettings(max_batch_tokens=0)
    with pytest.raises(ValueError, match="token_cache_mb must be a number of megabytes >= 0, got True"):
        ElmoSettings(token_cache_mb=True)
    with pytest.raises(ValueError, match="store"):
        ElmoSettings(store="everything")
    settings = ElmoSettings(layer_weights=[1.0, 2.0, 3.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.precision = "int8"  # type: ignore[misc]
    assert settings.layer_weights == (1.0, 2.0, 3.0) and settings.to_config()["layer_weights"] == [1.0, 2.0, 3.0]
    assert settings.storage.store == "layers" and settings.token_cache_bytes == 64 * 2**20


def test_cfg_is_the_record_of_the_weights_and_round_trips(tiny_weights, tmp_path):
    nlp = make_nlp(tiny_weights)
    elmo = nlp.get_pipe("elmo")
    assert elmo.cfg == elmo.record.to_cfg() and set(elmo.cfg) == {"weights", "weights_input_attr", "centering"}
    assert elmo.record.weights == str(tiny_weights)
    elmo.fit_centering(nlp.pipe(["The bank raised its rates, and we sat on the bank of the river."] * 80))
    nlp.to_disk(tmp_path / "pipeline")
    assert json.loads((tmp_path / "pipeline" / "elmo" / "cfg").read_text()) == elmo.cfg
    loaded = spacy.load(tmp_path / "pipeline").get_pipe("elmo")
    assert loaded.record == elmo.record and loaded.centering_estimate is not None


def test_a_cfg_saved_with_every_setting_gives_its_record():
    """Pipelines saved before the record kept every setting in cfg; the config.cfg's settings win."""
    old = {**ElmoSettings(precision="bf16").to_config(), "weights": "w", "centering": None}
    assert WeightsRecord.from_cfg(old) == WeightsRecord(weights="w")


def test_the_settings_table_of_the_docs_names_every_setting_with_its_default():
    table = (Path(__file__).parents[1] / "docs" / "component.md").read_text(encoding="utf-8")
    documented = {
        name: json.loads(default)
        for name, default in re.findall(r"^\| \[`(\w+)`\]\(#\w+\) \| `([^`]+)`", table, flags=re.MULTILINE)
        if name != "model"  # the architecture, not a setting of ElmoSettings
    }
    assert documented == ElmoSettings().to_config()
