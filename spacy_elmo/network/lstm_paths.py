"""Which LSTM runner a call takes, named by the caller: ``inference_runner`` (the exact step loop,
or torch's fused blocks for unclipped fp32 models on CUDA or when asked) or ``training_runner``
(differentiable; pretraining and its dev perplexity alike)."""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from ..kernels.kernel_set import Kernels
from . import fused_lstm, lstm_training, step_loop
from .config import BiLMConfig
from .lanes import LanePlan, step_lanes_for
from .lstm_layer import LayerState, LstmLayer

# (layer, x (N, I), direction, the layer's start state or None) -> (y (N, P), its final state or None)
LayerRunner = Callable[[LstmLayer, Tensor, str, Optional[LayerState]], Tuple[Tensor, Optional[LayerState]]]

PATHS = ("auto", "step", "fused")


def inference_runner(
    config: BiLMConfig, kernels: Kernels, lengths: List[int], path: str, stateful: bool, device: torch.device
) -> LayerRunner:
    """The batch-invariant runner for one call's LSTM layers (see ``LayerRunner``): ``path``
    "auto", "step" or "fused"; ``stateful``: the call starts from a given state."""
    check_path(path)
    clipped = config.is_clipped
    if path == "fused":
        refuse_fused(config, kernels, stateful)
    if path == "fused" or (path == "auto" and not (clipped or stateful) and kernels.fused_when_auto):
        blocking = kernels.blocking
        proj = config.projection_dim  # every layer's input is the P-wide output of the one below
        probed = kernels.probes_fused_lanes
        lanes = fused_lstm.fused_lanes(proj, config.lstm_dim, proj, blocking.fused_rows, blocking.fused_steps, probed)
        plan = LanePlan.build(lengths, lanes, blocking.fused_steps, device)
        return lambda layer, x, direction, start: fused_lstm.run_fused_blocks(layer, x, plan, direction, start)
    plan = LanePlan.build(lengths, step_width(lengths, kernels, config.lstm_dim), 1, device)
    scratch = step_loop.Scratch()  # the layers run one after another: one input projection buffer
    return lambda layer, x, direction, start: step_loop.run_step_loop(
        layer, x, plan, direction, start, kernels, scratch
    )


def check_path(path: str) -> None:
    """Raise ValueError unless ``path`` is one of ``PATHS``."""
    if path not in PATHS:
        raise ValueError(f"lstm_path must be one of {', '.join(PATHS)}, got {path!r}.")


def refuse_fused(config: BiLMConfig, kernels: Kernels, stateful: bool) -> None:
    """Raise ValueError where torch's fused LSTM kernel cannot run a call: a clipped model, a
    stateful call, or kernels other than exact fp32."""
    if config.is_clipped or stateful or not kernels.exact:
        reason = (
            "the model clips its cells or projections"
            if config.is_clipped
            else "stateful runs need the step loop"
            if stateful
            else f"{kernels.runs} runs the step loop"
        )
        raise ValueError(f"The fused LSTM path cannot run this call: {reason}. Use path='step'.")


def training_runner(lengths: List[int], device: torch.device) -> LayerRunner:
    """The differentiable runner (see ``LayerRunner``; no start state)."""
    order = lstm_training.PackedOrder.build(lengths, device)
    return lambda layer, x, direction, start: (lstm_training.run_differentiable(layer, x, order, direction), None)


def step_width(lengths: List[int], kernels: Kernels, lstm_dim: int) -> int:
    """Lanes per chunk of the step loop: where any row count gives the same rows, as many as there
    are sentences, up to ``step_lanes``; else the fixed ``step_columns`` (bf16 on fixed shapes:
    measured 32 as the best balance of one sentence and many)."""
    if not kernels.any_rows:
        return kernels.blocking.step_columns
    return step_lanes_for(lengths, kernels.blocking.step_lanes, lstm_dim)
