"""ELMoForManyLangs models: import with parity to their own package, and refusal of bad files.

The parity tests build tiny random models with *their* classes, save them in their layout, and
compare every layer of our import with their ``Embedder.sents2elmo``.
"""

import json
import os
import pickle

import numpy as np
import pytest
import torch

from spacy_elmo import WeightsError, embed_sentences, load_bilm, save_bilm
from spacy_elmo.weights.elmo_for_many_langs import PUBLISHED_NETWORKS, import_efml, read_lexicon
from spacy_elmo.weights.native import VOCABULARY_FILE

MAX_CHARS = 10
CELL_CLIP, PROJ_CLIP = 1.0, 0.4
NETWORK = {
    "encoder": {
        "name": "elmo",
        "projection_dim": 8,
        "cell_clip": CELL_CLIP,
        "proj_clip": PROJ_CLIP,
        "dim": 24,
        "n_layers": 2,
    },
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 4], [2, 4], [3, 8]],
        "n_highway": 2,
        "word_dim": 0,
        "char_dim": 6,
        "max_characters_per_token": MAX_CHARS,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 10},
    "dropout": 0.1,
}
# The training text the vocabularies come from; 'ж', 'Ω' and the words of SENTENCES not here are unknown.
# Their reader cuts a token to MAX_CHARS - 2 characters before the word lookup: "internationalization"
# is in word.dic whole but read as "internat" (unknown), "supercalifragilistic" as "supercal" (known).
LONG_WORD, CUT_PREFIX = "internationalization", "supercal"
TRAINING_TEXT = " ".join(
    ["Café naïve über straße 東京 は 大きい 。 emoji 😀 👍🏽 ok a long word the cat sat", LONG_WORD, CUT_PREFIX]
)
SENTENCES = [
    ["Café", "naïve", "über", "straße", "the", "cat"],
    ["東京", "は", "大きい", "。"],
    ["emoji", "😀", "👍🏽", "ok"],
    ["internationalization", "a", "supercalifragilistic"],  # longer than MAX_CHARS - 2
    ["unknown", "жΩ", "Ω", "cat", "<bos>"],  # unknown characters, unknown word, their boundary token
    ["x"],
]


def lexicon(entries):
    table = {}
    for entry in entries:
        table.setdefault(entry, len(table))
    return table


def write_efml_model(directory, word_dim, seed, legacy_format=False):
    """A random model in their layout, built and saved with their classes (as their biLM.py does)."""
    from elmoformanylangs.frontend import Model
    from elmoformanylangs.modules.embedding_layer import EmbeddingLayer

    torch.manual_seed(seed)
    network = json.loads(json.dumps(NETWORK))
    network["token_embedder"]["word_dim"] = word_dim
    words = TRAINING_TEXT.split()
    chars = lexicon([*"".join(words), "<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"])
    char_layer = EmbeddingLayer(network["token_embedder"]["char_dim"], chars, fix_emb=False)
    word_layer = None
    if word_dim:
        vocabulary = lexicon(["<oov>", "<bos>", "<eos>", "<pad>", *words])
        word_layer = EmbeddingLayer(word_dim, vocabulary, fix_emb=False)
        write_dic(directory / "word.dic", vocabulary)
    model = Model(network, word_layer, char_layer, use_cuda=False)
    with torch.no_grad():
        for param in model.parameters():  # every weight random and large enough to clip
            param.normal_(0, 0.35)
    save = {"_use_new_zipfile_serialization": False} if legacy_format else {}
    torch.save(model.token_embedder.state_dict(), directory / "token_embedder.pkl", **save)
    torch.save(model.encoder.state_dict(), directory / "encoder.pkl", **save)
    write_dic(directory / "char.dic", chars)
    (directory / "tiny_network.json").write_text(json.dumps(network))
    (directory / "config.json").write_text(
        json.dumps({"seed": seed, "config_path": "/elsewhere/configs/tiny_network.json"})
    )
    return directory


def write_dic(path, table):
    with open(path, "w", encoding="utf-8") as stream:
        for token, index in table.items():
            print(f"{token}\t{index}", file=stream)


