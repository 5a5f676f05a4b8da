"""The original ELMo release: ``options.json`` + ``weights.hdf5`` as written by the TensorFlow
biLM (bilm-tf), read into a BiLM (needs h5py, the ``h5`` extra). TensorFlow's LSTM
gate order and its run-time forget bias are turned into PyTorch's order and a folded bias."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from ..extras import install_command
from ..network.bilm import BiLM
from ..network.chars import MAX_WORD_LENGTH, N_CHARACTERS
from ..network.config import BiLMConfig, ConfigError
from .native import PathLike, WeightsError, load_state

if TYPE_CHECKING:
    import h5py

# Reads a dataset of the hdf5 file, checking its shape: (name, shape) -> float32 tensor.
_Reader = Callable[[str, Tuple[int, ...]], Tensor]

_TF_GATES = ("i", "j", "f", "o")  # TensorFlow's LSTMCell order; j is the cell input
_TORCH_GATES = ("i", "f", "j", "o")
_FORGET_BIAS = 1.0  # TensorFlow's LSTMCell adds it at run time; we fold it into the bias
# What a missing file of a release is told to be replaced with
RELEASE_FILES = (
    "an original ELMo release is an options.json and a weights .hdf5 (`python -m spacy_elmo download NAME OUTPUT` "
    "fetches and converts a published one)."
)


def import_original(options_path: PathLike, weights_path: PathLike, config: Optional[BiLMConfig] = None) -> BiLM:
    """Build a BiLM from the original ``options.json`` and ``weights.hdf5``."""
    options_path, weights_path = Path(options_path), Path(weights_path)
    try:
        config = config or config_from_options(options_path)
    except ConfigError as err:
        raise WeightsError(str(err)) from None
    bilm = BiLM(config)
    with _open_hdf5(weights_path) as source:
        state = _original_state(source, config, weights_path, options_path)
    load_state(bilm, state, weights_path)
    return bilm.eval()


def _open_hdf5(path: Path) -> h5py.File:
    try:
        import h5py
    except ImportError:
        raise WeightsError(f"Reading original ELMo weights needs h5py: {install_command('h5')}") from None
    if not path.is_file():
        raise WeightsError(f"{path}: file not found; {RELEASE_FILES}")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise WeightsError(f"{path}: not a readable HDF5 file ({err}).") from None


def _original_state(source: h5py.File, config: BiLMConfig, path: Path, options_path: Path) -> Dict[str, Tensor]:
    def read(name: str, shape: Tuple[int, ...]) -> Tensor:
        if name not in source:
            raise WeightsError(f"{path} has no dataset {name!r}: does it belong to {options_path}?")
        array = source[name][...]
        if tuple(array.shape) != tuple(shape):
            raise WeightsError(
                f"{path}: dataset {name!r} has shape {tuple(array.shape)} but {options_path} implies "
                f"{tuple(shape)}; the options do not match the weights."
            )
        return torch.from_numpy(array).float()

    state: Dict[str, Tensor] = {}
    embed_dim, n_filters, proj = config.char_embedding_dim, config.n_filters, config.projection_dim
    chars = read("char_embed", (config.n_characters - 1, embed_dim))
    state["char_encoder.embedding.weight"] = torch.cat([chars.new_zeros(1, embed_dim), chars])
    for index, (width, count) in enumerate(config.filters):
        weight = read(f"CNN/W_cnn_{index}", (1, width, embed_dim, count))
        state[f"char_encoder.convs.{index}.weight"] = weight[0].permute(2, 1, 0).contiguous()
        state[f"char_encoder.convs.{index}.bias"] = read(f"CNN/b_cnn_{index}", (count,))
    for k in range(config.n_highway):
        prefix, target = f"CNN_high_{k}", f"char_encoder.highways.{k}"
        # The original calls g "carry" although it scales the transform: g*relu(.) + (1-g)*x.
        state[f"{target}.gate.weight"] = read(f"{prefix}/W_carry", (n_filters, n_filters)).t().contiguous()
        state[f"{target}.gate.bias"] = read(f"{prefix}/b_carry", (n_filters,))
        state[f"{target}.transform.weight"] = read(f"{prefix}/W_transform", (n_filters, n_filters)).t().contiguous()
        state[f"{target}.transform.bias"] = read(f"{prefix}/b_transform", (n_filters,))
    state["char_encoder.projection.weight"] = read("CNN_proj/W_proj", (n_filters, proj)).t().contiguous()
    state["char_encoder.projection.bias"] = read("CNN_proj/b_proj", (proj,))
    for direction, stack in ((0, "forward_layers"), (1, "backward_layers")):
        for layer in range(config.n_layers):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            state.update(_original_lstm(read, cell, f"{stack}.{layer}", config))
    return state


def _original_lstm(read: _Reader, cell: str, target: str, config: BiLMConfig) -> Dict[str, Tensor]:
    cells, proj = config.lstm_dim, config.projection_dim
    kernel = read(f"{cell}/W_0", (proj + proj, 4 * cells)).t()  # (4H, I + P), inputs then recurrent
    bias = read(f"{cell}/B", (4 * cells,)).clone()
    bias[_TF_GATES.index("f") * cells : (_TF_GATES.index("f") + 1) * cells] += _FORGET_BIAS
    order = torch.cat([torch.arange(cells) + _TF_GATES.index(g) * cells for g in _TORCH_GATES])
    kernel, bias = kernel[order], bias[order]
    return {
        f"{target}.weight_ih": kernel[:, :proj].contiguous(),
        f"{target}.weight_hh": kernel[:, proj:].contiguous(),
        f"{target}.bias": bias,
        f"{target}.weight_hr": read(f"{cell}/W_P_0", (cells, proj)).t().contiguous(),
    }


def config_from_options(options: Union[Dict[str, Any], str, Path]) -> BiLMConfig:
    """Read the original release's options (a dict or an options.json path)."""
    source = str(options) if not isinstance(options, dict) else "options"
    if not isinstance(options, dict):
        options = _read_json(Path(options))
    try:
        lstm, cnn = options["lstm"], options["char_cnn"]
        config = BiLMConfig(
            projection_dim=int(lstm["projection_dim"]),
            lstm_dim=int(lstm["dim"]),
            n_layers=int(lstm["n_layers"]),
            cell_clip=_optional_float(lstm.get("cell_clip")),
            proj_clip=_optional_float(lstm.get("proj_clip")),
            residual=bool(lstm.get("use_skip_connections", False)),
            filters=tuple((int(w), int(n)) for w, n in cnn["filters"]),
            n_highway=int(cnn.get("n_highway") or 0),
            char_embedding_dim=int(cnn["embedding"]["dim"]),
            activation=cnn.get("activation", "relu"),
            n_characters=_inference_characters(int(cnn.get("n_characters", N_CHARACTERS))),
            max_characters_per_token=int(cnn.get("max_characters_per_token", MAX_WORD_LENGTH)),
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise ConfigError(f"{source}: {err}") from None
        raise ConfigError(
            f"{source} is not an ELMo options file: missing or invalid entry {err}. Expected "
            "'lstm' (dim, projection_dim, n_layers, ...) and 'char_cnn' (filters, embedding, ...)."
        ) from None
    if config.n_characters != N_CHARACTERS or config.max_characters_per_token != MAX_WORD_LENGTH:
        raise ConfigError(
            f"{source}: n_characters={config.n_characters}, max_characters_per_token="
            f"{config.max_characters_per_token}; only the standard {N_CHARACTERS} / "
            f"{MAX_WORD_LENGTH} character encoding is supported."
        )
    return config


def _inference_characters(n_characters: int) -> int:
    """bilm-tf trains with 261 characters and runs with 262 (a zero padding row before the trained
    ones; its README says to edit options.json after training). Options left at 261 describe the
    same weights, so they are read as 262."""
    return N_CHARACTERS if n_characters == N_CHARACTERS - 1 else n_characters


def _optional_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _read_json(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: file not found; {RELEASE_FILES}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must contain a JSON object, got {type(data).__name__}.")
    return data
