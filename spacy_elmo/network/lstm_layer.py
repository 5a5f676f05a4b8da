"""One LSTM layer's parameters (one direction): the cell with its projection and clipping, and the
state of a stack of them. The runners (``step_loop``, ``fused_lstm``, ``lstm_training``; chosen by
``lstm_paths``) compute with them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import torch
from torch import Tensor, nn

from .config import BiLMConfig

LayerState = Tuple[Tensor, Tensor]  # h (B, P), c (B, H)


class LstmLayer(nn.Module):
    """One LSTM layer of one direction, with projection and optional clipping.

    Parameters in PyTorch's gate order (input, forget, cell, output) and shapes, with a single
    bias (the original has one): weight_ih (4H, I), weight_hh (4H, P), bias (4H,), weight_hr (P, H).
    """

    def __init__(self, input_dim: int, config: BiLMConfig) -> None:
        super().__init__()
        cells, proj = config.lstm_dim, config.projection_dim
        self.weight_ih = nn.Parameter(torch.empty(4 * cells, input_dim))
        self.weight_hh = nn.Parameter(torch.empty(4 * cells, proj))
        self.bias = nn.Parameter(torch.empty(4 * cells))
        self.weight_hr = nn.Parameter(torch.empty(proj, cells))
        self.cell_clip = config.cell_clip
        self.proj_clip = config.proj_clip
        self.reset_parameters()

    @property
    def cells(self) -> int:
        return self.weight_hr.shape[1]

    @property
    def projection_dim(self) -> int:
        return self.weight_hr.shape[0]

    @property
    def is_clipped(self) -> bool:
        return self.cell_clip is not None or self.proj_clip is not None

    def cell(
        self, i: Tensor, f: Tensor, g: Tensor, o: Tensor, c: Tensor, tanh: Callable[[Tensor], Tensor]
    ) -> Tuple[Tensor, Tensor]:
        """The LSTM cell, written once for every runner (the Triton kernels restate it in their own
        code): the activated gates i, f, o (sigmoid) and g (tanh), each (G, H), and the cell state
        c (G, H) -> the new cell state f c + i g, clipped to +-cell_clip where the layer clips, and
        the hidden state o tanh(c) before the projection, each (G, H). ``tanh``: the runner's own
        (the exact step loop runs it on whole contiguous rows, for bits that do not depend on the
        lane)."""
        c = f * c + i * g
        if self.cell_clip is not None:
            c = c.clamp(-self.cell_clip, self.cell_clip)
        return c, o * tanh(c)

    def project(self, hidden: Tensor, times_weight: Callable[[Tensor], Tensor]) -> Tensor:
        """hidden (G, H) -> h (G, P): ``times_weight(hidden)``, the runner's product with
        ``weight_hr`` transposed, clipped to +-proj_clip where the layer clips."""
        h = times_weight(hidden)
        return h.clamp(-self.proj_clip, self.proj_clip) if self.proj_clip is not None else h

    def reset_parameters(self) -> None:
        bound = self.cells**-0.5
        for weight in (self.weight_ih, self.weight_hh, self.weight_hr):
            nn.init.uniform_(weight, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[self.cells : 2 * self.cells] = 1.0  # forget gate open at the start


@dataclass
class LstmState:
    """LSTM state of every layer of both directions: h (2, L, B, P), c (2, L, B, H)."""

    h: Tensor
    c: Tensor

    _DIRECTIONS = ("forward", "backward")

    @classmethod
    def zeros(
        cls, n_layers: int, batch: int, proj: int, cells: int, device: torch.device, dtype: torch.dtype
    ) -> "LstmState":
        return cls(
            h=torch.zeros(2, n_layers, batch, proj, device=device, dtype=dtype),
            c=torch.zeros(2, n_layers, batch, cells, device=device, dtype=dtype),
        )

    @classmethod
    def from_layers(cls, layers: Dict[Tuple[str, int], LayerState], n_layers: int) -> "LstmState":
        def stacked(part: int) -> Tensor:
            return torch.stack([torch.stack([layers[d, k][part] for k in range(n_layers)]) for d in cls._DIRECTIONS])

        return cls(h=stacked(0), c=stacked(1))

    @property
    def batch_size(self) -> int:
        return self.h.shape[2]

    def layer(self, direction: str, depth: int) -> LayerState:
        index = self._DIRECTIONS.index(direction)
        return self.h[index, depth], self.c[index, depth]