def their_layers(model_dir, sentences):
    """Their Embedder's layers (L+1, T, 2P) per sentence: a fresh (stateful!) encoder and a
    single batch, so that every sentence starts from a zero state."""
    from elmoformanylangs import Embedder

    embedder = Embedder(str(model_dir), batch_size=len(sentences) + 1)
    return embedder.sents2elmo(sentences, output_layer=-2)


@pytest.fixture(scope="module", params=[0, 5], ids=["chars", "chars+words"])
def efml_model(request, tmp_path_factory):
    pytest.importorskip("elmoformanylangs")
    directory = tmp_path_factory.mktemp(f"efml{request.param}")
    return write_efml_model(directory, word_dim=request.param, seed=3 + request.param, legacy_format=request.param > 0)


@pytest.fixture(scope="module")
def theirs(efml_model):
    return their_layers(efml_model, SENTENCES)


def test_every_layer_matches_their_embedder(efml_model, theirs, tmp_path):
    ours = import_efml(efml_model)
    save_bilm(ours, tmp_path / "native")
    reloaded = load_bilm(tmp_path / "native")
    for model in (ours, reloaded):
        for sentence, want, got in zip(SENTENCES, theirs, embed_sentences(model, SENTENCES), strict=True):
            assert got.shape == want.shape == (3, len(sentence), 16)
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert np.isclose(np.abs(theirs[0][1]), PROJ_CLIP).any(), "the test model should exercise projection clipping"


def test_long_words_are_looked_up_as_their_reader_cuts_them(efml_model, theirs):
    """Layer 0 of the long tokens (no context in it) tells whether the word lookup used the cut."""
    if not (efml_model / "word.dic").is_file():
        pytest.skip("a model without a word embedding")
    words = read_lexicon(efml_model / "word.dic")
    assert LONG_WORD in words and CUT_PREFIX in words and LONG_WORD[: MAX_CHARS - 2] not in words
    ours = import_efml(efml_model)
    _, word_ids = ours.indexer.encode(SENTENCES[3])
    assert list(word_ids) == [words["<oov>"], words["a"], words[CUT_PREFIX]]
    got = embed_sentences(ours, [SENTENCES[3]])[0]
    np.testing.assert_allclose(got[0], theirs[3][0], atol=1e-5, rtol=0)


def _negate_highway_gates(bilm):
    for highway in bilm.char_encoder.highways:
        highway.gate.weight.neg_()
        highway.gate.bias.neg_()


def _swap_word_marks(bilm):
    chars = bilm.indexer.chars
    chars.begin_of_word, chars.end_of_word = chars.end_of_word, chars.begin_of_word


def _zero_pad_character(bilm):
    bilm.char_encoder.embedding.weight[bilm.char_encoder.pad_id] = 0


def _no_cell_clip(bilm):
    for layer in [*bilm.forward_layers, *bilm.backward_layers]:
        layer.cell_clip = None


@pytest.mark.parametrize("alter", [_negate_highway_gates, _swap_word_marks, _zero_pad_character, _no_cell_clip])
def test_conversion_details_matter(efml_model, theirs, alter):
    """Negative control: undoing any one detail of the conversion breaks parity."""
    bilm = import_efml(efml_model)
    with torch.no_grad():
        alter(bilm)
    error = max(np.abs(got - want).max() for got, want in zip(embed_sentences(bilm, SENTENCES), theirs, strict=True))
    assert error > 1e-3


def test_native_copy_holds_the_vocabulary(efml_model, tmp_path):
    ours = import_efml(efml_model)
    save_bilm(ours, tmp_path / "native")
    reloaded = load_bilm(tmp_path / "native")
    assert reloaded.indexer == ours.indexer and reloaded.config == ours.config
    assert (reloaded.config.word_dim > 0) == (reloaded.indexer.words is not None)
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
    (tmp_path / "native" / VOCABULARY_FILE).unlink()
    with pytest.raises(WeightsError, match=f"{VOCABULARY_FILE}: file not found"):
        load_bilm(tmp_path / "native")


