"""Embeddings in HDF5, in the layout of the original ``allennlp elmo`` command: one dataset per input
line (named by its line number in the corpus) and a ``sentence_to_index`` dataset holding a JSON
object from line text to dataset name. Each block of an embedded corpus is such a file (with its
first line, line and token counts as attributes); ``--merge-hdf5`` joins them into one. Where asked
(``--store-tokens``), a ``tokens`` group holds each line's tokens as a string array of the same
name, so that vectors of untokenized text can be mapped back to its words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc

from ..choices import choose
from ..pipeline.storage import stored_layers

# What is stored per line, from its layers (L+1, T, 2P).
LAYER_SELECTIONS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "all": lambda data: data,  # (L+1, T, 2P)
    "top": lambda data: data[-1],  # (T, 2P)
    "average": lambda data: data.mean(axis=0),  # (T, 2P)
}
SENTENCE_INDEX = "sentence_to_index"
TOKENS = "tokens"


def write_embeddings(
    nlp: Language,
    lines: List[str],
    path: Path,
    first_index: int = 0,
    layers: str = "all",
    tokenized: bool = False,
    batch_size: int = 64,
    on_line: Callable[[], None] = lambda: None,
    store_tokens: bool = False,
) -> int:
    """Embed ``lines`` into a new HDF5 file at ``path``: dataset ``str(first_index + i)`` per line,
    their ``sentence_to_index``; returns the number of tokens.

    layers: "all" stores (L+1, T, 2P) per line, "top" the last layer (T, 2P), "average" the mean
    of all layers (T, 2P). tokenized: lines are already tokenized, split on whitespace; otherwise
    the pipeline's tokenizer runs. ``on_line`` is called after each line (progress).
    ``store_tokens``: each line's tokens too, in the ``tokens`` group.
    """
    import h5py

    select = choose(LAYER_SELECTIONS, "layers", layers)
    tokens = 0
    with h5py.File(path, "w") as output:
        words = output.create_group(TOKENS) if store_tokens else None
        for index, doc in enumerate(nlp.pipe(_docs(nlp, lines, tokenized), batch_size=batch_size)):
            output.create_dataset(str(first_index + index), data=select(stored_layers(doc)))
            if words is not None:
                texts = np.array([token.text for token in doc], dtype=h5py.string_dtype())
                words.create_dataset(str(first_index + index), data=texts, shape=(len(doc),))
            tokens += len(doc)
            on_line()
        output.create_dataset(SENTENCE_INDEX, data=json.dumps(sentence_index(lines, first_index)))
        output.attrs.update(first_line=first_index, lines=len(lines), tokens=tokens)
    return tokens


def tokens_in(path: Path) -> int:
    """The token count a file written by ``write_embeddings`` records."""
    import h5py

    with h5py.File(path, "r") as handle:
        return int(handle.attrs["tokens"])


def sentence_index(lines: List[str], first_index: int = 0) -> Dict[str, str]:
    """Line text -> dataset name (a repeated line: its last)."""
    return {line: str(first_index + i) for i, line in enumerate(lines)}


def _docs(nlp: Language, lines: List[str], tokenized: bool) -> Iterator[Doc]:
    for line in lines:
        yield Doc(nlp.vocab, words=line.split()) if tokenized else nlp.make_doc(line)
