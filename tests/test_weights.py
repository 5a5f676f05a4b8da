import json
import pickle

import numpy as np
import pytest
import torch
from conftest import random_bilm, run_cli

from spacy_elmo import WeightsError, embed_sentences, import_original, load_bilm, save_bilm
from spacy_elmo.weights.native import CONFIG_FILE, WEIGHTS_FILE

SENTENCES = [["Native", "round", "trip", "."], ["exact", "to", "the", "bit"]]


def test_native_round_trip_is_exact(tmp_path, seeded):
    bilm = random_bilm(vocab_size=37)
    save_bilm(bilm, tmp_path / "model")
    loaded = load_bilm(tmp_path / "model")
    assert loaded.config == bilm.config and not loaded.training
    for name, tensor in bilm.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    for a, b in zip(embed_sentences(bilm, SENTENCES), embed_sentences(loaded, SENTENCES), strict=True):
        assert np.array_equal(a, b)
    assert load_bilm(tmp_path / "model" / WEIGHTS_FILE).config == bilm.config
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]


def test_converted_original_round_trips(tmp_path, fixture_bilm, fixture_sentences):
    save_bilm(fixture_bilm, tmp_path / "converted")
    loaded = load_bilm(tmp_path / "converted")
    batch = fixture_sentences[1][:3]
    for a, b in zip(embed_sentences(fixture_bilm, batch), embed_sentences(loaded, batch), strict=True):
        assert np.array_equal(a, b)


@pytest.fixture
def saved(tmp_path):
    save_bilm(random_bilm(), tmp_path / "model")
    return tmp_path / "model"


def test_truncated_weights(saved):
    path = saved / WEIGHTS_FILE
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(WeightsError, match=rf"{WEIGHTS_FILE}: not a readable safetensors file"):
        load_bilm(saved)


def test_empty_weights(saved):
    (saved / WEIGHTS_FILE).write_bytes(b"")
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_bilm(saved)


