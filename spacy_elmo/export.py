"""Embed a text file into HDF5, in the layout of the original ``allennlp elmo`` command: one dataset
per input line (named by its line number, from "0") and a ``sentence_to_index`` dataset holding a
JSON object from line text to dataset name."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, List

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc
from tqdm import tqdm

LAYER_CHOICES = ("all", "top", "average")


def embed_file(nlp: Language, source: Path, target: Path, layers: str = "all", tokenized: bool = False, batch_size: int = 64) -> int:
    """Embed every line of ``source`` (UTF-8) into ``target`` (HDF5; written atomically).

    layers: "all" stores (L+1, T, 2P) per line, "top" the last layer (T, 2P), "average" the mean
    of all layers (T, 2P). tokenized: lines are already tokenized, split on whitespace; otherwise
    the pipeline's tokenizer runs. Returns the number of lines.
    """
    import h5py

    if layers not in LAYER_CHOICES:
        raise ValueError(f"layers must be one of {LAYER_CHOICES}, got {layers!r}.")
    if not _has_elmo(nlp):
        raise ValueError(f"The pipeline has no 'elmo' component (it has {nlp.pipe_names}).")
    lines = _read_lines(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    try:
        with h5py.File(temporary, "w") as output:
            docs = nlp.pipe(_docs(nlp, lines, tokenized), batch_size=batch_size)
            for index, doc in enumerate(tqdm(docs, total=len(lines), unit="line", desc="Embedding")):
                output.create_dataset(str(index), data=_select(doc._.elmo_data, layers))
            index_map = {line: str(i) for i, line in enumerate(lines)}
            output.create_dataset("sentence_to_index", data=json.dumps(index_map))
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(lines)


def _has_elmo(nlp: Language) -> bool:
    return any(nlp.get_pipe_meta(name).factory == "elmo" for name in nlp.pipe_names)


def _read_lines(source: Path) -> List[str]:
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{source}: file not found.") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{source} is not valid UTF-8 (byte {err.start}): {err.reason}.") from None
    return text.splitlines()


def _docs(nlp: Language, lines: List[str], tokenized: bool) -> Iterator[Doc]:
    for line in lines:
        yield Doc(nlp.vocab, words=line.split()) if tokenized else nlp.make_doc(line)


def _select(data: np.ndarray, layers: str) -> np.ndarray:
    if layers == "top":
        return data[-1]
    if layers == "average":
        return data.mean(axis=0)
    return data
