"""The native weights format: a directory with ``config.json`` (the BiLMConfig) and ``model.safetensors`` (the
state dict; its metadata repeats the config so a stray pair of files is caught), plus
``vocabulary.json`` for models that read tokens through their own tables (char table, word
table; ``TokenIndexer.to_dict`` under a format header, JSON with ASCII escapes so that any
character survives). Written atomically, read without unpickling anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from ..files import atomic_write, atomic_write_text
from ..network.bilm import BiLM, checked_indexer
from ..network.chars import TokenIndexer
from ..network.config import BiLMConfig, ConfigError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCABULARY_FILE = "vocabulary.json"
FORMAT = "spacy-elmo.bilm"
FORMAT_VERSION = 1
VOCABULARY_FORMAT = "spacy-elmo.vocabulary"

PathLike = Union[str, Path]


class WeightsError(ValueError):
    """A weights file that is missing, corrupt, or does not match its configuration."""


def save_bilm(bilm: BiLM, directory: PathLike) -> Path:
    """Write ``config.json``, ``model.safetensors`` and, for models with their own token tables,
    ``vocabulary.json`` into ``directory`` (created if needed). Each file is written to a
    temporary name and renamed into place; config.json comes last."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "version": str(FORMAT_VERSION), "config_json": _config_json(bilm.config)}
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in bilm.state_dict().items()}
    atomic_write(directory / WEIGHTS_FILE, lambda path: save_file(tensors, str(path), metadata=header))
    if bilm.indexer.has_tables:
        vocabulary = {"format": VOCABULARY_FORMAT, "version": FORMAT_VERSION, **bilm.indexer.to_dict()}
        atomic_write_text(directory / VOCABULARY_FILE, json.dumps(vocabulary, ensure_ascii=True) + "\n")
    else:  # a stale vocabulary from an earlier model saved here would describe another network
        (directory / VOCABULARY_FILE).unlink(missing_ok=True)
    document = {"format": FORMAT, "version": FORMAT_VERSION, "config": bilm.config.to_dict()}
    atomic_write_text(directory / CONFIG_FILE, json.dumps(document, indent=2) + "\n")
    return directory


def load_bilm(path: PathLike, device: Union[str, torch.device, None] = None) -> BiLM:
    """Load a native biLM: a directory (or its ``model.safetensors``). Returns the module in eval
    mode on ``device`` (default CPU); ``BiLMRunner(bilm, precision=...)`` runs it for inference."""
    directory = _native_directory(Path(path))
    config = read_config(directory / CONFIG_FILE)
    indexer = read_vocabulary(directory / VOCABULARY_FILE, config) if config.needs_vocabulary else None
    tensors = _read_safetensors(directory / WEIGHTS_FILE, config)
    with torch.device("meta"), InitSkippedOnMeta():  # no memory, no values: the file's replace them at once
        bilm = BiLM(config, indexer)
    load_state(bilm, tensors, directory / WEIGHTS_FILE, assign=True)
    return bilm.to(device or "cpu").eval()


class InitSkippedOnMeta(TorchFunctionMode):
    """Random initialisation of meta tensors skipped (they hold no values): torch's meta ``uniform_``
    imports sympy, about 70 MB resident, for nothing (torch 2.9 does; 2.13 does not). A torch
    function mode is the calling thread's alone, so other threads' modules initialise as ever."""

    INITS = frozenset(
        ("uniform_", "normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_")
        + ("trunc_normal_", "orthogonal_")
    )

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else kwargs.get("tensor", kwargs.get("self"))  # nn.init passes ``tensor=``
        if getattr(func, "__name__", "") in self.INITS and isinstance(first, Tensor) and first.is_meta:
            return first
        return func(*args, **kwargs)


