"""Import of ELMoForManyLangs (HIT-SCIR) models into a BiLM, with numerical parity to their package.

A model directory holds ``config.json`` (training arguments; ``config_path`` names the network
JSON), ``char.dic`` and, for models with a word embedding, ``word.dic`` ("token<TAB>id" lines),
and ``token_embedder.pkl`` / ``encoder.pkl`` (torch-saved state dicts). The pickles are read with
``torch.load(weights_only=True)``: tensors only, nothing in them runs.

How their network maps onto ours:
- characters: their id + 1 (our id 0 marks sequence padding), so our embedding gets a zero row 0;
  their batcher writes ``char.dic['<eow>']`` *before* a token's characters and ``'<bow>'`` after
  (the names are swapped in their code); we reproduce what their models were trained on.
- highway: theirs is ``g * x + (1 - g) * relu(A x)``, ours ``g' * relu(A x) + (1 - g') * x``, so
  ``g' = 1 - g = sigmoid(-(B x + b))``: the gate's weight and bias are negated.
- the word embedding is concatenated (first) with the highway output before the projection.
- LSTM: input_linearity, state_linearity (with the only bias), state_projection; gate order
  input, forget, memory, output, as ours; clipping only when the configured value is non-zero.

Vocabulary files are read as they were written (``print(f"{token}\\t{id}")``): lines end at
"\\n" only, and everything before a line's last tab is the token. Their reader differs on odd
characters: it strips each line first, so a whitespace key (e.g. " ") is lost and its id filed
under U+3000, and its ``codecs`` line iteration also breaks lines at U+2028, U+0085, "\\r", etc.
We keep such characters as written. A line holding only an id is filed under U+3000, as they do.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from ..network.bilm import BiLM
from ..network.chars import TABLE_ENCODING, CharTable, TokenIndexer, WordTable
from ..network.config import BiLMConfig, ConfigError
from .native import WeightsError, load_state

MODEL_CONFIG = "config.json"
CHAR_DIC, WORD_DIC = "char.dic", "word.dic"
TOKEN_EMBEDDER, ENCODER = "token_embedder.pkl", "encoder.pkl"
CHAR_MARKS = ("<bow>", "<eow>", "<oov>", "<pad>", "<bos>", "<eos>")
BOS_TOKEN, EOS_TOKEN, UNKNOWN = "<bos>", "<eos>", "<oov>"
_ID_ONLY_KEY = "\u3000"

PathLike = Union[str, Path]

# The network JSONs shipped in elmoformanylangs 0.0.4.post2 (configs/); both files hold these values.
_PUBLISHED_NETWORK: Dict[str, Any] = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
PUBLISHED_NETWORKS: Dict[str, Dict[str, Any]] = {
    "cnn_0_100_512_4096_sample.json": _PUBLISHED_NETWORK,
    "cnn_50_100_512_4096_sample.json": _PUBLISHED_NETWORK,
}


def import_efml(model_dir: PathLike) -> BiLM:
    """Build a BiLM (eval mode, CPU) from an ELMoForManyLangs model directory."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise WeightsError(f"{model_dir}: no such directory; give the directory of an ELMoForManyLangs model.")
    network, source = read_network(model_dir)
    embedder = _StateReader(read_state_dict(model_dir / TOKEN_EMBEDDER), model_dir / TOKEN_EMBEDDER)
    encoder = _StateReader(read_state_dict(model_dir / ENCODER), model_dir / ENCODER)
    char_rows = embedder.rows("char_emb_layer.embedding.weight")
    word_rows = embedder.rows("word_emb_layer.embedding.weight") if _word_dim(network) > 0 else 0
    try:
        config = config_from_efml(network, n_characters=char_rows + 1, word_vocab_size=word_rows, source=source)
    except ConfigError as err:
        raise WeightsError(str(err)) from None
    indexer = efml_indexer(model_dir, config, char_rows, word_rows)
    state = _converted_state(config, embedder, encoder)
    embedder.finish()
    encoder.finish()
    bilm = BiLM(config, indexer)
    load_state(bilm, state, model_dir)
    return bilm.eval()


