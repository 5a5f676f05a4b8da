"""The training path of an LSTM layer: differentiable, the same in training and in evaluation
(dev perplexity). cuDNN's fused kernel over a PackedSequence-style batch for unclipped layers on a
GPU; an autograd step loop otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Sequence

import torch
from torch import Tensor

from .fused_lstm import fused_weights

if TYPE_CHECKING:
    from .lstm_layer import LstmLayer


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
    for step_inputs, active in zip(inputs, batch_sizes):
        gates = torch.addmm(step_inputs, h[:active], layer.weight_hh.t())
        i, f, g, o = gates.split(cells, dim=1)
        c, hidden = layer.cell(
            torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o), c[:active], torch.tanh
        )
        h = layer.project(hidden, lambda x: x @ layer.weight_hr.t())
        outputs.append(h)
    return torch.cat(outputs)
