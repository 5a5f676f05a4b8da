"""The context-independent half of the biLM: token characters -> token representations.

Char embedding, one convolution per filter width with max-pooling over positions, highway
layers, an optional word embedding, and a projection: char ids (N, C) [+ word ids (N,)] -> (N, P).
Two paths: a differentiable one for pretraining, and a batch-invariant one for inference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Protocol, Tuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kernels.batch_invariant import elementwise_
from ..kernels.kernel_set import Kernels
from .chars import CHAR_PAD
from .config import BiLMConfig

if TYPE_CHECKING:
    from ..kernels.triton_ops import TritonOps


class _Conv1d(Protocol):
    """What the encoder reads of its ``nn.Conv1d`` layers (all made with a bias)."""

    weight: Tensor
    bias: Tensor
    kernel_size: Tuple[int, ...]
    out_channels: int


# A matmul with bias, as each path computes it: x (N, K), weight (M, K), bias (M,) -> (N, M)
Linear = Callable[[Tensor, Tensor, Optional[Tensor]], Tensor]


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
        self._activation = torch.relu if config.activation == "relu" else torch.tanh

    def forward(self, char_ids: Tensor, word_ids: Optional[Tensor] = None) -> Tensor:
        """Differentiable path. char_ids (N, C), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        ids = self.trim(char_ids)
        chars = self.embedding(ids).transpose(1, 2)  # (N, E, C')
        pad_windows = self._pad_windows() if self._is_cut(ids) else None
        features = []
        for index, conv in enumerate(self._conv_layers()):
            best = F.conv1d(chars, conv.weight).amax(dim=2)  # (N, F_w)
            if pad_windows is not None:
                best = torch.maximum(best, pad_windows[index])
            features.append(self._activation(best + conv.bias))
        return self._highways_and_projection(torch.cat(features, dim=1), word_ids, F.linear, Tensor.sigmoid_)

    @torch.no_grad()
    def encode_in_blocks(self, char_ids: Tensor, word_ids: Optional[Tensor], kernels: Kernels) -> Tensor:
        """Batch-invariant path of the CPU's kernels: a token's representation is bitwise
        independent of the others. Tokens run in blocks of ``kernels.token_blocks()``: on fixed
        shapes each block padded whole; where matmul rows do not depend on the row count, the last
        padded only to a multiple of 32 tokens (whole SIMD blocks for the elementwise functions).
        char_ids (N, C), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        block, pad_to = kernels.token_blocks()
        n_tokens = char_ids.shape[0]
        out = char_ids.new_empty((n_tokens, self.config.projection_dim), dtype=self.projection.weight.dtype)
        pad_windows = self._pad_windows(kernels)
        for start in range(0, n_tokens, block):
            ids = char_ids[start : start + block]
            words = word_ids[start : start + block] if word_ids is not None else None
            missing = -ids.shape[0] % pad_to
            if missing:
                ids = torch.cat([ids, ids.new_full((missing, ids.shape[1]), self.pad_id)])
                words = torch.cat([words, words.new_zeros(missing)]) if words is not None else None
            encoded = self._encode_block(ids, words, pad_windows, kernels)
            out[start : start + block] = encoded[: n_tokens - start]
        return out

    @torch.no_grad()
    def encode_at_once(self, ids: Tensor, word_ids: Optional[Tensor], ops: "TritonOps") -> Tensor:
        """Batch-invariant path of the Triton kernels: every token in one call at its own size (a
        token's rows do not depend on the others'). ids (N, C') cut after the longest token
        (``trim``), word_ids (N,) or None -> (N, P)."""
        self._check_word_ids(word_ids)
        convs = list(self._conv_layers())
        weights, widths = ops.conv_weights([conv.weight for conv in convs])
        best = ops.conv_max(self.embedding(ids), weights, widths)
        if self._is_cut(ids):  # the windows of padding alone, cut off with the trimmed characters
            widest = max(width for width, _ in self.config.filters)
            pads = self.embedding.weight[self.pad_id].expand(1, widest, -1)
            best = torch.maximum(best, ops.conv_max(pads, weights, widths))
        best += torch.cat([conv.bias for conv in convs])
        x = best.relu_() if self.config.activation == "relu" else best.tanh_()
        return self._highways_and_projection(x, word_ids, ops.linear, Tensor.sigmoid_)

    def _encode_block(
        self, char_ids: Tensor, word_ids: Optional[Tensor], pad_windows: List[Tensor], kernels: Kernels
    ) -> Tensor:
        """One block of tokens: char_ids (n, C), word_ids (n,) or None -> (n, P). The highway and
        projection GEMMs take the whole block (a fixed shape already); the convolution windows go
        in ``blocking.gemm_rows`` chunks."""
        ids = self.trim(char_ids)
        trimmed = self._is_cut(ids)
        chars = self.embedding(ids)  # (n, C', E)
        n_tokens = chars.shape[0]
        features = []
        for index, conv in enumerate(self._conv_layers()):
            width = conv.kernel_size[0]
            windows = chars.unfold(1, width, 1)  # (n, C'-w+1, E, w)
            n_windows = windows.shape[1]
            flat = windows.reshape(n_tokens * n_windows, -1)
            weight = conv.weight.reshape(conv.out_channels, -1)
            scores = kernels.linear(flat, weight)
            best = scores.view(n_tokens, n_windows, -1).amax(dim=1)
            if trimmed:
                best = torch.maximum(best, pad_windows[index])
            best += conv.bias
            features.append(best.relu_() if self.config.activation == "relu" else elementwise_(Tensor.tanh_, best))
        return self._highways_and_projection(
            torch.cat(features, dim=1),
            word_ids,
            lambda x, weight, bias: kernels.linear(x, weight, bias, rows=n_tokens),  # the whole block, one shape
            lambda scores: elementwise_(Tensor.sigmoid_, scores),  # every element on one code path
        )

    def _highways_and_projection(
        self, x: Tensor, word_ids: Optional[Tensor], linear: Linear, sigmoid_: Callable[[Tensor], Tensor]
    ) -> Tensor:
        """What follows the convolutions, written once for every path (each brings its ``linear`` and
        ``sigmoid_``): the highway layers, the word vector where there is one (``[word; chars]``,
        ELMoForManyLangs' order), the projection. x (N, F) -> (N, P)."""
        for highway in self._highway_layers():
            x = highway.compute(x, linear, sigmoid_)
        if word_ids is not None:
            assert self.word_embedding is not None  # _check_word_ids: word ids come with a word embedding
            x = torch.cat([self.word_embedding(word_ids), x], dim=1)
        return linear(x, self.projection.weight, self.projection.bias)

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

    def _pad_windows(self, kernels: Optional[Kernels] = None) -> List[Tensor]:
        """Each convolution's scores (without bias) on a window of padding characters only;
        with ``kernels``, computed by the same kernel as the real windows."""
        pad = self.embedding.weight[self.pad_id]  # (E,)
        values = []
        for conv in self._conv_layers():
            width = conv.kernel_size[0]
            window = pad.unsqueeze(1).expand(-1, width).reshape(1, -1)  # (1, E*w) in (E, w) order
            weight = conv.weight.reshape(conv.out_channels, -1)
            values.append((window @ weight.t())[0] if kernels is None else kernels.linear(window, weight)[0])
        return values
