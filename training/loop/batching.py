"""Sentence-level training batches under a token budget, bucketed by length, in a deterministic
order that a resumed run repeats exactly.

The training shards are dealt to ``n_streams`` data streams (shard i to stream i % n_streams). Each
stream walks its own sentences epoch after epoch, in an order fixed by (seed, stream, epoch), one
batch of ``batch_tokens / n_streams`` tokens per step. A process handles one or more streams, so
the global batch of a step is the same whether 1 process or n_streams processes run it, and a run
can resume on another number of processes with the same data order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from spacy_elmo.network.chars import BOS_TOKEN, EOS_TOKEN, TokenIndexer

from ..corpus import read_shard, shard_paths
from ..vocab import Vocabulary


class TokenTable:
    """Every distinct token string seen, with its vocabulary id; ids 0 and 1 are <S> and </S>.

    ``indexer`` is the biLM's (``bilm.indexer``): it turns the strings into the char ids (and word
    ids, for a biLM with a word embedding) that the biLM reads; default the original byte mapping.
    """

    def __init__(self, vocab: Vocabulary, indexer: Optional[TokenIndexer] = None) -> None:
        self.vocab = vocab
        self.indexer = indexer or TokenIndexer()
        self.strings: List[str] = []
        self.index: Dict[str, int] = {}
        self.word_id_list: List[int] = []
        self.ids([BOS_TOKEN, EOS_TOKEN])

    def __len__(self) -> int:
        return len(self.strings)

    def ids(self, tokens: Sequence[str]) -> np.ndarray:
        out = np.empty(len(tokens), dtype=np.int32)
        for position, token in enumerate(tokens):
            index = self.index.get(token)
            if index is None:
                index = self.index[token] = len(self.strings)
                self.strings.append(token)
                self.word_id_list.append(self.vocab.id(token))
            out[position] = index
        return out

    def char_ids(self, type_ids: Tensor) -> Tensor:
        """(U,) type ids -> (U, C) char ids."""
        return self.model_inputs(type_ids)[0]

    def model_inputs(self, type_ids: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """(U,) type ids -> (char ids (U, C), ids in the biLM's word embedding (U,) or None)."""
        boundaries = {0: self.indexer.bos_token, 1: self.indexer.eos_token}  # as the biLM names them
        strings = [boundaries.get(i, self.strings[i]) for i in type_ids.tolist()]
        chars, words = self.indexer.encode(strings)
        return torch.from_numpy(chars).long(), (torch.from_numpy(words) if words is not None else None)

    def word_ids(self, type_ids: Tensor) -> Tensor:
        return torch.tensor(self.word_id_list, dtype=torch.long)[type_ids]


@dataclass
class SentenceArray:
    """Sentences as type ids: sentence i is ids[offsets[i]:offsets[i + 1]]."""

    ids: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_shards(cls, paths: Sequence[Path], table: TokenTable) -> "SentenceArray":
        parts, lengths = [], []
        for path in paths:
            for tokens in read_shard(path):
                if tokens:
                    parts.append(table.ids(tokens))
                    lengths.append(len(tokens))
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(ids=np.concatenate(parts) if parts else np.zeros(0, np.int32), offsets=offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sentence(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index] : self.offsets[index + 1]]


class Stream:
    """One data stream: its sentences and where it is (epoch, batch index)."""

    def __init__(self, sentences: SentenceArray, batch_tokens: int, seed: int, number: int) -> None:
        if len(sentences) == 0:
            raise ValueError(f"Data stream {number} has no sentences; use fewer streams or more shards.")
        self.sentences, self.batch_tokens, self.seed, self.number = sentences, batch_tokens, seed, number
        self.epoch, self.position = 0, 0
        self._plan = self.plan(0)

    def plan(self, epoch: int) -> List[np.ndarray]:
        """The epoch's batches (sentence indices): shuffled, sorted by length within windows of
        about 100 batches, cut under the token budget (boundaries counted), batches shuffled."""
        rng = np.random.default_rng([self.seed, self.number, epoch])
        lengths = self.sentences.lengths + 2
        order = rng.permutation(len(lengths))
        window = max(1, int(100 * self.batch_tokens / max(1.0, float(lengths.mean()))))
        batches: List[np.ndarray] = []
        for start in range(0, len(order), window):
            chunk = order[start : start + window]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches.extend(_cut(chunk, lengths[chunk], self.batch_tokens))
        return [batches[i] for i in rng.permutation(len(batches))]

    def next_batch(self) -> np.ndarray:
        if self.position >= len(self._plan):
            self.epoch, self.position = self.epoch + 1, 0
            self._plan = self.plan(self.epoch)
        batch = self._plan[self.position]
        self.position += 1
        return batch

    def state(self) -> Tuple[int, int]:
        return self.epoch, self.position

    def restore(self, epoch: int, position: int) -> None:
        self.epoch, self.position = epoch, position
        self._plan = self.plan(epoch)


def _cut(indices: np.ndarray, lengths: np.ndarray, budget: int) -> List[np.ndarray]:
    batches, start, total = [], 0, 0
    for i, length in enumerate(lengths.tolist()):
        if i > start and total + length > budget:
            batches.append(indices[start:i])
            start, total = i, 0
        total += length
    if start < len(indices):
        batches.append(indices[start:])
    return batches


def open_streams(
    directory: Path, numbers: Sequence[int], n_streams: int, batch_tokens: int, seed: int, table: TokenTable
) -> List[Stream]:
    """The streams ``numbers`` of ``n_streams`` over the shards in ``directory``."""
    shards = shard_paths(directory)
    if n_streams > len(shards):
        raise ValueError(
            f"{directory} has {len(shards)} shards but {n_streams} data streams were asked for; "
            "prepare the corpus with a smaller --shard-size or run fewer streams."
        )
    per_stream = max(1, batch_tokens // n_streams)
    return [Stream(SentenceArray.from_shards(shards[k::n_streams], table), per_stream, seed, k) for k in numbers]


@dataclass
class TrainingBatch:
    """Sentences with their boundaries, packed: type_ids and word_ids (N,), lengths (B,).
    Forward predictions: hidden at forward_source predicts the word at forward_source + 1;
    backward: hidden at backward_source predicts the word at backward_source - 1.
    unique_types (U,) and inverse (N,) let the char encoder run once per distinct token:
    char_ids (U, C) and, for a biLM with a word embedding, embedding_word_ids (U,)."""

    type_ids: Tensor
    word_ids: Tensor
    lengths: List[int]
    forward_source: Tensor
    backward_source: Tensor
    unique_types: Tensor
    inverse: Tensor
    char_ids: Tensor
    embedding_word_ids: Optional[Tensor] = None

    @property
    def n_targets(self) -> int:
        """Predictions per direction."""
        return int(self.forward_source.shape[0])

    def to(self, device) -> "TrainingBatch":
        moved = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.__dict__.items()}
        return TrainingBatch(**moved)


def make_batch(sentences: Sequence[np.ndarray], table: TokenTable) -> TrainingBatch:
    """Type-id sentences (without boundaries) -> TrainingBatch."""
    pieces = [np.concatenate([[0], sentence, [1]]).astype(np.int64) for sentence in sentences]
    type_ids = torch.from_numpy(np.concatenate(pieces)) if pieces else torch.zeros(0, dtype=torch.long)
    lengths = [len(p) for p in pieces]
    starts = np.cumsum([0] + lengths[:-1])
    forward = (
        np.concatenate([np.arange(s, s + n - 1) for s, n in zip(starts, lengths, strict=True)])
        if pieces
        else np.zeros(0)
    )
    unique, inverse = torch.unique(type_ids, return_inverse=True)
    char_ids, embedding_word_ids = table.model_inputs(unique)
    return TrainingBatch(
        type_ids=type_ids,
        word_ids=table.word_ids(type_ids),
        lengths=lengths,
        forward_source=torch.from_numpy(forward.astype(np.int64)),
        backward_source=torch.from_numpy(forward.astype(np.int64) + 1),
        unique_types=unique,
        inverse=inverse,
        char_ids=char_ids,
        embedding_word_ids=embedding_word_ids,
    )


def batches_in_order(sentences: Iterable[np.ndarray], table: TokenTable, batch_tokens: int) -> List[TrainingBatch]:
    """Type-id sentences, in the order given, cut into batches under the token budget (evaluation)."""
    batches, current, size = [], [], 0
    for sentence in sentences:
        if current and size + len(sentence) + 2 > batch_tokens:
            batches.append(make_batch(current, table))
            current, size = [], 0
        current.append(sentence)
        size += len(sentence) + 2
    if current:
        batches.append(make_batch(current, table))
    return batches


def dev_batches(corpus: Path, table: TokenTable, max_tokens: int, batch_tokens: int) -> List[TrainingBatch]:
    """The first ``max_tokens`` tokens of the corpus' dev split, in batches (the same every evaluation)."""
    sentences = SentenceArray.from_shards(shard_paths(corpus / "dev"), table)
    chosen, total = [], 0
    for index in range(len(sentences)):
        if total >= max_tokens:
            break
        chosen.append(sentences.sentence(index))
        total += len(chosen[-1]) + 2
    return batches_in_order(chosen, table, batch_tokens)
