"""The context-independent half of the biLM: token characters -> token representations.

Char embedding, one convolution per filter width with max-pooling over positions, highway
layers, an optional word embedding, and a projection: char ids (N, C) [+ word ids (N,)] -> (N, P).
One forward pass (``CharEncoder.encode``) for every path, each bringing its ops: a backend's for
inference (each token's row bitwise independent of the others), torch's own for pretraining.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Protocol, Sequence, Tuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .chars import CHAR_PAD
from .config import BiLMConfig


class _Conv1d(Protocol):
    """What the encoder reads of its ``nn.Conv1d`` layers (all made with a bias)."""

    weight: Tensor
    bias: Tensor
    kernel_size: Tuple[int, ...]
    out_channels: int


# A matmul with bias, as each path computes it: x (N, K), weight (M, K), bias (M,) -> (N, M)
Linear = Callable[[Tensor, Tensor, Optional[Tensor]], Tensor]


class Ops(Protocol):
    """What the encoder's forward pass calls (a backend, ``kernels.backends.Backend``, or
    ``AUTOGRAD``); shapes as there."""

    def conv_max(self, chars: Tensor, convs: Sequence[Any]) -> Tensor: ...

    def linear(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor] = None,
        *,
        rows: Optional[int] = None,
        fine_inputs: bool = False,
    ) -> Tensor: ...

    def sigmoid_(self, x: Tensor) -> Tensor: ...

    def activation_(self, x: Tensor, name: str) -> Tensor: ...


class BlockOps(Ops, Protocol):
    """A backend as inference calls it: ``Ops`` and how many tokens it takes at once."""

    def token_blocks(self, tokens: int) -> Tuple[int, int]: ...


class AutogradOps:
    """The differentiable path's ops (pretraining and its dev perplexity): torch's own."""

    def conv_max(self, chars: Tensor, convs: Sequence[Any]) -> Tensor:
        """chars (n, C', E) -> each filter's best window score (n, F), without bias."""
        x = chars.transpose(1, 2)  # (n, E, C')
        return torch.cat([F.conv1d(x, conv.weight).amax(dim=2) for conv in convs], dim=1)

    def linear(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor] = None,
        *,
        rows: Optional[int] = None,
        fine_inputs: bool = False,
    ) -> Tensor:
        """``F.linear``; ``rows`` and ``fine_inputs``, which a backend reads, mean nothing here."""
        return F.linear(x, weight, bias)

    def sigmoid_(self, x: Tensor) -> Tensor:
        return x.sigmoid_()

    def activation_(self, x: Tensor, name: str) -> Tensor:
        return x.relu_() if name == "relu" else x.tanh_()


AUTOGRAD = AutogradOps()


class Highway(nn.Module):
    """y = g * relu(x W_t + b_t) + (1 - g) * x with g = sigmoid(x W_g + b_g); (N, F) -> (N, F)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        """Through torch's own matmuls (the encoder calls ``compute`` with each path's)."""
        return self.compute(x, F.linear, Tensor.sigmoid_)

    def compute(self, x: Tensor, linear: Linear, sigmoid_: Callable[[Tensor], Tensor]) -> Tensor:
        """The layer's one definition, which every path runs with its own ``linear`` and in-place
        ``sigmoid_`` (both act on fresh matmul outputs, so in place is safe under autograd)."""
        gate = sigmoid_(linear(x, self.gate.weight, self.gate.bias))
        transform = linear(x, self.transform.weight, self.transform.bias).relu_()
        return gate * transform + (1 - gate) * x


class CharEncoder(nn.Module):
    """Context-independent token representation: char ids (N, C) [+ word ids (N,)] -> (N, P).

    Char embedding, one convolution per filter width, max over positions, activation, highway
    layers; with a word embedding (``config.word_dim`` > 0), ``[word vector; highway output]`` (the
    order of ELMoForManyLangs); then a linear projection. Characters after a token's end are
    trimmed before the convolutions: windows made only of the pad character (``pad_id``) all give
    the same value, which is added back to the max exactly wherever the character axis is narrower
    than the ``max_characters_per_token`` columns every token is padded to.
    """

    def __init__(self, config: BiLMConfig, pad_id: int = CHAR_PAD) -> None:
        super().__init__()
        self.config = config
        self.pad_id = pad_id
        n_filters, dim = config.n_filters, config.char_embedding_dim
        self.embedding = nn.Embedding(config.n_characters, dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(dim, count, width) for width, count in config.filters)
        self.highways = nn.ModuleList(Highway(n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.word_dim + n_filters, config.projection_dim)
        self.word_embedding = nn.Embedding(config.word_vocab_size, config.word_dim) if config.word_dim else None

    def forward(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> Tensor:
        """Differentiable path (pretraining): char_ids (N, C), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        return self.encode(self.trim(char_ids), word_ids, AUTOGRAD)

    @torch.no_grad()
    def represent(
        self, char_ids: Tensor, word_ids: Optional[Tensor], ops: "BlockOps", already_cut: bool = False
    ) -> Tensor:
        """Inference through a backend (``ops``): a token's representation is bitwise independent of
        the others. Tokens run in blocks of ``ops.token_blocks``, the last padded with pad tokens to
        its multiple; each block is cut after its longest token unless the call is one block whose
        characters were cut on the host (``already_cut``: finding the longest token on a GPU waits
        for it). char_ids (N, C), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        n_tokens = char_ids.shape[0]
        block, pad_to = ops.token_blocks(n_tokens)
        if n_tokens == 0:
            return char_ids.new_empty((0, self.config.projection_dim), dtype=self.projection.weight.dtype)
        if block >= n_tokens and n_tokens % pad_to == 0:  # one block, nothing to pad
            return self.encode(char_ids if already_cut else self.trim(char_ids), word_ids, ops)
        out = char_ids.new_empty((n_tokens, self.config.projection_dim), dtype=self.projection.weight.dtype)
        for start in range(0, n_tokens, block):
            ids = char_ids[start : start + block]
            words = word_ids[start : start + block] if word_ids is not None else None
            missing = -ids.shape[0] % pad_to
            if missing:
                ids = torch.cat([ids, ids.new_full((missing, ids.shape[1]), self.pad_id)])
                words = torch.cat([words, words.new_zeros(missing)]) if words is not None else None
            out[start : start + block] = self.encode(self.trim(ids), words, ops)[: n_tokens - start]
        return out

    def encode(self, ids: Tensor, word_ids: Optional[Tensor], ops: "Ops") -> Tensor:
        """The encoder's one forward pass, through ``ops`` (a backend, or ``AUTOGRAD``): ids (n, C')
        cut after the longest token (``trim``), word_ids (n,) or None -> (n, P)."""
        convs = list(self._conv_layers())
        best = ops.conv_max(self.embedding(ids), convs)  # (n, F)
        if self._is_cut(ids):  # the windows of padding alone, cut off with the trimmed characters
            widest = max(width for width, _ in self.config.filters)
            pads = self.embedding.weight[self.pad_id].expand(1, widest, -1)
            best = torch.maximum(best, ops.conv_max(pads, convs))
        best += torch.cat([conv.bias for conv in convs])
        x = ops.activation_(best, self.config.activation)
        n_tokens = x.shape[0]
        for highway in self._highway_layers():  # the block as one shape: rows=n_tokens
            x = highway.compute(x, lambda x, w, b: ops.linear(x, w, b, rows=n_tokens), ops.sigmoid_)
        if word_ids is not None:
            assert self.word_embedding is not None  # _check_word_ids: word ids come with a word embedding
            x = torch.cat([self.word_embedding(word_ids), x], dim=1)
        return ops.linear(x, self.projection.weight, self.projection.bias, rows=n_tokens, fine_inputs=True)

    def _conv_layers(self) -> Iterable[_Conv1d]:
        """``self.convs``, typed (to a type checker an ``nn.ModuleList`` holds plain Modules)."""
        return cast("Iterable[_Conv1d]", self.convs)

    def _highway_layers(self) -> Iterable[Highway]:
        """``self.highways``, typed."""
        return cast("Iterable[Highway]", self.highways)

    def _check_word_ids(self, word_ids: Optional[Tensor]) -> None:
        if self.word_embedding is None and word_ids is not None:
            raise ValueError("Word ids were given, but this biLM has no word embedding (word_dim = 0); pass None.")
        if self.word_embedding is not None and word_ids is None:
            raise ValueError(
                f"This biLM has a word embedding (word_dim = {self.config.word_dim}) and needs word ids "
                "beside the char ids: get both from bilm.encode_tokens(strings)."
            )

    def cut_characters(self, char_ids: np.ndarray) -> np.ndarray:
        """Char ids (N, C) on the host -> (N, C'), cut as ``trim`` would cut them on the
        device (in NumPy: no wait for a GPU, no thread pool woken for a small array); pass
        them on with ``already_cut``."""
        real = (char_ids != self.pad_id) & (char_ids != 0)
        used = np.flatnonzero(real.any(axis=0))
        keep = self._kept_columns(int(used[-1]) + 1 if used.size else 0, char_ids.shape[1])
        return np.ascontiguousarray(char_ids[:, :keep])

    def trim(self, char_ids: Tensor) -> Tensor:
        """Char ids (N, C) -> (N, C'), the character axis cut as ``_kept_columns`` says."""
        real = (char_ids != self.pad_id) & (char_ids != 0)
        longest = int(real.any(dim=0).nonzero().max()) + 1 if bool(real.any()) else 0
        return char_ids[:, : self._kept_columns(longest, char_ids.shape[1])]

    def _is_cut(self, ids: Tensor) -> bool:
        """Whether windows of padding alone were cut off ``ids`` (N, C'): every token has
        ``max_characters_per_token`` columns, so any fewer were cut after its end."""
        return ids.shape[-1] < self.config.max_characters_per_token

    def _kept_columns(self, longest: int, n_chars: int) -> int:
        """Of ``n_chars`` columns, those up to the longest token's last character (``longest``
        columns) plus (widest filter - 1) pads: every window touching a real character."""
        widest = max(width for width, _ in self.config.filters)
        return min(n_chars, max(longest + widest - 1, widest))
