"""Training checkpoints: written atomically, read without unpickling.

``RUN/checkpoints/step-00001000/`` holds the biLM with its LM head as a native biLM directory
(config.json + model.safetensors, loadable by ``load_bilm``), ``vocab.txt``, the optimizer's tensors
(``optimizer.safetensors``) and everything else a resumed run needs (``trainer.json``: step, data
positions, RNG states, ...; RNG tensors in ``rng.safetensors``). A checkpoint is written under a
temporary name and renamed into place; ``RUN/checkpoints/latest`` names the newest complete one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from torch import Tensor

from spacy_elmo.files import atomic_write_text
from spacy_elmo.weights.native import save_bilm

from ..vocab import Vocabulary

LATEST = "latest"


def save_checkpoint(
    directory: Path,
    step: int,
    bilm,
    vocab: Vocabulary,
    optimizer_state: Dict,
    trainer: Dict,
    rng: Dict[str, Tensor],
    keep: int = 3,
) -> Path:
    """Write checkpoint ``step`` under ``directory`` and point ``latest`` at it; keep the newest ``keep``."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step:08d}"
    temporary = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=directory))
    try:
        save_bilm(bilm, temporary)
        vocab.save(temporary / "vocab.txt")
        tensors, meta = _split_optimizer_state(optimizer_state)
        save_file(tensors, str(temporary / "optimizer.safetensors"))
        save_file({k: v.contiguous() for k, v in rng.items()}, str(temporary / "rng.safetensors"))
        atomic_write_text(temporary / "optimizer.json", json.dumps(meta))
        atomic_write_text(temporary / "trainer.json", json.dumps(trainer, indent=2))
        _fsync_directory(temporary)
        if final.exists():
            shutil.rmtree(final)
        os.rename(temporary, final)
        _fsync_directory(directory)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    atomic_write_text(directory / LATEST, final.name + "\n")
    _prune(directory, keep, final.name)
    return final


def latest_checkpoint(directory: Path) -> Optional[Path]:
    pointer = Path(directory) / LATEST
    if not pointer.is_file():
        return None
    path = Path(directory) / pointer.read_text().strip()
    if not (path / "trainer.json").is_file():
        raise ValueError(f"{pointer} names {path.name}, which is missing or incomplete.")
    return path


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint directory as given; a run or checkpoints directory means its latest checkpoint."""
    path = Path(path)
    for checkpoints in (path / "checkpoints", path):
        if (checkpoints / LATEST).is_file():
            return latest_checkpoint(checkpoints)
    return path


def load_checkpoint(path: Path) -> Tuple[Dict, Dict, Dict[str, Tensor]]:
    """(optimizer state dict, trainer state, RNG tensors). The biLM itself loads with load_bilm."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    try:
        trainer = json.loads((path / "trainer.json").read_text())
        meta = json.loads((path / "optimizer.json").read_text())
        tensors = load_file(str(path / "optimizer.safetensors"))
        rng = load_file(str(path / "rng.safetensors"))
    except (OSError, ValueError, SafetensorError) as err:
        raise ValueError(f"Checkpoint {path} is unreadable: {err}") from None
    return _join_optimizer_state(tensors, meta), trainer, rng


def _split_optimizer_state(state: Dict) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
    tensors: Dict[str, Tensor] = {}
    scalars: Dict[str, Dict[str, Any]] = {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if isinstance(value, Tensor):
                tensors[f"{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _join_optimizer_state(tensors: Dict[str, Tensor], meta: Dict) -> Dict:
    state: Dict[int, Dict[str, Any]] = {}
    for name, tensor in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = tensor
    for index, values in meta["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    return {"state": state, "param_groups": meta["param_groups"]}


def _prune(directory: Path, keep: int, newest: str) -> None:
    checkpoints = sorted(p for p in directory.glob("step-*") if p.is_dir())
    for old in checkpoints[: max(0, len(checkpoints) - keep)]:
        if old.name != newest:
            shutil.rmtree(old, ignore_errors=True)
    for stale in directory.glob(".step-*"):  # left by a run killed while writing
        shutil.rmtree(stale, ignore_errors=True)


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
