"""Which LSTM runner a call takes: the differentiable one (pretraining), the fused blocks (CUDA,
unclipped models) or the exact step loop, and how many sentences the step loop runs side by side."""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from ..kernels.batch_invariant import Blocking, rows_any_count
from . import recurrence
from .config import BiLMConfig
from .lstm_layer import LstmLayer
from .recurrence import LanePlan, LayerState, PackedOrder

# (layer, x (N, I), direction, the layer's start state or None) -> (y (N, P), its final state or None)
LayerRunner = Callable[[LstmLayer, Tensor, str, Optional[LayerState]], Tuple[Tensor, Optional[LayerState]]]


def layer_runner(
    config: BiLMConfig, blocking: Blocking, lengths: List[int], path: str, stateful: bool, device: torch.device
) -> LayerRunner:
    """The runner for one call's LSTM layers (see ``LayerRunner``): ``path`` "auto", "step" or
    "fused"; ``stateful``: the call starts from a given state (inference only)."""
    if path not in ("auto", "step", "fused"):
        raise ValueError(f"The LSTM path must be 'auto', 'step' or 'fused', got {path!r}.")
    clipped = config.is_clipped
    reduced = blocking.precision != "fp32"
    if path == "fused" and (clipped or stateful or reduced):
        reason = (
            "the model clips its cells or projections"
            if clipped
            else "stateful runs need the step loop"
            if stateful
            else f"{blocking.precision} runs the step loop"
        )
        raise ValueError(f"The fused LSTM path cannot run this call: {reason}. Use path='step'.")
    if torch.is_grad_enabled():
        if stateful:
            raise ValueError("Stateful runs are for inference; call them under torch.no_grad().")
        order = PackedOrder.build(lengths, device)
        return lambda layer, x, direction, start: (recurrence.run_differentiable(layer, x, order, direction), None)
    if path == "fused" or (path == "auto" and not (clipped or stateful or reduced) and device.type == "cuda"):
        proj = config.projection_dim  # every layer's input is the P-wide output of the one below
        lanes = recurrence.fused_lanes(proj, config.lstm_dim, proj, blocking, device)
        plan = LanePlan.build(lengths, lanes, blocking.fused_steps, device)
        return lambda layer, x, direction, start: recurrence.run_fused_blocks(
            layer, x, plan, direction, start, blocking
        )
    plan = LanePlan.build(lengths, step_width(lengths, blocking, device, config.lstm_dim), 1, device)
    scratch = recurrence.Scratch()  # the layers run one after another: one input projection buffer
    return lambda layer, x, direction, start: recurrence.run_step_loop(
        layer, x, plan, direction, start, blocking, scratch
    )


def step_width(lengths: List[int], blocking: Blocking, device: torch.device, lstm_dim: int) -> int:
    """Lanes per chunk of the step loop: in int8, and in fp32 through oneDNN, as many as there
    are sentences, up to ``step_lanes`` (any row count gives the same rows there); else the
    fixed ``step_columns`` (bf16: measured 32 as the best balance of one sentence and many)."""
    if not rows_any_count(device, blocking.precision):
        return blocking.step_columns
    return recurrence.step_lanes_for(lengths, blocking.step_lanes, lstm_dim)
