"""Both LSTM stacks of a biLM on a CUDA GPU, through the Triton kernels of ``kernels.triton_ops``.

Sentences stream through lanes as in ``lanes.LanePlan`` (longest first to the least loaded
lane, back to back), but each call sizes its own lanes: as many as make every lane about as busy
as the longest sentence (``lane_count``), so the steps are as few as the longest sentence needs
and few lanes idle. Lanes are numbered busiest first, so the lanes at work at a step are a prefix
and the kernels skip the rest. Both directions of a layer run in the same launches (a program
axis): a step is the recurrent matmul in pieces (fp32), the cells, the projection in pieces and
their sum (``TritonOps.lstm_step``). A row's bits never depend on the lanes beside it or on how many
there are (``triton_kernels``), so nothing is padded for them.

Stateless calls replay the whole of ``run_stacks`` as a CUDA graph (``gpu_graphs``): the same kernels
on the same values, so the same bits as launched one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..kernels.devices import upload
from ..kernels.triton_ops import LayerPair, Starts, StepTables, TritonOps
from .lanes import LanePlan
from .lstm_layer import LayerState, LstmLayer, LstmState

MOST_LANES = 1024  # a call's lanes: beyond this, more sentences make longer lanes, not more


class Stacks(NamedTuple):
    """What the kernels read of a biLM's LSTMs: each layer's two directions (``LayerPair``), the
    clips (cell, projection; None: none) and whether layers above the first add their input."""

    pairs: Tuple[LayerPair, ...]
    clips: Tuple[Optional[float], Optional[float]]
    residual: bool

    @classmethod
    def of(
        cls, ops: TritonOps, forward: Sequence[LstmLayer], backward: Sequence[LstmLayer], residual: bool
    ) -> "Stacks":
        pairs = tuple(ops.layer_pair(ahead, behind) for ahead, behind in zip(forward, backward))
        return cls(pairs, (forward[0].cell_clip, forward[0].proj_clip), residual)


def lane_count(lengths: Sequence[int], most: int = MOST_LANES) -> int:
    """Lanes for sentences of ``lengths``: enough that the work spread over them takes about as
    many steps as the longest sentence, at least 1, at most ``most`` and the non-empty sentences."""
    busy = [length for length in lengths if length]
    if not busy:
        return 1
    return max(1, min(most, len(busy), -(-sum(busy) // max(busy))))


@dataclass
class Schedule:
    """A call's lane plan as the kernels read it: ``steps`` x ``lanes`` tables (``StepTables``)
    laid out at ``shape`` = (pad(steps), pad(lanes)), the steps past the plan's with no lane at
    work. ``host``: the tables as one int32 tensor, in the order ``tables`` views them."""

    lanes: int
    steps: int
    shape: Tuple[int, int]
    host: Tensor

    @classmethod
    def build(cls, lengths: Sequence[int], pad: Callable[[int], int] = lambda count: count) -> "Schedule":
        plan = LanePlan.build(lengths, lane_count(lengths), 1, torch.device("cpu"))
        steps, lanes = plan.n_steps, plan.n_lanes
        rows, cols = pad(steps), pad(lanes)
        token = torch.zeros(2, rows, cols, dtype=torch.int32)
        token[0, :steps, :lanes] = plan.tables["forward"]
        token[1, :steps, :lanes] = plan.tables["backward"]
        start, end = (_marks_table(marks, rows, cols) for marks in (plan.starts, plan.ends))
        busy = torch.tensor(plan.lane_steps, dtype=torch.int32)
        active = (busy.unsqueeze(0) > torch.arange(rows, dtype=torch.int32).unsqueeze(1)).sum(1, dtype=torch.int32)
        host = torch.cat([token.flatten(), start.flatten(), end.flatten(), active])
        return cls(lanes=lanes, steps=steps, shape=(rows, cols), host=host)

    def on(self, device: torch.device) -> Tensor:
        """The tables copied to ``device`` (through pinned memory on a GPU)."""
        return upload(self.host, device)

    def tables(self, flat: Tensor) -> StepTables:
        """Views of ``flat`` (``host`` as copied to the device) as ``StepTables``."""
        rows, cols = self.shape
        token, start, end, active = flat.split([2 * rows * cols, rows * cols, rows * cols, rows])
        return StepTables(token.view(2, rows, cols), start.view(rows, cols), end.view(rows, cols), active)


def _marks_table(marks: Dict[int, List[Tuple[int, int]]], rows: int, cols: int) -> Tensor:
    """(rows, cols) int32: sentence + 1 at each (step, lane) of ``marks``, 0 elsewhere, in one
    indexed write (the host builds these tables for every call, the GPU waiting)."""
    table = torch.zeros(rows, cols, dtype=torch.int32)
    found = [(step, lane, sentence + 1) for step, pairs in marks.items() for lane, sentence in pairs]
    if found:
        steps, lanes, values = torch.tensor(found, dtype=torch.int64).unbind(1)
        table[steps, lanes] = values.to(torch.int32)
    return table


def run_stacks(
    ops: TritonOps,
    stacks: Stacks,
    tokens: Tensor,
    tables: StepTables,
    initial_state: Optional[LstmState] = None,
) -> Tuple[Tensor, Optional[LstmState]]:
    """Both stacks over packed sentences: tokens (N, P) -> layers (L+1, N, 2P) and, from
    ``initial_state`` (B sentences), the state after each sentence's last token."""
    x = tokens.unsqueeze(0).expand(2, -1, -1)
    layers = [torch.cat([tokens, tokens], dim=1)]
    finals: Dict[Tuple[str, int], LayerState] = {}
    for depth, pair in enumerate(stacks.pairs):
        starts = _starts(initial_state, depth) if initial_state is not None else None
        y = run_layer_pair(ops, pair, x, tables, stacks.clips, starts)
        if stacks.residual and depth > 0:
            y = y + x
        if starts is not None:
            for index, direction in enumerate(("forward", "backward")):
                finals[direction, depth] = (starts.final_h[index], starts.final_c[index])
        layers.append(torch.cat([y[0], y[1]], dim=1))
        x = y
    final = LstmState.from_layers(finals, len(stacks.pairs)) if initial_state is not None else None
    return torch.stack(layers), final


def run_layer_pair(
    ops: TritonOps,
    pair: LayerPair,
    x: Tensor,
    tables: StepTables,
    clips: Tuple[Optional[float], Optional[float]],
    starts: Optional[Starts] = None,
) -> Tensor:
    """One layer, both directions: x (2, N, I) (a batch stride of 0 where both read the same)
    -> (2, N, P)."""
    gate_inputs = ops.linear_pair(x, pair.w_ih, pair.bias)
    cells, proj = pair.w_hr.shape[1], pair.w_hr.shape[2]
    out = x.new_empty(2, x.shape[1], proj)
    state = ops.lane_state(tables.start.shape[1], cells, proj, x)
    for step in range(tables.start.shape[0]):
        ops.lstm_step(step, pair, gate_inputs, tables, state, out, clips, starts)
    return out


def _starts(state: LstmState, depth: int) -> Starts:
    """The layer's start state per sentence, both directions, and buffers for its final state
    (a sentence with no tokens keeps its start state)."""
    h = torch.stack([state.layer(direction, depth)[0] for direction in ("forward", "backward")]).contiguous()
    c = torch.stack([state.layer(direction, depth)[1] for direction in ("forward", "backward")]).contiguous()
    return Starts(h=h, c=c, final_h=h.clone(), final_c=c.clone())