def read_vocabulary(path: Path, config: BiLMConfig) -> TokenIndexer:
    """The token tables in ``vocabulary.json``, checked against ``config``'s sizes."""
    if not path.is_file():
        raise WeightsError(
            f"{path}: file not found. This biLM (char_vocabulary={config.char_vocabulary!r}, word_dim="
            f"{config.word_dim}) reads tokens through its own vocabulary, saved there by save_bilm; copy "
            "the whole model directory, or re-import the model."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path}: not a valid vocabulary: unreadable JSON ({err}). Is it truncated?") from None
    header = (data.get("format"), data.get("version")) if isinstance(data, dict) else (None, None)
    if header != (VOCABULARY_FORMAT, FORMAT_VERSION):
        raise WeightsError(
            f"{path}: not a spacy-elmo vocabulary (format={header[0]!r}, version={header[1]!r}; expected "
            f"{VOCABULARY_FORMAT!r}, {FORMAT_VERSION})."
        )
    try:
        indexer = TokenIndexer.from_dict({k: v for k, v in data.items() if k not in ("format", "version")})
        return checked_indexer(config, indexer)
    except (AttributeError, TypeError, ValueError) as err:  # ConfigError is a ValueError
        raise WeightsError(f"{path}: not a valid vocabulary for {path.parent / CONFIG_FILE} ({err}).") from None


def read_config(path: Path) -> BiLMConfig:
    if not path.is_file():
        raise WeightsError(f"{path}: file not found; a native biLM directory holds {CONFIG_FILE} and {WEIGHTS_FILE}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise WeightsError(
                f"{path}: not a spacy-elmo biLM config (format={data.get('format')!r}, expected {FORMAT!r})."
            )
        if data.get("version") != FORMAT_VERSION:
            raise WeightsError(
                f"{path}: format version {data.get('version')!r} is not supported (expected {FORMAT_VERSION})."
            )
        return BiLMConfig.from_dict(data["config"])
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError) as err:
        raise WeightsError(f"{path}: not a valid biLM config JSON ({type(err).__name__}: {err}).") from None
    except ConfigError as err:
        raise WeightsError(f"{path}: {err}") from None


def _native_directory(path: Path) -> Path:
    if path.is_file() and path.name == WEIGHTS_FILE:
        return path.parent
    if path.is_dir():
        return path
    if path.suffix in (".hdf5", ".h5"):
        raise WeightsError(
            f"{path} is an original ELMo weights file; convert it first: "
            "python -m spacy_elmo convert OPTIONS.json WEIGHTS.hdf5 OUT_DIR"
        )
    raise WeightsError(f"{path}: no such biLM directory (expected a directory with {CONFIG_FILE} and {WEIGHTS_FILE}).")


def _config_json(config: BiLMConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


def _read_safetensors(path: Path, config: BiLMConfig) -> Dict[str, Tensor]:
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise WeightsError(f"{path}: file not found; a native biLM directory holds {CONFIG_FILE} and {WEIGHTS_FILE}.")
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise WeightsError(
            f"{path}: not a readable safetensors file ({err}). Is it truncated or of another format?"
        ) from None
    stored = metadata.get("config_json")
    if stored is not None and stored != _config_json(config):
        raise WeightsError(
            f"{path} was written for a different configuration than {path.parent / CONFIG_FILE} "
            "(an interrupted or mixed copy?). Re-export the biLM."
        )
    return tensors


def load_state(bilm: BiLM, tensors: Dict[str, Tensor], source: Union[Path, str], assign: bool = False) -> None:
    """Load ``tensors`` into ``bilm`` after checking names, shapes and values; errors name ``source``.
    ``assign``: the tensors become the parameters (for a module built on the meta device)."""
    expected = bilm.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise WeightsError(
            f"{source} does not match its config: missing tensors {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected tensors {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}."
        )
    for name in expected:  # the model's own order, so the first problem reported is stable
        tensor, want = tensors[name], tuple(expected[name].shape)
        if tuple(tensor.shape) != want:
            raise WeightsError(f"{source}: tensor {name!r} has shape {tuple(tensor.shape)}, the config needs {want}.")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise WeightsError(f"{source}: tensor {name!r} contains NaN or infinite values.")
    bilm.load_state_dict({name: t.to(expected[name].dtype) for name, t in tensors.items()}, assign=assign)
