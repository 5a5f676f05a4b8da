"""Both LSTM stacks of a biLM on a CUDA GPU, through the Triton kernels (``triton_ops``), and the
CUDA graphs that replay a call.

Sentences stream through lanes as in ``lstm_steps.LanePlan``, but each call sizes its own lanes:
as many as make every lane about as busy as the longest sentence (``lane_count``), numbered
busiest first, so the lanes at work at a step are a prefix and the kernels skip the rest. Both
directions of a layer run in the same launches: a step is the recurrent matmul in pieces (fp32),
the cells, the projection in pieces and their sum (``TritonOps.lstm_step``). A row's bits never
depend on the lanes beside it or on how many there are, so nothing is padded for them.

Graphs (``CallGraphs``): a step costs three or four launches, and launching a Triton kernel from
Python costs the host about as long as a small step's kernels run (the profile in BENCHMARKS.md);
a stateless call replays the whole of ``run_stacks`` as one graph instead, the same kernels on the
same values, so the same bits. A graph is captured per bucket of (tokens, steps, lanes), each
rounded up with ``onednn.bucket_rows``, the second time a call falls in it (a shape met once costs
nothing more; the capture's own run, which compiles what Triton has not, answers that call), and
replayed for every call in the bucket: its tokens copied into the graph's input rows (rows past
the call's are read by no lane), its step tables padded with steps where no lane works. A model's
graphs share one memory pool and replay under one lock; what each keeps for itself is bounded by
``MOST_GRAPH_BYTES`` and ``MOST_GRAPHS``, the least recently used dropped first. A capture watches
only its own thread's CUDA calls; where one fails all the same, the model launches its kernels one
by one from then on, with one warning. A graph is kept for the ``LayerPair`` objects it read
(weights changed in place give new ones). Stateful calls and calls above ``MOST_TOKENS`` tokens
launch the kernels one by one.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import lstm_steps
from .devices import upload
from .lstm_steps import LanePlan, LstmState, Pair, PairResult, StatePair
from .onednn import bucket_rows
from .triton_ops import LayerPair, Starts, StepTables, TritonOps

MOST_LANES = 1024  # a call's lanes: beyond this, more sentences make longer lanes, not more


class Stacks(NamedTuple):
    """What the kernels read of a biLM's LSTMs: each layer's two directions (``LayerPair``), the
    clips (cell, projection; None: none) and whether layers above the first add their input."""

    pairs: Tuple[LayerPair, ...]
    clips: Tuple[Optional[float], Optional[float]]
    residual: bool

    @classmethod
    def of(cls, ops: TritonOps, forward: Sequence[Any], backward: Sequence[Any], residual: bool) -> "Stacks":
        pairs = tuple(ops.layer_pair(ahead, behind) for ahead, behind in zip(forward, backward, strict=True))
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
    """Both stacks over packed sentences (``lstm_steps.run_stacks``, both directions of a layer in
    the same launches): tokens (N, P) -> layers (L+1, N, 2P) and, from ``initial_state`` (B
    sentences), the state after each sentence's last token."""

    def run_pair(depth: int, inputs: Pair, starts: Optional[StatePair]) -> PairResult:
        first = inputs[0] is inputs[1]  # the layer below is the tokens: both directions read it (stride 0)
        x = inputs[0].unsqueeze(0).expand(2, -1, -1) if first else torch.stack(inputs)
        both = _starts(starts) if starts is not None else None
        y = run_layer_pair(ops, stacks.pairs[depth], x, tables, stacks.clips, both)
        ends = None if both is None else ((both.final_h[0], both.final_c[0]), (both.final_h[1], both.final_c[1]))
        return (y[0], y[1]), ends

    return lstm_steps.run_stacks(len(stacks.pairs), stacks.residual, run_pair, tokens, initial_state)


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


def _starts(starts: StatePair) -> Starts:
    """A layer's start state per sentence, both directions, and buffers for its final state (a
    sentence with no tokens keeps its start state)."""
    h = torch.stack([starts[0][0], starts[1][0]]).contiguous()
    c = torch.stack([starts[0][1], starts[1][1]]).contiguous()
    return Starts(h=h, c=c, final_h=h.clone(), final_c=c.clone())


MOST_TOKENS = 65536  # a call's tokens (boundaries included) up to which it replays a graph
MOST_GRAPHS = 64  # graphs kept per model, the least recently used dropped first
MOST_GRAPH_BYTES = 2 << 30  # what the graphs of a model keep for themselves, at most
SIGHTINGS = 1024  # buckets remembered as met once


@dataclass
class Captured:
    """A captured call: its graph, its inputs (tokens (rows, P), tables as one int32 tensor), its
    output layers (L+1, rows, 2P), and the stacks it read (kept alive so their ids stay theirs)."""

    graph: "torch.cuda.CUDAGraph"
    tokens: Tensor
    tables: Tensor
    layers: Tensor
    stacks: Stacks

    @property
    def nbytes(self) -> int:
        """The memory this graph keeps for itself: its inputs and its layers."""
        return sum(t.numel() * t.element_size() for t in (self.tokens, self.tables, self.layers))