def _word_dim(network: Dict[str, Any]) -> int:
    """word_dim as far as it can be read; config_from_efml reports a malformed network."""
    try:
        return int(network["token_embedder"].get("word_dim") or 0)
    except (KeyError, AttributeError, TypeError, ValueError):
        return 0


def read_network(model_dir: Path) -> Tuple[Dict[str, Any], str]:
    """The network JSON named by config.json's ``config_path``, looked for as their package does:
    that path (relative to the model directory), its file name in the model directory, then the
    elmoformanylangs package's configs/ (if installed), then the published values by file name.
    Returns (network, where it came from)."""
    arguments = _read_json(model_dir / MODEL_CONFIG)
    config_path = arguments.get("config_path")
    if not isinstance(config_path, str) or not config_path:
        raise WeightsError(
            f"{model_dir / MODEL_CONFIG} has no 'config_path' naming the network JSON; is it an ELMoForManyLangs model?"
        )
    name = Path(config_path).name
    candidates = [model_dir / config_path, model_dir / name]
    package = _package_configs()
    if package is not None:
        candidates.append(package / name)
    for candidate in candidates:
        if candidate.is_file():
            return _read_json(candidate), str(candidate)
    if name in PUBLISHED_NETWORKS:
        return PUBLISHED_NETWORKS[name], f"the published {name}"
    raise WeightsError(
        f"{model_dir / MODEL_CONFIG} names the network config {config_path!r}, found in none of "
        f"{[str(c) for c in candidates]}. Copy that JSON file into {model_dir} (it belongs to the model's release)."
    )


def _package_configs() -> Optional[Path]:
    """elmoformanylangs/configs if the package is installed; found without importing it."""
    spec = importlib.util.find_spec("elmoformanylangs")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "configs"