def test_a_sentence_does_not_depend_on_its_batch(efml_model):
    bilm = import_efml(efml_model)
    alone = [embed_sentences(bilm, [sentence])[0] for sentence in SENTENCES]
    together = embed_sentences(bilm, SENTENCES[::-1])[::-1]
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(a, b)


def test_characters_are_the_models_own():
    """Our char table encodes exactly what their batcher feeds their network (ids shifted by +1)."""
    pytest.importorskip("elmoformanylangs")
    from elmoformanylangs.elmo import read_list
    from elmoformanylangs.frontend import create_one_batch

    from spacy_elmo.network.chars import CharTable

    chars = lexicon([*"abcé東", "<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"])
    shifted = {c: i + 1 for c, i in chars.items()}
    table = CharTable(
        shifted,
        begin_of_word=shifted["<eow>"],
        end_of_word=shifted["<bow>"],
        pad=shifted["<pad>"],
        unknown=shifted["<oov>"],
        bos=shifted["<bos>"],
        eos=shifted["<eos>"],
        max_length=8,
    )
    sentence, _ = read_list([["abé", "東ж", "", "abcabcabc", "<eos>"]], max_chars=8)
    config = {"token_embedder": {"name": "cnn", "max_characters_per_token": 8}}
    _, theirs, _, _ = create_one_batch(sentence, None, chars, config, sort=False)
    ours = table.encode(["<bos>", "abé", "東ж", "", "abcabcabc", "<eos>", "<eos>"])
    assert (ours - 1).tolist() == theirs[0].tolist()


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_malicious_pickle_is_refused_without_running_it(tmp_path, writer):
    directory = tmp_path / "model"
    directory.mkdir()
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (directory / "config.json").write_text(json.dumps({"config_path": "net.json"}))
    (directory / "net.json").write_text(json.dumps(NETWORK))
    if writer == "pickle":
        (directory / "token_embedder.pkl").write_bytes(pickle.dumps({"projection.weight": Payload()}, protocol=2))
    else:
        torch.save({"projection.weight": Payload()}, directory / "token_embedder.pkl")
    (directory / "encoder.pkl").write_bytes(pickle.dumps({}))
    with pytest.raises(WeightsError, match=r"token_embedder.pkl: refused: the pickle holds objects other than tensors"):
        import_efml(directory)
    assert not marker.exists()


def write_handmade_model(directory, word_dim):
    """Their layout written without their package: tensor names and shapes as their modules have them."""
    network = json.loads(json.dumps(NETWORK))
    network["token_embedder"]["word_dim"] = word_dim
    embedder, encoder = network["token_embedder"], network["encoder"]
    chars = lexicon([*"abc", "<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"])
    n_filters, proj, cells = sum(n for _, n in embedder["filters"]), encoder["projection_dim"], encoder["dim"]
    tokens = {"char_emb_layer.embedding.weight": torch.randn(len(chars), embedder["char_dim"])}
    for i, (width, count) in enumerate(embedder["filters"]):
        tokens[f"convolutions.{i}.weight"] = torch.randn(count, embedder["char_dim"], width)
        tokens[f"convolutions.{i}.bias"] = torch.randn(count)
    for k in range(embedder["n_highway"]):
        tokens[f"highways._layers.{k}.weight"] = torch.randn(2 * n_filters, n_filters)
        tokens[f"highways._layers.{k}.bias"] = torch.randn(2 * n_filters)
    tokens["projection.weight"], tokens["projection.bias"] = torch.randn(proj, word_dim + n_filters), torch.randn(proj)
    if word_dim:
        words = lexicon(["<oov>", "<bos>", "<eos>", "<pad>", "cat"])
        tokens["word_emb_layer.embedding.weight"] = torch.randn(len(words), word_dim)
        write_dic(directory / "word.dic", words)
    lstm = {}
    for direction in ("forward", "backward"):
        for k in range(encoder["n_layers"]):
            name = f"{direction}_layer_{k}"
            lstm[f"{name}.input_linearity.weight"] = torch.randn(4 * cells, proj)
            lstm[f"{name}.state_linearity.weight"] = torch.randn(4 * cells, proj)
            lstm[f"{name}.state_linearity.bias"] = torch.randn(4 * cells)
            lstm[f"{name}.state_projection.weight"] = torch.randn(proj, cells)
    torch.save(tokens, directory / "token_embedder.pkl")
    torch.save(lstm, directory / "encoder.pkl")
    write_dic(directory / "char.dic", chars)
    (directory / "tiny_network.json").write_text(json.dumps(network))
    (directory / "config.json").write_text(json.dumps({"config_path": "/elsewhere/configs/tiny_network.json"}))
    return directory


