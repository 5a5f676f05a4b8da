"""The training configs that ship with the package: a UPOS tagger and an NER model, each with ELMo
(``-elmo``: the frozen ``elmo`` component and the sentencizer sourced from ``paths.elmo``, a task mix
of its layers in the embedding) and without (``-baseline``), otherwise identical."""

from __future__ import annotations

from pathlib import Path
from typing import List

from ..files import atomic_write_text

FOLDER = Path(__file__).resolve().parent / "configs"


def config_names() -> List[str]:
    return sorted(path.stem for path in FOLDER.glob("*.cfg"))


def config_path(name: str) -> Path:
    """The shipped config called ``name`` (e.g. "upos-elmo")."""
    path = FOLDER / f"{name}.cfg"
    if not path.is_file():
        raise ValueError(f"No shipped config {name!r}; the configs are: {', '.join(config_names())}.")
    return path


def write_config(name: str, output: Path) -> Path:
    """The shipped config ``name`` written to ``output`` (atomically; an existing file is refused)."""
    source = config_path(name)
    if Path(output).exists():
        raise FileExistsError(f"{output} exists; give another path, or remove it first.")
    atomic_write_text(Path(output), source.read_text(encoding="utf-8"))
    return Path(output)
