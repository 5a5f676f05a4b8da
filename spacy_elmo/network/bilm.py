"""The biLM of Peters et al. (2018) as torch modules: its config and parameters, nothing else.

token strings -> ``TokenIndexer`` (chars.py) -> char ids (B, T, C) [+ word ids (B, T)] ->
``CharEncoder`` (char_encoder.py) -> token representations (N, P) for the N real tokens ->
forward and backward stacks of ``LstmLayer`` (lstm_layer.py; separate weights, residual between
layers) -> layers (L+1, B, T, 2P): layer 0 is the token representation repeated for both directions.

A ``BiLM`` is data (as nanoGPT's model): calling it runs the differentiable path of pretraining.
Inference, bitwise independent of a sentence's batch companions, is a ``BiLMRunner``'s
(``runner``), which holds what running needs beside the weights (the backend for the device and
precision, the caches, the carried state): running a biLM changes nothing in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kernels.devices import upload
from ..kernels.lstm_steps import LstmStacks, LstmState, run_stacks
from .char_encoder import CharEncoder
from .chars import CharTable, TokenIndexer
from .config import BiLMConfig, ConfigError
from .lstm_layer import LstmLayer, training_runner


class LMHead(nn.Module):
    """Softmax over the word vocabulary, shared by both directions: (M, P) -> logits (M, V)."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.weight, std=dim**-0.5)  # skipped on the meta device (weights.native)

    def forward(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden, self.weight, self.bias)


@dataclass
class BiLMOutput:
    """layers: (L+1, B, T, 2P), zero at padding positions; mask: (B, T) bool, True for tokens."""

    layers: Tensor
    mask: Tensor

    @classmethod
    def padded(cls, layers: Tensor, mask: Tensor) -> "BiLMOutput":
        """Packed layers (L+1, N, 2P) placed at the mask's N token positions."""
        padded = layers.new_zeros(layers.shape[0], *mask.shape, layers.shape[-1])
        padded[:, mask] = layers
        return cls(layers=padded, mask=mask)


class BiLM(nn.Module):
    """The bidirectional language model: ``config`` and the modules it sizes. See the module
    docstring for the data flow; ``BiLMRunner(bilm, precision=...)`` runs it for inference."""

    def __init__(self, config: BiLMConfig, indexer: Optional[TokenIndexer] = None) -> None:
        """``indexer`` maps token strings to ids; needed for models with their own vocabulary
        (``config.needs_vocabulary``), the original byte mapping otherwise."""
        super().__init__()
        self.config = config
        proj = config.projection_dim
        self.indexer = checked_indexer(config, indexer)
        self.char_encoder = CharEncoder(config, pad_id=self.indexer.chars.pad_id)
        self.forward_layers = nn.ModuleList(LstmLayer(proj, config) for _ in range(config.n_layers))
        self.backward_layers = nn.ModuleList(LstmLayer(proj, config) for _ in range(config.n_layers))
        self.lm_head = LMHead(config.vocab_size, proj) if config.vocab_size else None

    @property
    def device(self) -> torch.device:
        return self.char_encoder.projection.weight.device

    @property
    def stacks(self) -> LstmStacks:
        """The two stacks of LSTM layers as the backends read them."""
        return LstmStacks(list(self.forward_layers), list(self.backward_layers), self.config.residual)

    def encode_tokens(self, tokens: Sequence[str]) -> Tuple[Tensor, Optional[Tensor]]:
        """N token strings -> (char ids (N, C), word ids (N,) or None), long, on the bilm's device."""
        return self.on_device(*self.indexer.encode(tokens))

    def on_device(self, chars: np.ndarray, words: Optional[np.ndarray]) -> Tuple[Tensor, Optional[Tensor]]:
        """Char ids (N, C) and word ids (N,) or None from the host, long, on the bilm's device."""
        word_ids = upload(torch.from_numpy(words), self.device) if words is not None else None
        return upload(torch.from_numpy(chars), self.device, torch.long), word_ids

    def forward(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> BiLMOutput:
        """The differentiable path on a padded batch: char_ids (B, T, C), 0 at padding positions (a
        sentence's tokens first), and word ids (B, T) for models with a word embedding -> BiLMOutput.
        Dropout in train mode; inference is ``BiLMRunner``'s."""
        mask, lengths = padding_mask(char_ids)
        words = word_ids[mask] if word_ids is not None else None
        layers = self.contextualize_for_training(self.char_encoder(char_ids[mask], words), lengths.tolist())
        return BiLMOutput.padded(layers, mask)

    def contextualize_for_training(self, tokens: Tensor, lengths: Sequence[int]) -> Tensor:
        """Training (and its evaluation): the differentiable path, with dropout in train mode and
        TF32 where the process allows it. tokens (N, P), B lengths -> layers (L+1, N, 2P)."""
        check_lengths(tokens, lengths)
        run = training_runner(self.stacks, list(lengths), tokens.device)
        dropout = self.config.dropout if self.training else None
        layers, _ = run_stacks(self.config.n_layers, self.config.residual, run, tokens, dropout=dropout)
        return layers

    def new_state(self, batch_size: int) -> LstmState:
        """A zero LSTM state for ``batch_size`` sentences (stateful runs)."""
        return LstmState.zeros(
            self.config.n_layers,
            batch_size,
            self.config.projection_dim,
            self.config.lstm_dim,
            self.device,
            self.char_encoder.projection.weight.dtype,
        )

    def parameter_count(self, include_lm_head: bool = False) -> int:
        skip = set() if include_lm_head or self.lm_head is None else {id(p) for p in self.lm_head.parameters()}
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)