def test_pickle_in_place_of_weights_is_refused_without_running_it(saved, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (saved / WEIGHTS_FILE).write_bytes(pickle.dumps({"weights": Payload()}))
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_bilm(saved)
    assert not marker.exists()


def test_config_that_does_not_match_the_weights(saved):
    document = json.loads((saved / CONFIG_FILE).read_text())
    document["config"]["lstm_dim"] = 64
    (saved / CONFIG_FILE).write_text(json.dumps(document))
    with pytest.raises(WeightsError, match="different configuration than"):
        load_bilm(saved)


def test_weights_of_another_model_with_no_stored_config(saved, tmp_path):
    from safetensors.torch import save_file

    other = {k: v.contiguous() for k, v in random_bilm(lstm_dim=64).state_dict().items()}
    save_file(other, str(saved / WEIGHTS_FILE))
    with pytest.raises(
        WeightsError, match=r"tensor 'forward_layers.0.weight_ih' has shape \(256, 16\), the config needs \(192, 16\)"
    ):
        load_bilm(saved)


def test_non_finite_weights(saved):
    from safetensors.torch import save_file

    state = {k: v.clone().contiguous() for k, v in load_bilm(saved).state_dict().items()}
    state["char_encoder.projection.bias"][0] = float("nan")
    save_file(state, str(saved / WEIGHTS_FILE))
    with pytest.raises(WeightsError, match="'char_encoder.projection.bias' contains NaN"):
        load_bilm(saved)


@pytest.mark.parametrize("content", ["{not json", '{"format": "other"}', '{"format": "spacy-elmo.bilm", "version": 1}'])
def test_broken_config(saved, content):
    (saved / CONFIG_FILE).write_text(content)
    with pytest.raises(WeightsError, match=CONFIG_FILE):
        load_bilm(saved)


def test_missing_files(saved, tmp_path):
    (saved / WEIGHTS_FILE).unlink()
    with pytest.raises(WeightsError, match=f"{WEIGHTS_FILE}: file not found"):
        load_bilm(saved)
    with pytest.raises(WeightsError, match="no such biLM directory"):
        load_bilm(tmp_path / "nowhere")
    with pytest.raises(WeightsError, match="convert it first"):
        load_bilm(tmp_path / "weights.hdf5")


def test_failed_save_keeps_the_previous_files(saved, monkeypatch):
    before = (saved / WEIGHTS_FILE).read_bytes()
    import safetensors.torch

    def broken_save(tensors, path, metadata=None):
        with open(path, "wb") as stream:
            stream.write(b"partial")
        raise OSError("No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", broken_save)
    with pytest.raises(OSError, match="No space left"):
        save_bilm(random_bilm(lstm_dim=64), saved)
    assert (saved / WEIGHTS_FILE).read_bytes() == before
    assert sorted(p.name for p in saved.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    load_bilm(saved)


def test_original_weights_that_do_not_match_options(tmp_path, fixture_dir):
    options = json.loads((fixture_dir / "options.json").read_text())
    options["char_cnn"]["n_highway"] = 3
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match="has no dataset 'CNN_high_2/W_carry'"):
        import_original(tmp_path / "options.json", fixture_dir / "lm_weights.hdf5")
    options["char_cnn"]["n_highway"] = 2
    options["lstm"]["dim"] = 32
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(
        WeightsError, match=r"'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape \(32, 256\) .* implies \(32, 128\)"
    ):
        import_original(tmp_path / "options.json", fixture_dir / "lm_weights.hdf5")


def test_original_weights_not_hdf5(tmp_path, fixture_dir):
    (tmp_path / "weights.hdf5").write_text("hello")
    with pytest.raises(WeightsError, match="not a readable HDF5 file"):
        import_original(fixture_dir / "options.json", tmp_path / "weights.hdf5")


def test_convert_cli(tmp_path, fixture_dir, fixture_bilm, fixture_sentences):
    result = run_cli("convert", fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", tmp_path / "out")
    assert result.returncode == 0, result.stdout + result.crash
    loaded = load_bilm(tmp_path / "out")
    batch = [fixture_sentences[2][0]]
    assert np.array_equal(embed_sentences(loaded, batch)[0], embed_sentences(fixture_bilm, batch)[0])
    info = run_cli("info", tmp_path / "out")
    assert info.returncode == 0 and '"lstm_dim": 64,' in info.stdout


def test_convert_cli_reports_errors(tmp_path, fixture_dir):
    result = run_cli("convert", fixture_dir / "options.json", fixture_dir / "vocab_test.txt", tmp_path / "out")
    assert result.returncode == 1
    assert "vocab_test.txt: not a readable HDF5 file" in result.stdout
    assert not (tmp_path / "out").exists()


def table_bilm():
    """A biLM with its own char table (odd characters included) and a word table."""
    from spacy_elmo import BiLM, BiLMConfig
    from spacy_elmo.network.chars import CharTable, TokenIndexer, WordTable

    chars = CharTable(
        {"a": 7, "\ud800": 8, "\n": 9, '"': 10, "😀": 11, "\\": 12},
        begin_of_word=1,
        end_of_word=2,
        pad=3,
        unknown=4,
        bos=5,
        eos=6,
        max_length=8,
    )
    words = WordTable({"<oov>": 0, "cat": 1, "é\t": 2}, unknown=0)
    config = BiLMConfig.preset(
        "tiny", char_vocabulary="table", n_characters=13, max_characters_per_token=8, word_vocab_size=3, word_dim=4
    )
    bilm = BiLM(config, TokenIndexer(chars, words))
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0, 0.3)
    return bilm.eval()


def test_table_model_round_trip(tmp_path, seeded):
    from spacy_elmo.weights.native import VOCABULARY_FILE

    bilm = table_bilm()
    save_bilm(bilm, tmp_path / "model")
    loaded = load_bilm(tmp_path / "model")
    assert loaded.indexer == bilm.indexer and loaded.config == bilm.config
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [CONFIG_FILE, WEIGHTS_FILE, VOCABULARY_FILE]
    sentences = [["a😀", "cat", "\ud800x"], ["é\t", '"\\"']]
    for a, b in zip(embed_sentences(bilm, sentences), embed_sentences(loaded, sentences), strict=True):
        assert np.array_equal(a, b)
    save_bilm(random_bilm(), tmp_path / "model")  # a byte model saved over it drops the stale vocabulary
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]


@pytest.mark.parametrize(
    "corrupt,fragment",
    [
        (lambda path: path.unlink(), "vocabulary.json: file not found"),
        (lambda path: path.write_text("{truncated"), "vocabulary.json: not a valid vocabulary"),
        (lambda path: path.write_text('{"format": "other"}'), "not a spacy-elmo vocabulary"),
        (lambda path: path.write_text(path.read_text().replace('"a": 7', '"a": 70')), "needs 71 embedding rows"),
        (
            lambda path: path.write_text(path.read_text().replace('"cat": 1', '"cat": 5')),
            "word table needs 6 embedding rows",
        ),
    ],
)
def test_broken_vocabulary(tmp_path, seeded, corrupt, fragment):
    from spacy_elmo.weights.native import VOCABULARY_FILE

    save_bilm(table_bilm(), tmp_path / "model")
    corrupt(tmp_path / "model" / VOCABULARY_FILE)
    with pytest.raises(WeightsError, match=fragment):
        load_bilm(tmp_path / "model")


def test_table_config_without_its_vocabulary():
    from spacy_elmo import BiLM, ConfigError

    with pytest.raises(ConfigError, match="reads tokens through its own vocabulary"):
        BiLM(table_bilm().config)
