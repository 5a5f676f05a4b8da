import pytest

from spacy_elmo import BiLM, BiLMConfig, ConfigError, config_from_options


def expected_parameters(config):
    """Independent count of the network's parameters, without the LM head."""
    e, f, p, h = config.char_embedding_dim, config.n_filters, config.projection_dim, config.lstm_dim
    chars = config.n_characters * e + sum(n * (w * e + 1) for w, n in config.filters)
    highways = config.n_highway * 2 * (f * f + f)
    projection = f * p + p
    lstm_layer = 4 * h * (p + p + 1) + p * h  # input and recurrent weights, one bias, projection
    return chars + highways + projection + 2 * config.n_layers * lstm_layer


@pytest.mark.parametrize("preset,published", [("original", 93.6), ("medium", 28.0), ("small", 13.6)])
def test_preset_parameter_counts_match_published(preset, published):
    config = BiLMConfig.preset(preset, vocab_size=1000)
    bilm = BiLM(config)
    count = bilm.parameter_count()
    assert count == expected_parameters(config)
    assert round(count / 1e6, 1) == published
    assert bilm.parameter_count(include_lm_head=True) == count + 1000 * (config.projection_dim + 1)


def test_the_mini_preset_keeps_the_papers_structure():
    """Char CNN with the original's seven filter widths, a highway, a projection below the LSTM
    width, two LSTM layers with the residual connection."""
    mini, original = BiLMConfig.preset("mini", vocab_size=1000), BiLMConfig.preset("original")
    assert [width for width, _ in mini.filters] == [width for width, _ in original.filters] == list(range(1, 8))
    assert mini.n_layers == 2 and mini.residual and mini.n_highway >= 1
    assert mini.projection_dim < mini.lstm_dim < BiLMConfig.preset("small").lstm_dim
    assert BiLM(mini).parameter_count() == expected_parameters(mini)


def test_original_options_file(fixture_dir):
    config = config_from_options(fixture_dir / "options.json")
    assert (config.projection_dim, config.lstm_dim, config.n_layers) == (16, 64, 2)
    assert config.filters == ((1, 4), (2, 8), (3, 16), (4, 32), (5, 64))
    assert (config.cell_clip, config.proj_clip, config.residual, config.n_highway) == (3.0, 3.0, True, 2)


def test_round_trip_through_dict():
    config = BiLMConfig.preset("original", vocab_size=50)
    assert BiLMConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"projection_dim": 64}, "projection_dim (64) must be smaller than lstm_dim"),
        ({"filters": ()}, "filters is empty"),
        ({"filters": ((0, 3),)}, "Filter (width=0"),
        ({"cell_clip": -1.0}, "cell_clip must be positive"),
        ({"activation": "gelu"}, "activation must be 'relu' or 'tanh'"),
        ({"dropout": 1.0}, "dropout must be in [0, 1)"),
        ({"lstm_dim": 0}, "lstm_dim must be a positive integer"),
    ],
)
def test_invalid_configs_say_what_is_wrong(changes, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        BiLMConfig.preset("tiny", **changes)


def test_unknown_preset_and_keys():
    with pytest.raises(ConfigError, match="Unknown preset 'huge'"):
        BiLMConfig.preset("huge")
    with pytest.raises(ConfigError, match="Unknown biLM config keys"):
        BiLMConfig.from_dict({**BiLMConfig.preset("tiny").to_dict(), "colour": "red"})


def test_options_that_are_not_elmo(tmp_path):
    path = tmp_path / "options.json"
    path.write_text('{"lstm": {"dim": 8}}')
    with pytest.raises(ConfigError, match="is not an ELMo options file"):
        config_from_options(path)
    path.write_text("not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        config_from_options(path)


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"char_vocabulary": "bytes"}, "char_vocabulary must be 'utf8-bytes' or 'table'"),
        ({"n_characters": 300}, "do not fit char_vocabulary='utf8-bytes'"),
        ({"word_dim": 8}, "word_vocab_size=0 and word_dim=8: both must be 0"),
        ({"word_vocab_size": 8}, "word_vocab_size=8 and word_dim=0"),
        (
            {"char_vocabulary": "table", "max_characters_per_token": 2, "filters": ((1, 4),)},
            "max_characters_per_token must be >= 3",
        ),
    ],
)
def test_invalid_vocabulary_combinations(changes, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        BiLMConfig.preset("tiny", **changes)


def test_vocabulary_fields_only_in_dicts_when_used():
    plain = BiLMConfig.preset("tiny")
    assert not {"char_vocabulary", "word_vocab_size", "word_dim"} & set(plain.to_dict())
    table = plain.replace(
        char_vocabulary="table", n_characters=40, max_characters_per_token=12, word_vocab_size=9, word_dim=4
    )
    assert table.needs_vocabulary and not plain.needs_vocabulary
    assert BiLMConfig.from_dict(table.to_dict()) == table and table.to_dict()["word_dim"] == 4


def test_elmoformanylangs_network():
    from spacy_elmo.weights.elmo_for_many_langs import PUBLISHED_NETWORKS, config_from_efml

    config = config_from_efml(
        PUBLISHED_NETWORKS["cnn_50_100_512_4096_sample.json"], n_characters=101, word_vocab_size=70
    )
    assert (config.projection_dim, config.lstm_dim, config.n_layers, config.n_highway) == (512, 4096, 2, 2)
    assert (config.cell_clip, config.proj_clip, config.residual, config.char_embedding_dim) == (3.0, 3.0, True, 50)
    assert (config.char_vocabulary, config.n_characters, config.word_vocab_size, config.word_dim) == (
        "table",
        101,
        70,
        100,
    )
    assert config.n_filters == 2048 and config.max_characters_per_token == 50
    unclipped = {**PUBLISHED_NETWORKS["cnn_50_100_512_4096_sample.json"]}
    unclipped["encoder"] = {**unclipped["encoder"], "cell_clip": 0, "proj_clip": None}
    assert not config_from_efml(unclipped, n_characters=101, word_vocab_size=70).is_clipped
    with pytest.raises(
        ConfigError, match="is not an ELMoForManyLangs network config: missing or invalid entry 'encoder'"
    ):
        config_from_efml({}, n_characters=10)
