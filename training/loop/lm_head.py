"""The biLM's LM head at both ends of a run: built for the run's vocabulary (a new biLM, or one
continued from ``init_from`` that keeps the rows of the words both vocabularies share), and
stripped from the final weights (the elmo component has no use for it)."""

from __future__ import annotations

from pathlib import Path

import torch

from spacy_elmo.network.bilm import BiLM
from spacy_elmo.network.config import BiLMConfig
from spacy_elmo.weights.native import load_bilm, save_bilm

from ..vocab import Vocabulary
from .checkpoint import resolve_checkpoint
from .train_config import TrainConfig


def build_bilm(cfg: TrainConfig, vocab: Vocabulary) -> BiLM:
    """A new biLM of the preset's size, or one continued from ``init_from`` with a head for this
    vocabulary (rows of words it shares with the source's vocabulary are kept)."""
    if not cfg.init_from:
        config = BiLMConfig.preset(cfg.preset, **cfg.model, vocab_size=len(vocab), dropout=cfg.dropout)
        return BiLM(config)
    source_dir = resolve_checkpoint(Path(cfg.init_from))
    source = load_bilm(source_dir)
    bilm = BiLM(source.config.replace(vocab_size=len(vocab), dropout=cfg.dropout), source.indexer)
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("lm_head.")}
    bilm.load_state_dict(state, strict=False)
    source_vocab = source_dir / "vocab.txt"
    if source.lm_head is not None and source_vocab.is_file():
        _copy_shared_rows(source, Vocabulary.load(source_vocab), bilm, vocab)
    return bilm


def _copy_shared_rows(source: BiLM, source_vocab: Vocabulary, bilm: BiLM, vocab: Vocabulary) -> None:
    """Copy the source head's weight and bias rows of every word in both vocabularies."""
    old_rows = {w: row for w, row in source_vocab.index.items() if row < source.config.vocab_size}
    shared = [(i, old_rows[w]) for i, w in enumerate(vocab.words) if w in old_rows]
    with torch.no_grad():
        for new_row, old_row in shared:
            bilm.lm_head.weight[new_row] = source.lm_head.weight[old_row]
            bilm.lm_head.bias[new_row] = source.lm_head.bias[old_row]


def vocab_path(cfg: TrainConfig) -> Path:
    """The configured vocab.txt, else the one of the model given as init_from."""
    if cfg.vocab:
        return Path(cfg.vocab)
    source_vocab = resolve_checkpoint(Path(cfg.init_from)) / "vocab.txt" if cfg.init_from else None
    if source_vocab and source_vocab.is_file():
        return source_vocab
    raise ValueError(
        "No vocabulary: set vocab (from `python -m spacy_elmo.training.vocab`), or init_from a checkpoint that has one."
    )


def strip_lm_head(bilm: BiLM, directory: Path) -> Path:
    """Save the biLM without its LM head as native weights in ``directory``: what the elmo
    component loads."""
    plain = BiLM(bilm.config.replace(vocab_size=0), bilm.indexer)
    plain.load_state_dict({k: v for k, v in bilm.state_dict().items() if not k.startswith("lm_head.")})
    return save_bilm(plain, directory)
