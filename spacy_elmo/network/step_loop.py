"""The exact step loop of inference: one LSTM layer over a lane schedule, token by token.

A sentence's result is bitwise the same whatever else is in the batch: its matmul rows go through
the model's ``Kernels``, whose rows do not depend on the row count, and the cell's transcendental
functions see whole rows (``batch_invariant.elementwise_``). State is token-major: h (lanes, P),
c (lanes, H); each step's matmuls take the chunk's lanes still at work (``Kernels.step_rows``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import torch
from torch import Tensor

from ..kernels.batch_invariant import elementwise_
from ..kernels.kernel_set import Kernels
from .lanes import LanePlan, lane_multiple
from .lstm_layer import LayerState

if TYPE_CHECKING:
    from .lstm_layer import LstmLayer


class StepMatmuls:
    """The three matmuls of a layer in the step loop, token-major, through the model's kernels:
    the input projection x (N, I) -> (N, 4H) with the bias, the recurrence h (G, P) -> (G, 4H)
    and the projection hidden (G, H) -> (G, P), G from ``Kernels.step_rows``."""

    def __init__(self, layer: LstmLayer, kernels: Kernels) -> None:
        self.layer, self.kernels = layer, kernels

    def inputs(self, x: Tensor, scratch: Optional["Scratch"] = None) -> Tensor:
        layer = self.layer
        out = scratch.take(x.shape[0], layer.weight_ih.shape[0], x) if scratch is not None else None
        return self.kernels.linear(x, layer.weight_ih, layer.bias, out)

    def recurrent(self, h: Tensor) -> Tensor:
        return self.kernels.step_matmul(h, self.layer.weight_hh)

    def project(self, hidden: Tensor) -> Tensor:
        return self.kernels.step_matmul(hidden, self.layer.weight_hr)


class Scratch:
    """One buffer that the layers of a call take in turn for their input projection (rows, 4H),
    the largest tensor of a call: a fresh one per layer would be fresh pages, each faulted in
    and zeroed by the kernel on first touch, which costs about as much as writing it."""

    def __init__(self) -> None:
        self._flat: Optional[Tensor] = None

    def take(self, rows: int, cols: int, like: Tensor) -> Tensor:
        """An uninitialized (rows, cols) tensor of ``like``'s dtype and device."""
        size = rows * cols
        flat = self._flat
        if flat is None or flat.numel() < size or flat.dtype != like.dtype or flat.device != like.device:
            flat = self._flat = like.new_empty(size)
        return flat[:size].view(rows, cols)


def run_step_loop(
    layer: LstmLayer,
    x: Tensor,
    plan: LanePlan,
    direction: str,
    start: Optional[LayerState],
    kernels: Kernels,
    scratch: Optional[Scratch] = None,
) -> Tuple[Tensor, Optional[LayerState]]:
    """Exact, batch-invariant step loop. x (N, I) packed -> (N, P) packed; and with ``start``
    (h (B, P), c (B, H)), the state after each sentence's last token. ``scratch`` holds the
    input projection (shared by the layers of a call, which run one after another).

    State is token-major: h (lanes, P), c (lanes, H). The cell update runs on a chunk's working
    lanes only; the matmuls on those too where any row count gives the same rows, else on the
    whole chunk (idle rows cost time, not results)."""
    matmuls = StepMatmuls(layer, kernels)
    table = plan.tables[direction]
    schedule = [plan.groups(step, lane_multiple(layer.cells)) for step in range(plan.n_steps)]
    # The input projection's rows in the order the steps take them (row N, zeros, feeds idle
    # lanes): each step then reads a contiguous slice. Rows do not depend on their companions.
    order = [table[step, first : first + count] for step, groups in enumerate(schedule) for first, count in groups]
    x_ext = torch.cat([x, x.new_zeros(1, x.shape[1])])
    inputs = matmuls.inputs(x_ext[torch.cat(order)] if order else x_ext[:0], scratch)
    h = x.new_zeros(plan.n_lanes, layer.projection_dim)
    c = x.new_zeros(plan.n_lanes, layer.cells)
    final = (start[0].clone(), start[1].clone()) if start is not None else None
    out = x.new_empty(plan.n_tokens + 1, layer.projection_dim)
    taken = 0
    for step, groups in enumerate(schedule):
        for lane, sentence in plan.starts.get(step, ()):
            h[lane] = start[0][sentence] if start is not None else 0
            c[lane] = start[1][sentence] if start is not None else 0
        for first, count in groups:
            rows = count if kernels.any_rows else plan.width
            lanes = slice(first, first + count)
            tokens = table[step, lanes]
            gates = matmuls.recurrent(h[first : first + rows])[:count].add_(inputs[taken : taken + count])
            taken += count
            c[lanes], hidden = _cell_update(layer, gates, c[lanes])
            if count < rows:
                hidden = torch.cat([hidden, hidden.new_zeros(rows - count, hidden.shape[1])])
            h[lanes] = layer.project(hidden, matmuls.project)[:count]
            out[tokens] = h[lanes]
        if final is not None:
            for lane, sentence in plan.ends.get(step, ()):
                final[0][sentence] = h[lane]
                final[1][sentence] = c[lane]
    return out[:-1], final


def _cell_update(layer: LstmLayer, gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
    """gates (G, 4H) in order i, f, g, o, contiguous, and c (G, H) -> the layer's cell
    (``LstmLayer.cell``): the new c and the hidden state, each (G, H).

    One sigmoid runs over all four gates, the cell input's as tanh(x) = 2 sigmoid(2x) - 1, and tanh
    over whole rows of c: so the transcendental functions only ever see whole contiguous rows,
    wherever a lane sits, and the rest (x2, -1, products, sums, clipping) are IEEE operations that
    round alike everywhere. ``gates`` is overwritten."""
    cells = c.shape[1]
    cell_input = gates[:, 2 * cells : 3 * cells]
    cell_input.mul_(2)
    elementwise_(Tensor.sigmoid_, gates)
    cell_input.mul_(2).sub_(1)
    i, f, o = gates[:, :cells], gates[:, cells : 2 * cells], gates[:, 3 * cells :]
    return layer.cell(i, f, cell_input, o, c, lambda state: elementwise_(Tensor.tanh_, state.clone()))
