"""One LSTM layer's parameters (one direction), the cell with its projection and clipping written
once, and how training runs a layer: differentiable, the same in training and in evaluation (dev
perplexity), cuDNN's fused kernel over a PackedSequence-style batch for unclipped layers on a GPU,
an autograd step loop otherwise. Inference runs layers through a backend
(``kernels.lstm_steps``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..kernels.lstm_steps import LstmStacks, PairRunner, each_direction, fused_weights
from .config import BiLMConfig


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
class PackedOrder:
    """Time-major order of a packed batch, as in torch's PackedSequence (training path).

    batch_sizes[t]: sentences longer than t; index: direction -> (N,) time-major position ->
    packed token index, time running forwards or backwards through each sentence.
    """

    batch_sizes: List[int]
    index: Dict[str, Tensor]

    @classmethod
    def build(cls, lengths: Sequence[int], device: torch.device) -> "PackedOrder":
        lengths_t = torch.as_tensor(list(lengths), dtype=torch.long)
        sorted_lengths, order = torch.sort(lengths_t, descending=True, stable=True)
        first = torch.cumsum(lengths_t, 0) - lengths_t
        n_steps = int(sorted_lengths[0]) if len(lengths_t) else 0
        step, row = (torch.arange(n_steps).unsqueeze(1) < sorted_lengths.unsqueeze(0)).nonzero(as_tuple=True)
        start = first[order][row]
        index = {"forward": start + step, "backward": start + sorted_lengths[row] - 1 - step}
        sizes = torch.bincount(step, minlength=n_steps).tolist() if n_steps else []
        return cls(batch_sizes=sizes, index={k: v.to(device) for k, v in index.items()})


def run_differentiable(layer: LstmLayer, x: Tensor, order: PackedOrder, direction: str) -> Tensor:
    """Autograd path for training. x (N, I) packed -> (N, P) packed. cuDNN's fused kernel for
    unclipped layers where cuDNN takes ``x`` (on a GPU); elsewhere an autograd step loop (ATen's
    CPU LSTM slices its inputs once per step, and every slice's backward fills a gradient as large
    as all of them)."""
    if not order.batch_sizes:
        return x.new_zeros(0, layer.projection_dim)
    index = order.index[direction]
    x_time = x[index]
    active = order.batch_sizes[0]
    h0 = x.new_zeros(active, layer.projection_dim)
    c0 = x.new_zeros(active, layer.cells)
    if layer.is_clipped or not torch.backends.cudnn.is_acceptable(x):
        out = _autograd_step_loop(layer, x_time, order.batch_sizes, h0, c0)
    else:
        batch_sizes = torch.tensor(order.batch_sizes, dtype=torch.long)
        out, _, _ = torch.lstm(
            x_time, batch_sizes, (h0.unsqueeze(0), c0.unsqueeze(0)), fused_weights(layer), True, 1, 0.0, True, False
        )
    packed = torch.empty_like(out)
    packed[index] = out
    return packed


def _autograd_step_loop(layer: LstmLayer, x_time: Tensor, batch_sizes: List[int], h: Tensor, c: Tensor) -> Tensor:
    """x_time (N, I) time-major, PackedSequence order -> (N, P). ``split`` rather than slicing:
    its backward is one concatenation."""
    cells = layer.cells
    inputs = torch.nn.functional.linear(x_time, layer.weight_ih, layer.bias).split(batch_sizes)
    outputs = []
    for step_inputs, active in zip(inputs, batch_sizes, strict=True):
        gates = torch.addmm(step_inputs, h[:active], layer.weight_hh.t())
        i, f, g, o = gates.split(cells, dim=1)
        c, hidden = layer.cell(
            torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o), c[:active], torch.tanh
        )
        h = layer.project(hidden, lambda x: x @ layer.weight_hr.t())
        outputs.append(h)
    return torch.cat(outputs)


def training_runner(stacks: LstmStacks, lengths: List[int], device: torch.device) -> PairRunner:
    """The differentiable runner of a call's layers (``kernels.lstm_steps.PairRunner``; no start state)."""
    order = PackedOrder.build(lengths, device)
    return each_direction(
        stacks, lambda layer, x, direction, start: (run_differentiable(layer, x, order, direction), None)
    )
