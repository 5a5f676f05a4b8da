"""torch's fused LSTM kernel for inference (as in ``nn.LSTM(proj_size=...)``; cuDNN on a GPU):
unclipped layers in exact fp32, on blocks of (lanes, steps) of a lane schedule; sentences start at
block boundaries. On a CPU a block takes the lane count a probe finds computed alike
(``fused_lanes``)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..kernels.probes import holds_at_thread_counts, probed_thread_counts, remembered, smallest_agreeing
from .lanes import LanePlan
from .lstm_layer import LayerState

if TYPE_CHECKING:
    from .lstm_layer import LstmLayer


def run_fused_blocks(
    layer: LstmLayer, x: Tensor, plan: LanePlan, direction: str, start: Optional[LayerState]
) -> Tuple[Tensor, None]:
    """torch's fused LSTM kernel on blocks of (plan.width lanes, plan.window steps), state carried
    from block to block; unclipped layers from a zero state. x (N, I) packed -> (N, P) packed."""
    if layer.is_clipped or start is not None:
        raise ValueError("The fused LSTM kernel runs unclipped layers from a zero state only.")
    width, window = plan.width, plan.window
    table = plan.tables[direction]
    x_ext = torch.cat([x, x.new_zeros(1, x.shape[1])])
    out = x.new_empty(plan.n_tokens + 1, layer.projection_dim)
    weights = fused_weights(layer)
    h = x.new_zeros(len(plan.busy_steps), 1, width, layer.projection_dim)
    c = x.new_zeros(len(plan.busy_steps), 1, width, layer.cells)
    for step in range(0, plan.n_steps, window):
        for lane, _ in plan.starts.get(step, ()):
            chunk, column = divmod(lane, width)
            h[chunk, :, column] = 0
            c[chunk, :, column] = 0
        for chunk, busy in enumerate(plan.busy_steps):
            if step >= busy:
                continue
            tokens = table[step : step + window, chunk * width : (chunk + 1) * width].t()  # (G, T_w)
            y, h[chunk], c[chunk] = _lstm(x_ext[tokens], (h[chunk], c[chunk]), weights)
            out[tokens] = y
    return out[:-1], None


def _lstm(x: Tensor, state: Tuple[Tensor, Tensor], weights: List[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """torch's fused LSTM, batch first, one layer with projection: x (G, T, I) -> y (G, T, P), h, c.
    On a CPU torch warns at each call that oneDNN lacks projections and runs its own kernel: that
    kernel is the one meant here, so the warning is silenced for this call alone."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
        return torch.lstm(x, state, weights, True, 1, 0.0, False, False, True)


def fused_lanes(input_dim: int, cells: int, projection_dim: int, lanes: int, steps: int, probed: bool) -> int:
    """Lanes per block of the fused kernel for a layer of these sizes: ``lanes``, or where
    ``probed`` (on a CPU: ``Kernels.probes_fused_lanes``) the smallest count from it up at which a
    probe finds torch's LSTM kernel (MKL matmuls, see ``clean_rows``) giving every lane the bits of
    the first at each of ``probed_thread_counts``; probed once per shape. Raises RuntimeError where
    no count up to ``lanes + max(8, lanes // 4)`` is."""
    if not probed:
        return lanes
    shapes = ((4 * cells, input_dim), (4 * cells, projection_dim), (4 * cells,), (4 * cells,), (projection_dim, cells))
    threads = probed_thread_counts()
    key = ("fused lstm lanes", lanes, steps, shapes, threads)
    return remembered(key, lambda: _probe_fused_lanes(lanes, steps, shapes, threads))


def _probe_fused_lanes(
    lanes: int, steps: int, shapes: Sequence[Tuple[int, ...]], thread_counts: Tuple[int, ...]
) -> int:
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(shape, generator=generator) * shape[-1] ** -0.5 for shape in shapes]
    weights[3].zero_()  # the second bias, as ``fused_weights`` gives it
    sequence = torch.randn(1, steps, shapes[0][1], generator=generator)

    def lanes_agree(count: int) -> bool:
        x = sequence.expand(count, -1, -1).contiguous()
        state = (x.new_zeros(1, count, shapes[4][0]), x.new_zeros(1, count, shapes[4][1]))

        def check() -> bool:
            y, _, _ = _lstm(x, state, weights)
            return bool(torch.equal(y, y[:1].expand_as(y)))

        return holds_at_thread_counts(check, thread_counts)

    return smallest_agreeing(
        lanes,
        lanes_agree,
        "torch's fused LSTM kernel gives the lanes of no block of {} lanes the same bits on this machine: its "
        "results would depend on the batch. Use path='step'.",
    )


def fused_weights(layer: LstmLayer) -> List[Tensor]:
    """The layer's parameters in the order torch's LSTM kernel takes them (second bias zero)."""
    return [layer.weight_ih, layer.weight_hh, layer.bias, torch.zeros_like(layer.bias), layer.weight_hr]