def checked_indexer(config: BiLMConfig, indexer: Optional[TokenIndexer]) -> TokenIndexer:
    """``indexer`` (default: the byte mapping) after checking that it fits ``config``'s sizes."""
    if indexer is None:
        if config.needs_vocabulary:
            raise ConfigError(
                f"This biLM config (char_vocabulary={config.char_vocabulary!r}, word_dim={config.word_dim}) reads "
                "tokens through its own vocabulary: pass BiLM(config, indexer=TokenIndexer(...)), or load the "
                "model with load_bilm / import_efml, which read it."
            )
        indexer = TokenIndexer()
    chars, words = indexer.chars, indexer.words
    if chars.kind != config.char_vocabulary:
        raise ConfigError(
            f"The indexer encodes characters as {chars.kind!r}, the config says {config.char_vocabulary!r}."
        )
    if isinstance(chars, CharTable) and (
        chars.n_characters > config.n_characters or chars.max_length != config.max_characters_per_token
    ):
        raise ConfigError(
            f"The char table needs {chars.n_characters} embedding rows and {chars.max_length} chars per token; "
            f"the config has n_characters={config.n_characters}, "
            f"max_characters_per_token={config.max_characters_per_token}."
        )
    if (words is not None) != (config.word_dim > 0):
        raise ConfigError(
            f"The config's word_dim is {config.word_dim} but the indexer {'has' if words else 'has no'} word table."
        )
    if words is not None and words.size > config.word_vocab_size:
        raise ConfigError(
            f"The word table needs {words.size} embedding rows; the config has "
            f"word_vocab_size={config.word_vocab_size}."
        )
    return indexer


def padding_mask(char_ids: Tensor) -> Tuple[Tensor, Tensor]:
    """char_ids (B, T, C) -> the mask of tokens (B, T) and each sentence's length (B,); raises
    ValueError where a padding position comes before a token."""
    mask = char_ids.gt(0).any(dim=-1)
    lengths = mask.sum(dim=1)
    prefix = torch.arange(mask.shape[1], device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
    if not torch.equal(mask, prefix):
        raise ValueError(
            "char_ids must hold each sentence's tokens first and padding (all-zero rows) after; "
            "found a padding position before a token."
        )
    return mask, lengths


def check_lengths(tokens: Tensor, lengths: Sequence[int]) -> None:
    if sum(lengths) != tokens.shape[0]:
        raise ValueError(f"lengths sum to {sum(lengths)} but {tokens.shape[0]} tokens were given.")