@pytest.fixture
def plain_model(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    return write_handmade_model(directory, word_dim=5)


def test_handmade_model_imports(plain_model):
    bilm = import_efml(plain_model)
    assert bilm.config.word_dim == 5 and bilm.config.char_vocabulary == "table"
    assert embed_sentences(bilm, [["cat", "dog"]])[0].shape == (3, 2, 16)


@pytest.mark.parametrize(
    "missing,message",
    [
        ("char.dic", r"char.dic: file not found"),
        ("word.dic", r"word.dic: file not found"),
        (
            "tiny_network.json",
            r"names the network config '/elsewhere/configs/tiny_network.json', found in none of .* Copy that JSON "
            r"file into",
        ),
    ],
)
def test_a_missing_file_is_named(plain_model, missing, message):
    (plain_model / missing).unlink()
    with pytest.raises(WeightsError, match=message):
        import_efml(plain_model)


def test_tensor_of_the_wrong_shape(plain_model):
    state = torch.load(plain_model / "encoder.pkl", weights_only=True)
    state["backward_layer_1.state_projection.weight"] = torch.zeros(8, 20)
    torch.save(state, plain_model / "encoder.pkl")
    with pytest.raises(
        WeightsError,
        match=r"encoder.pkl: tensor 'backward_layer_1.state_projection.weight' has shape \(8, 20\), "
        r"the network config implies \(8, 24\)",
    ):
        import_efml(plain_model)


def test_vocabulary_of_another_model(plain_model):
    with open(plain_model / "char.dic", "a", encoding="utf-8") as stream:
        stream.write("ж\t999\n")
    with pytest.raises(WeightsError, match=r"char.dic: ids out of range for the embedding of \d+ rows"):
        import_efml(plain_model)


@pytest.mark.parametrize("part,name", [("encoder", "lstm"), ("token_embedder", "lstm")])
def test_unsupported_architectures(plain_model, part, name):
    network = json.loads((plain_model / "tiny_network.json").read_text())
    network[part]["name"] = name
    (plain_model / "tiny_network.json").write_text(json.dumps(network))
    with pytest.raises(WeightsError, match=rf"{part} 'lstm' is not supported"):
        import_efml(plain_model)


def test_published_network_configs_match_their_package():
    efml = pytest.importorskip("elmoformanylangs")
    configs = os.path.join(os.path.dirname(efml.__file__), "configs")
    for name, values in PUBLISHED_NETWORKS.items():
        with open(os.path.join(configs, name)) as stream:
            assert json.load(stream) == values


def test_lexicon_is_read_as_written(tmp_path):
    path = tmp_path / "char.dic"
    path.write_bytes("a\t0\n \t1\n\u3000\t2\n\t\t3\n7\n<pad>\t4\r\n\n".encode("utf-8"))
    assert read_lexicon(path) == {"a": 0, " ": 1, "\u3000": 7, "\t": 3, "<pad>": 4}
    path.write_text("a\t0\nb\tx\n", encoding="utf-8")
    with pytest.raises(WeightsError, match=r"char.dic, line 2: 'b\\tx' is not 'token<TAB>id'"):
        read_lexicon(path)


def test_an_imported_model_trains_through_its_own_vocabulary(tmp_path):
    """Pretraining batches go through the biLM's indexer (char table, boundaries as it names them)."""
    from spacy_elmo import BiLM, BiLMRunner
    from spacy_elmo.training.loop.batching import TokenTable, make_batch
    from spacy_elmo.training.loop.objective import LanguageModelLoss
    from spacy_elmo.training.vocab import Vocabulary

    directory = tmp_path / "model"
    directory.mkdir()
    imported = import_efml(write_handmade_model(directory, word_dim=0))
    vocab = Vocabulary.from_sentences([["a", "cab", "ж"]], max_size=10)
    bilm = BiLM(imported.config.replace(vocab_size=len(vocab)), imported.indexer)
    bilm.load_state_dict(imported.state_dict(), strict=False)
    table = TokenTable(vocab, bilm.indexer)
    batch = make_batch([table.ids(["cab", "a", "ж"])], table)
    assert batch.char_ids[0].tolist() == (bilm.indexer.encode(["<bos>"])[0][0]).tolist()
    expected, _ = bilm.encode_tokens(["<bos>", "cab", "a", "ж", "<eos>"])
    assert torch.equal(batch.char_ids[batch.inverse], expected), "the indexer's char ids, token for token"
    runner = BiLMRunner(bilm)
    with torch.no_grad():  # the batch-invariant encoder: the same bits for 3 distinct tokens as for 5
        trained_rows = runner.token_representations(batch.char_ids)[batch.inverse]
        assert torch.equal(trained_rows, runner.token_representations(expected))
    forward, backward = LanguageModelLoss(bilm.train())(batch)
    (forward + backward).backward()
    assert torch.isfinite(forward) and bilm.char_encoder.embedding.weight.grad is not None


def test_a_pipeline_with_an_efml_model_saves_and_reloads(plain_model, tmp_path):
    import spacy

    save_bilm(import_efml(plain_model), tmp_path / "bilm")
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "bilm")})
    nlp.initialize()
    text = "cat abc cab dog"
    expected = nlp(text)._.elmo_data
    nlp.to_disk(tmp_path / "pipeline")
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(text)._.elmo_data, expected)