def _read_json(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        raise WeightsError(
            f"{path}: file not found; an ELMoForManyLangs model directory holds {MODEL_CONFIG}, {CHAR_DIC}, "
            f"{TOKEN_EMBEDDER} and {ENCODER}."
        )
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{path} must hold a JSON object, got {type(data).__name__}.")
    return data


def read_lexicon(path: Path) -> Dict[str, int]:
    """A ``.dic`` file: token -> id, lines "token<TAB>id" (see the module docstring for details)."""
    if not path.is_file():
        raise WeightsError(
            f"{path}: file not found; the model's vocabulary is needed to encode tokens. Copy it from the model's "
            "release."
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise WeightsError(f"{path} is not UTF-8 text ({err}).") from None
    lexicon: Dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        token, tab, value = line.rpartition("\t")
        if not tab:
            token = _ID_ONLY_KEY
        try:
            lexicon[token] = int(value)
        except ValueError:
            raise WeightsError(
                f"{path}, line {number}: {line[:60]!r} is not 'token<TAB>id' with an integer id."
            ) from None
    if not lexicon:
        raise WeightsError(f"{path} is empty; it should list the model's vocabulary as 'token<TAB>id' lines.")
    return lexicon


def efml_indexer(model_dir: Path, config: BiLMConfig, char_rows: int, word_rows: int) -> TokenIndexer:
    """The char table (and word table) of the model, checked against its embedding sizes."""
    chars = _checked_lexicon(model_dir / CHAR_DIC, char_rows, CHAR_MARKS, TOKEN_EMBEDDER)
    shifted = {token: i + 1 for token, i in chars.items() if token not in CHAR_MARKS}
    table = CharTable(
        shifted,
        # their batcher puts the id of '<eow>' first and the id of '<bow>' last
        begin_of_word=chars["<eow>"] + 1,
        end_of_word=chars["<bow>"] + 1,
        pad=chars["<pad>"] + 1,
        unknown=chars["<oov>"] + 1,
        bos=chars["<bos>"] + 1,
        eos=chars["<eos>"] + 1,
        max_length=config.max_characters_per_token,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
    )
    if not config.word_dim:
        return TokenIndexer(table)
    words = _checked_lexicon(model_dir / WORD_DIC, word_rows, (UNKNOWN,), TOKEN_EMBEDDER)
    return TokenIndexer(table, WordTable(words, unknown=words[UNKNOWN]))


def _checked_lexicon(path: Path, rows: int, required: Tuple[str, ...], weights: str) -> Dict[str, int]:
    lexicon = read_lexicon(path)
    missing = [mark for mark in required if mark not in lexicon]
    if missing:
        raise WeightsError(f"{path} lacks the entries {missing}, which the model needs; is it the file of this model?")
    bad = [(token, i) for token, i in lexicon.items() if not 0 <= i < rows]
    if bad:
        raise WeightsError(
            f"{path}: ids out of range for the embedding of {rows} rows in {weights}, e.g. {bad[:3]}; "
            "the vocabulary and the weights belong to different models."
        )
    return lexicon


def read_state_dict(path: Path) -> Dict[str, Tensor]:
    """A torch-saved state dict, loaded without running code: anything but tensors is refused."""
    if not path.is_file():
        raise WeightsError(
            f"{path}: file not found; an ELMoForManyLangs model directory holds {TOKEN_EMBEDDER} and {ENCODER}."
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise WeightsError(
            f"{path}: refused: the pickle holds objects other than tensors ({reason}). Nothing in it was "
            "run. Only plain state dicts are read; get the file from the model's original release."
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, TypeError) as err:
        raise WeightsError(f"{path}: not a readable torch state dict ({type(err).__name__}: {err}).") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        raise WeightsError(f"{path}: expected a state dict (tensor names -> tensors), got {type(state).__name__}.")
    return dict(state)


class _StateReader:
    """Takes tensors out of one file's state dict by name, checking shapes; errors name the file."""

    def __init__(self, tensors: Dict[str, Tensor], path: Path) -> None:
        self.tensors, self.path = tensors, path

    def rows(self, name: str) -> int:
        tensor = self.tensors.get(name)
        if tensor is None or tensor.dim() != 2:
            found = None if tensor is None else tuple(tensor.shape)
            raise WeightsError(
                f"{self.path}: needs a 2-d tensor {name!r} (found {found}); tensors present: "
                f"{sorted(self.tensors)[:8]}..."
            )
        return int(tensor.shape[0])

    def take(self, name: str, shape: Tuple[int, ...]) -> Tensor:
        if name not in self.tensors:
            raise WeightsError(f"{self.path} has no tensor {name!r}: is it a model of another architecture?")
        tensor = self.tensors.pop(name)
        if tuple(tensor.shape) != tuple(shape):
            raise WeightsError(
                f"{self.path}: tensor {name!r} has shape {tuple(tensor.shape)}, the network config implies "
                f"{tuple(shape)}."
            )
        return tensor.float()

    def finish(self) -> None:
        if self.tensors:
            raise WeightsError(f"{self.path} holds tensors this network has no place for: {sorted(self.tensors)[:8]}.")


def _converted_state(config: BiLMConfig, embedder: _StateReader, encoder: _StateReader) -> Dict[str, Tensor]:
    state: Dict[str, Tensor] = {}
    dim, n_filters, proj = config.char_embedding_dim, config.n_filters, config.projection_dim
    chars = embedder.take("char_emb_layer.embedding.weight", (config.n_characters - 1, dim))
    state["char_encoder.embedding.weight"] = torch.cat([chars.new_zeros(1, dim), chars])
    if config.word_dim:
        shape = (config.word_vocab_size, config.word_dim)
        state["char_encoder.word_embedding.weight"] = embedder.take("word_emb_layer.embedding.weight", shape)
    for index, (width, count) in enumerate(config.filters):
        state[f"char_encoder.convs.{index}.weight"] = embedder.take(f"convolutions.{index}.weight", (count, dim, width))
        state[f"char_encoder.convs.{index}.bias"] = embedder.take(f"convolutions.{index}.bias", (count,))
    for k in range(config.n_highway):
        weight = embedder.take(f"highways._layers.{k}.weight", (2 * n_filters, n_filters))
        bias = embedder.take(f"highways._layers.{k}.bias", (2 * n_filters,))
        target = f"char_encoder.highways.{k}"
        state[f"{target}.transform.weight"], state[f"{target}.transform.bias"] = weight[:n_filters], bias[:n_filters]
        state[f"{target}.gate.weight"], state[f"{target}.gate.bias"] = -weight[n_filters:], -bias[n_filters:]
    state["char_encoder.projection.weight"] = embedder.take("projection.weight", (proj, config.word_dim + n_filters))
    state["char_encoder.projection.bias"] = embedder.take("projection.bias", (proj,))
    for ours, theirs in (("forward_layers", "forward_layer"), ("backward_layers", "backward_layer")):
        for k in range(config.n_layers):
            state.update(_lstm_state(encoder, f"{theirs}_{k}", f"{ours}.{k}", config))
    return {name: tensor.contiguous() for name, tensor in state.items()}


def _lstm_state(encoder: _StateReader, source: str, target: str, config: BiLMConfig) -> Dict[str, Tensor]:
    gates, proj = 4 * config.lstm_dim, config.projection_dim
    return {
        f"{target}.weight_ih": encoder.take(f"{source}.input_linearity.weight", (gates, proj)),
        f"{target}.weight_hh": encoder.take(f"{source}.state_linearity.weight", (gates, proj)),
        f"{target}.bias": encoder.take(f"{source}.state_linearity.bias", (gates,)),
        f"{target}.weight_hr": encoder.take(f"{source}.state_projection.weight", (proj, config.lstm_dim)),
    }


def config_from_efml(
    network: Dict[str, Any], *, n_characters: int, word_vocab_size: int = 0, source: str = "network config"
) -> BiLMConfig:
    """Read an ELMoForManyLangs network JSON (the file its ``config.json`` names as ``config_path``).

    The JSON holds no vocabulary sizes: ``n_characters`` (rows of our character embedding, one more
    than char.dic's because id 0 is reserved) and ``word_vocab_size`` come from the vocabularies.
    Only the 'cnn' token embedder and the 'elmo' encoder are supported.
    """
    try:
        encoder, embedder = network["encoder"], network["token_embedder"]
        _require_efml_parts(encoder, embedder, source)
        word_dim = int(embedder.get("word_dim") or 0)
        return BiLMConfig(
            projection_dim=int(encoder["projection_dim"]),
            lstm_dim=int(encoder["dim"]),
            n_layers=int(encoder["n_layers"]),
            # their LSTM clips only when the value is truthy: 0 or null means no clipping
            cell_clip=float(encoder["cell_clip"]) if encoder.get("cell_clip") else None,
            proj_clip=float(encoder["proj_clip"]) if encoder.get("proj_clip") else None,
            residual=True,
            filters=tuple((int(w), int(n)) for w, n in embedder["filters"]),
            n_highway=int(embedder.get("n_highway") or 0),
            char_embedding_dim=int(embedder["char_dim"]),
            activation=embedder.get("activation", "relu"),
            n_characters=n_characters,
            max_characters_per_token=int(embedder["max_characters_per_token"]),
            dropout=float(network.get("dropout", 0.1)),
            char_vocabulary=TABLE_ENCODING,
            word_vocab_size=word_vocab_size if word_dim else 0,
            word_dim=word_dim,
        )
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(
            f"{source} is not an ELMoForManyLangs network config: missing or invalid entry {err}. Expected "
            "'encoder' (name, projection_dim, dim, n_layers, cell_clip, proj_clip) and 'token_embedder' "
            "(name, filters, n_highway, char_dim, word_dim, max_characters_per_token, activation)."
        ) from None


def _require_efml_parts(encoder: Dict[str, Any], embedder: Dict[str, Any], source: str) -> None:
    if str(encoder["name"]).lower() != "elmo":
        raise ConfigError(
            f"{source}: encoder {encoder['name']!r} is not supported; only the 'elmo' encoder (biLM with projection) "
            "is."
        )
    if str(embedder["name"]).lower() != "cnn":
        raise ConfigError(
            f"{source}: token_embedder {embedder['name']!r} is not supported; only the 'cnn' (char CNN) token "
            "embedder is."
        )
    if int(embedder["char_dim"]) <= 0:
        raise ConfigError(
            f"{source}: char_dim is {embedder['char_dim']}; models without a character encoder are not supported."
        )
