"""An embedded corpus on disk: one HDF5 file per block, an index, read without merging.

    OUTPUT/manifest.json           what the blocks are made from (input files, settings); written first
    OUTPUT/blocks/block-00000.hdf5 block 0's lines: the ``allennlp elmo`` layout (hdf5_output)
    OUTPUT/index.json              every block's file, first line, lines and tokens; written last

A block file that exists is finished (each is written under a temporary name and renamed), so a
rerun computes only the missing ones. ``index.json`` appears, atomically, once every block is there:
line n is in the block whose range holds it, as dataset ``str(n)``, row ``n - first_line`` of its
file. ``EmbeddedCorpus`` reads it; ``merge_hdf5`` writes the single-file layout.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from ..files import atomic_write, atomic_write_json
from .blocks import Block, CorpusPlan
from .hdf5_output import SENTENCE_INDEX, TOKENS, tokens_in

MANIFEST = "manifest.json"
INDEX = "index.json"
BLOCKS = "blocks"
FORMAT = "spacy-elmo.embedded-corpus.v1"


def block_file(folder: Path, number: int) -> Path:
    return Path(folder) / BLOCKS / f"block-{number:05d}.hdf5"


def prepare_folder(folder: Path, manifest: Dict[str, Any]) -> None:
    """Create the output folder, or check that the one there belongs to this very run."""
    path = Path(folder) / MANIFEST
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(key for key in set(manifest) | set(previous) if manifest.get(key) != previous.get(key))
        if changed:
            raise ValueError(
                f"{folder} holds the embeddings of another run (different {', '.join(changed)}): rerun with the "
                "same input and settings to resume it, or give another output folder (or remove this one)."
            )
        return
    if Path(folder).exists() and any(Path(folder).iterdir()):
        raise ValueError(f"{folder} exists and is not an embedding run's folder: give an empty or new folder.")
    (Path(folder) / BLOCKS).mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, manifest)


def missing_blocks(folder: Path, plan: CorpusPlan) -> List[Block]:
    return [block for block in plan.blocks if not block_file(folder, block.number).is_file()]


def write_index(folder: Path, plan: CorpusPlan, layers: str) -> Dict[str, Any]:
    """``index.json`` from the finished block files' own attributes, atomically."""
    blocks = []
    for block in plan.blocks:
        path = block_file(folder, block.number)
        blocks.append(
            {
                "file": str(path.relative_to(folder)),
                "first_line": block.first_line,
                "lines": block.lines,
                "tokens": tokens_in(path),
            }
        )
    index = {"format": FORMAT, "layers": layers, "lines": plan.lines, "blocks": blocks}
    atomic_write_json(Path(folder) / INDEX, index)
    return index


class EmbeddedCorpus:
    """The vectors of an embedded corpus by line number: ``corpus[n]`` is line n's array,
    (L+1, T, 2P) for layers "all", else (T, 2P). Opens block files as needed."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        index_path = self.folder / INDEX
        if not index_path.is_file():
            raise ValueError(
                f"{self.folder} has no {INDEX}: the run is unfinished (rerun the same command to complete it) "
                "or this is not an embedding run's folder."
            )
        self.index = json.loads(index_path.read_text(encoding="utf-8"))
        self._firsts = [block["first_line"] for block in self.index["blocks"]]
        self._open: Dict[str, Any] = {}

    def __len__(self) -> int:
        return int(self.index["lines"])

    def location(self, line: int) -> Dict[str, Any]:
        """{"file": path relative to the folder, "row": line's position in it, "dataset": its name}."""
        if not 0 <= line < len(self):
            raise IndexError(f"line {line} is out of range: the corpus has {len(self)} lines (0-{len(self) - 1}).")
        block = self.index["blocks"][bisect.bisect_right(self._firsts, line) - 1]
        return {"file": block["file"], "row": line - block["first_line"], "dataset": str(line)}

    def __getitem__(self, line: int) -> np.ndarray:
        place = self.location(line)
        return self._file(place["file"])[place["dataset"]][...]

    def tokens(self, line: int) -> List[str]:
        """Line ``line``'s tokens, one per row of its vectors, where the run stored them
        (``--store-tokens``)."""
        place = self.location(line)
        stored = self._file(place["file"]).get(TOKENS)
        if stored is None:
            raise ValueError(f"{self.folder} holds no tokens: embed with --store-tokens to keep them.")
        return [word.decode("utf-8") for word in stored[place["dataset"]][...]]

    def _file(self, name: str) -> Any:
        import h5py

        if name not in self._open:
            self._open[name] = h5py.File(self.folder / name, "r")
        return self._open[name]

    def close(self) -> None:
        for handle in self._open.values():
            handle.close()
        self._open.clear()

    def __enter__(self) -> EmbeddedCorpus:
        return self

    def __exit__(self, *_: Optional[object]) -> None:
        self.close()


def merge_hdf5(folder: Path, target: Path) -> None:
    """Every block into one HDF5 file at ``target`` (the original ``allennlp elmo`` layout, one
    ``sentence_to_index`` for all lines: a repeated line names its last), atomically."""
    import h5py

    corpus = EmbeddedCorpus(folder)

    def write(path: Path) -> None:
        index: Dict[str, str] = {}
        with h5py.File(path, "w") as output:
            for block in corpus.index["blocks"]:
                with h5py.File(Path(folder) / block["file"], "r") as part:
                    for name in part:
                        if name == TOKENS:
                            for line in part[TOKENS]:
                                part.copy(part[TOKENS][line], output.require_group(TOKENS), name=line)
                        elif name != SENTENCE_INDEX:
                            part.copy(part[name], output, name=name)
                    index.update(json.loads(part[SENTENCE_INDEX][()]))
            output.create_dataset(SENTENCE_INDEX, data=json.dumps(index))

    atomic_write(Path(target), write)
