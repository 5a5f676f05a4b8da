"""Training checkpoints: written atomically, read without unpickling.

``RUN/checkpoints/step-00001000/`` holds the biLM with its LM head as a native biLM directory
(config.json + model.safetensors, loadable by ``load_bilm``), ``vocab.txt``, the optimizer's tensors
(``optimizer.safetensors``) and everything else a resumed run needs (``trainer.json``: step, data
positions, RNG states, ...; RNG tensors in ``rng.safetensors``). A checkpoint is written under a
temporary name and renamed into place; ``RUN/checkpoints/latest`` names the newest complete one.

``RUN/checkpoints/best`` names ``best-step-00000400/``: the weights (biLM with its LM head, and
``vocab.txt``) of the best dev evaluation so far, with its figures in ``best.json``. It is the run's
result: what ``RUN/bilm`` holds at the end and what a run directory resolves to for evaluation and
``init_from``. Resuming reads ``latest``, never ``best``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from torch import Tensor

from spacy_elmo.files import atomic_write, atomic_write_text, directory_beside
from spacy_elmo.weights.native import save_bilm

from ..vocab import Vocabulary

LATEST = "latest"
BEST = "best"


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

    def write(temporary: Path) -> None:
        save_bilm(bilm, temporary)
        vocab.save(temporary / "vocab.txt")
        tensors, meta = _split_optimizer_state(optimizer_state)
        # safetensors writes 0600 files: atomic_write gives them the umask's mode, as every other file
        atomic_write(temporary / "optimizer.safetensors", lambda path: save_file(tensors, str(path)))
        rng_tensors = {k: v.contiguous() for k, v in rng.items()}
        atomic_write(temporary / "rng.safetensors", lambda path: save_file(rng_tensors, str(path)))
        atomic_write_text(temporary / "optimizer.json", json.dumps(meta))
        atomic_write_text(temporary / "trainer.json", json.dumps(trainer, indent=2))

    final = _write_directory(Path(directory) / f"step-{step:08d}", write)
    atomic_write_text(Path(directory) / LATEST, final.name + "\n")
    _prune(Path(directory), keep, final.name)
    return final


def save_best(directory: Path, step: int, bilm, vocab: Vocabulary, figures: Dict[str, Any]) -> Path:
    """Write the weights of step ``step`` as the run's best (``figures``: its dev scores, into
    ``best.json``), point ``best`` at them and remove the best they replace."""

    def write(temporary: Path) -> None:
        save_bilm(bilm, temporary)
        vocab.save(temporary / "vocab.txt")
        atomic_write_text(temporary / "best.json", json.dumps({"step": step, **figures}, indent=2))

    final = _write_directory(Path(directory) / f"best-step-{step:08d}", write)
    atomic_write_text(Path(directory) / BEST, final.name + "\n")
    for replaced in Path(directory).glob("best-step-*"):
        if replaced.name != final.name:
            shutil.rmtree(replaced, ignore_errors=True)
    return final


def best_checkpoint(directory: Path) -> Optional[Path]:
    """The best weights ``directory`` (a checkpoints directory) names, or None before any."""
    return _named(Path(directory), BEST, "best.json")


def _write_directory(final: Path, write: Callable[[Path], None]) -> Path:
    """Fill a temporary directory beside ``final`` with ``write`` and rename it into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = directory_beside(final)
    try:
        write(temporary)
        _fsync_directory(temporary)
        if final.exists():
            shutil.rmtree(final)
        os.rename(temporary, final)
        _fsync_directory(final.parent)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return final


def latest_checkpoint(directory: Path) -> Optional[Path]:
    """The newest complete checkpoint in ``directory`` (a checkpoints directory), or None."""
    return _named(Path(directory), LATEST, "trainer.json")


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint directory as given; a run or checkpoints directory means the run's result: its
    best weights, else (a run from before they were kept) its latest checkpoint."""
    path = Path(path)
    for checkpoints in (path / "checkpoints", path):
        found = best_checkpoint(checkpoints) or latest_checkpoint(checkpoints)
        if found:
            return found
    return path


def _named(directory: Path, pointer_name: str, marker: str) -> Optional[Path]:
    """The directory the pointer file ``pointer_name`` names, checked complete by its ``marker``."""
    pointer = directory / pointer_name
    if not pointer.is_file():
        return None
    path = directory / pointer.read_text().strip()
    if not (path / marker).is_file():
        raise ValueError(f"{pointer} names {path.name}, which is missing or incomplete.")
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
    for stale in [*directory.glob(".step-*"), *directory.glob(".best-step-*")]:  # left by a run killed while writing
        shutil.rmtree(stale, ignore_errors=True)


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