def test_convert_efml_command(plain_model, tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli.app import app

    result = CliRunner().invoke(app, ["convert-efml", str(plain_model), str(tmp_path / "bilm")])
    assert result.exit_code == 0, result.output
    ours, direct = load_bilm(tmp_path / "bilm"), import_efml(plain_model)
    np.testing.assert_array_equal(
        embed_sentences(ours, [["cat", "abc"]])[0], embed_sentences(direct, [["cat", "abc"]])[0]
    )
    failed = CliRunner().invoke(app, ["convert-efml", str(tmp_path / "nowhere"), str(tmp_path / "out")])
    assert failed.exit_code == 1 and not (tmp_path / "out").exists()


def test_a_zipped_efml_model_downloads_by_catalogue_name(plain_model, tmp_path, monkeypatch):
    """The catalogue's efml entries are NLPL zips of a model directory: fetched, unpacked, converted."""
    import io
    import zipfile

    from file_server import FileServer

    from spacy_elmo.hub.cache import download_model
    from spacy_elmo.hub.catalogue import CATALOGUE, EFML, PublishedModel
    from spacy_elmo.hub.download import RemoteFile

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for item in plain_model.iterdir():
            archive.write(item, f"xx.model/{item.name}")
    with FileServer({"/repository/11/999.zip": buffer.getvalue()}) as server:
        entry = PublishedModel(
            name="efml-test",
            language="xx",
            format=EFML,
            files=(RemoteFile(server.url("/repository/11/999.zip"), "999.zip"),),
            trained_on="test",
            licence="test",
            citation="test",
            source="https://example.org/",
        )
        monkeypatch.setitem(CATALOGUE, entry.name, entry)
        out = download_model("efml-test", tmp_path / "bilm", progress=False)
    assert (out / VOCABULARY_FILE).is_file()
    np.testing.assert_array_equal(
        embed_sentences(load_bilm(out), [["cat", "abc"]])[0],
        embed_sentences(import_efml(plain_model), [["cat", "abc"]])[0],
    )