class CallGraphs:
    """The CUDA graphs of one model's calls (see the module docstring)."""

    def __init__(self, most: int = MOST_GRAPHS, most_bytes: int = MOST_GRAPH_BYTES) -> None:
        self.most = most
        self.most_bytes = most_bytes
        self._graphs: "OrderedDict[Tuple, Captured]" = OrderedDict()
        self._met_once: "OrderedDict[Tuple, None]" = OrderedDict()
        self._lock = threading.Lock()
        self._pool: Optional[Any] = None  # the graphs' shared memory pool (torch's handle)
        self.failed: Optional[str] = None  # why a capture failed: no more graphs for this model

    def __reduce__(self) -> Tuple[type, Tuple[int, int]]:
        """Pickled (with its model) empty: graphs belong to the process that captured them."""
        return (CallGraphs, (self.most, self.most_bytes))

    def __len__(self) -> int:
        return len(self._graphs)

    def sizes(self) -> List[int]:
        """The rows of each graph kept, the least recently used first."""
        return [captured.tokens.shape[0] for captured in self._graphs.values()]

    @property
    def nbytes(self) -> int:
        """The memory the graphs keep for themselves (``Captured.nbytes``), together."""
        return sum(captured.nbytes for captured in self._graphs.values())

    def takes(self, tokens: Tensor) -> bool:
        """Whether a stateless call of these tokens (on a CUDA device) may replay a graph."""
        return tokens.shape[0] <= MOST_TOKENS and self.failed is None

    def run(self, ops: TritonOps, stacks: Stacks, tokens: Tensor, lengths: Sequence[int]) -> Optional[Tensor]:
        """Layers (L+1, N, 2P) of tokens (N, P) in sentences of ``lengths``, through a graph; None
        where the caller launches the kernels: the bucket's first call, or no capture here
        (``failed`` says why)."""
        schedule = Schedule.build(lengths, lambda count: bucket_rows(max(count, 1)))
        rows = bucket_rows(max(tokens.shape[0], 1))
        pairs = tuple(id(pair) for pair in stacks.pairs)
        key = (ops.precision, rows, schedule.shape, pairs, stacks.clips, stacks.residual)
        with self._lock:
            captured = self._graphs.get(key)
            if captured is None:
                if self._first_time(key):
                    return None
                try:
                    captured, layers = self._capture(ops, stacks, tokens, rows, schedule)
                except RuntimeError as failure:
                    self._give_up(failure)
                    return None
                self._keep(key, captured)
                return layers
            self._graphs.move_to_end(key)
            captured.tokens[: tokens.shape[0]].copy_(tokens)
            captured.tables.copy_(schedule.on(tokens.device))
            captured.graph.replay()
            return captured.layers[:, : tokens.shape[0]].clone()

    def _first_time(self, key: Tuple) -> bool:
        """Whether no call fell in this bucket before (remembering it for the next)."""
        if key in self._met_once:
            del self._met_once[key]
            return False
        self._met_once[key] = None
        while len(self._met_once) > SIGHTINGS:
            self._met_once.popitem(last=False)
        return True

    def _keep(self, key: Tuple, captured: Captured) -> None:
        """Keep ``captured``, dropping the least recently used graphs beyond the bounds."""
        self._graphs[key] = captured
        while len(self._graphs) > 1 and (len(self._graphs) > self.most or self.nbytes > self.most_bytes):
            self._graphs.popitem(last=False)

    def _capture(
        self, ops: TritonOps, stacks: Stacks, tokens: Tensor, rows: int, schedule: Schedule
    ) -> Tuple[Captured, Tensor]:
        """Capture ``run_stacks`` at these sizes, after one run outside the graph (Triton compiles
        its kernels at their first launch, which a capture cannot hold); that run's layers
        (L+1, N, 2P) answer this call."""
        static_tokens = tokens.new_zeros(rows, tokens.shape[1])
        static_tokens[: tokens.shape[0]] = tokens
        static_tables = schedule.on(tokens.device).clone()
        side = torch.cuda.Stream(device=tokens.device)
        side.wait_stream(torch.cuda.current_stream(tokens.device))
        with torch.cuda.stream(side):
            warm, _ = run_stacks(ops, stacks, static_tokens, schedule.tables(static_tables))
        torch.cuda.current_stream(tokens.device).wait_stream(side)
        answer = warm[:, : tokens.shape[0]].clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            layers, _ = run_stacks(ops, stacks, static_tokens, schedule.tables(static_tables))
        if self._pool is None:
            self._pool = graph.pool()
        return Captured(graph, static_tokens, static_tables, layers, stacks), answer

    def _give_up(self, failure: RuntimeError) -> None:
        self.failed = f"{type(failure).__name__}: {failure}"
        self._graphs.clear()
        warnings.warn(
            f"spacy-elmo: a CUDA graph of a call could not be captured here ({self.failed}); this model "
            "launches its kernels one by one from now on, with the same results.",
            RuntimeWarning,
            stacklevel=4,
        )
