"""Embeddings in HDF5, in the layout of the original ``allennlp elmo`` command: one dataset per input
line (named by its line number, from "0") and a ``sentence_to_index`` dataset holding a JSON object
from line text to dataset name. ``corpus_embed`` runs this over a whole file in shards."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc

from ..choices import choose
from ..pipeline.storage import stored_layers

if TYPE_CHECKING:
    import h5py

# What is stored per line, from its layers (L+1, T, 2P).
LAYER_SELECTIONS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "all": lambda data: data,  # (L+1, T, 2P)
    "top": lambda data: data[-1],  # (T, 2P)
    "average": lambda data: data.mean(axis=0),  # (T, 2P)
}


def write_embeddings(
    nlp: Language,
    lines: List[str],
    path: Path,
    first_index: int = 0,
    layers: str = "all",
    tokenized: bool = False,
    batch_size: int = 64,
    on_line: Callable[[], None] = lambda: None,
) -> None:
    """Embed ``lines`` into a new HDF5 file at ``path``: dataset ``str(first_index + i)`` per line.

    layers: "all" stores (L+1, T, 2P) per line, "top" the last layer (T, 2P), "average" the mean
    of all layers (T, 2P). tokenized: lines are already tokenized, split on whitespace; otherwise
    the pipeline's tokenizer runs. ``on_line`` is called after each line (progress).
    """
    import h5py

    select = choose(LAYER_SELECTIONS, "layers", layers)
    with h5py.File(path, "w") as output:
        for index, doc in enumerate(nlp.pipe(_docs(nlp, lines, tokenized), batch_size=batch_size)):
            output.create_dataset(str(first_index + index), data=select(stored_layers(doc)))
            on_line()


def read_lines(source: Path) -> List[str]:
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


def write_sentence_index(output: h5py.File, lines: List[str]) -> None:
    """The ``sentence_to_index`` dataset: line text -> dataset name (a repeated line: its last)."""
    import json

    output.create_dataset("sentence_to_index", data=json.dumps({line: str(i) for i, line in enumerate(lines)}))
