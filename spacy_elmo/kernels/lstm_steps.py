"""Running a biLM's LSTM stacks for inference, bitwise independent of a sentence's batch companions.

Sentences arrive packed, one after another: tokens (N, P) with B lengths. ``run_stacks`` is the one
loop over the two stacks (the residual between layers, the layers concatenated), each layer of both
directions through a ``PairRunner``: the exact step loop (``run_step_loop``: every matmul through
the backend, whose rows do not depend on the row count, and the cell's transcendental functions on
whole rows), torch's fused LSTM kernel on blocks of lanes (``run_fused_blocks``: exact fp32,
unclipped layers), training's differentiable runner, or the Triton kernels (``gpu_stacks``). The
backend picks one for a call (``Backend.layer_runner``).

For inference the sentences stream through a fixed number of *lanes* (continuous batching,
``LanePlan``): each lane runs one sentence after another, its state reset to the sentence's start
state whenever a new one begins, so little compute is spent on padding.

The layers are read by duck typing (``LstmLayer`` in ``network``: weights in PyTorch's gate order,
``cell`` and ``project`` written once there).
"""

from __future__ import annotations

import heapq
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from .batch_invariant import elementwise_
from .machine import holds_at_thread_counts, probed_thread_counts, remembered, smallest_agreeing

DIRECTIONS = ("forward", "backward")
LayerState = Tuple[Tensor, Tensor]  # h (B, P), c (B, H)
Pair = Tuple[Tensor, Tensor]  # the forward direction's, the backward's
StatePair = Tuple[LayerState, LayerState]
PairResult = Tuple[Pair, Optional[StatePair]]
# (layer, x (N, I), direction, the layer's start state or None) -> (y (N, P), its final state or None)
LayerRunner = Callable[[Any, Tensor, str, Optional[LayerState]], Tuple[Tensor, Optional[LayerState]]]
# (depth, inputs (N, I) of each direction, their start states or None)
#   -> (outputs (N, P) of each direction, their final states where starts were given)
PairRunner = Callable[[int, Pair, Optional[StatePair]], PairResult]

PATHS = ("auto", "step", "fused")


@dataclass
class LstmState:
    """LSTM state of every layer of both directions: h (2, L, B, P), c (2, L, B, H)."""

    h: Tensor
    c: Tensor

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
            return torch.stack([torch.stack([layers[d, k][part] for k in range(n_layers)]) for d in DIRECTIONS])

        return cls(h=stacked(0), c=stacked(1))

    @property
    def batch_size(self) -> int:
        return self.h.shape[2]

    def layer(self, direction: str, depth: int) -> LayerState:
        index = DIRECTIONS.index(direction)
        return self.h[index, depth], self.c[index, depth]

    def pair(self, depth: int) -> StatePair:
        """Both directions' state at layer ``depth``."""
        return self.layer("forward", depth), self.layer("backward", depth)


class LstmStacks(NamedTuple):
    """A biLM's two stacks of ``LstmLayer`` (separate weights per direction) and whether layers
    above the first add their input (the residual)."""

    forward: Sequence[Any]
    backward: Sequence[Any]
    residual: bool

    @property
    def depth(self) -> int:
        return len(self.forward)


def run_stacks(
    depth: int,
    residual: bool,
    run_pair: PairRunner,
    tokens: Tensor,
    initial_state: Optional[LstmState] = None,
    dropout: Optional[float] = None,
) -> Tuple[Tensor, Optional[LstmState]]:
    """The one loop over both stacks of ``depth`` layers, a layer of each direction at a time
    through ``run_pair``, layers above the first adding their input where ``residual``: tokens
    (N, P) -> layers (L+1, N, 2P) (layer 0 is the token representation repeated for both
    directions) and, where ``initial_state`` was given, the state after each sentence's last token.
    ``dropout``: the probability before each layer (training)."""
    inputs: Pair = (tokens, tokens)
    layers = [torch.cat([tokens, tokens], dim=1)]
    finals: Dict[Tuple[str, int], LayerState] = {}
    for layer in range(depth):
        starts = initial_state.pair(layer) if initial_state is not None else None
        if dropout is not None:
            inputs = (F.dropout(inputs[0], dropout, True), F.dropout(inputs[1], dropout, True))
        outputs, ends = run_pair(layer, inputs, starts)
        if residual and layer > 0:
            outputs = (outputs[0] + inputs[0], outputs[1] + inputs[1])
        if ends is not None:
            finals.update({(direction, layer): end for direction, end in zip(DIRECTIONS, ends, strict=True)})
        layers.append(torch.cat(outputs, dim=1))
        inputs = outputs
    final = LstmState.from_layers(finals, depth) if initial_state is not None else None
    return torch.stack(layers), final


def each_direction(stacks: LstmStacks, run: LayerRunner) -> PairRunner:
    """A ``PairRunner`` over ``stacks`` that runs each direction's layer through ``run``, forward
    then backward."""

    def run_pair(depth: int, inputs: Pair, starts: Optional[StatePair]) -> PairResult:
        layers = (stacks.forward[depth], stacks.backward[depth])
        forward, backward = (
            run(layer, x, direction, starts[index] if starts is not None else None)
            for index, (layer, x, direction) in enumerate(zip(layers, inputs, DIRECTIONS, strict=True))
        )
        ends = (forward[1], backward[1]) if starts is not None else None
        return (forward[0], backward[0]), cast(Optional[StatePair], ends)

    return run_pair


def _token_positions(lengths: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """For packed tokens: (sentence, position in sentence, reversed position), each (N,)."""
    sentence = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(int(lengths.sum())) - starts[sentence]
    return sentence, position, lengths[sentence] - 1 - position


@dataclass
class LanePlan:
    """Which token each lane processes at each step (inference).

    tables: direction -> (n_steps, n_lanes) packed token index, N where a lane idles.
    starts: step -> [(lane, sentence)] beginning there; ends: step -> [(lane, sentence)] whose
    last token is there. Lanes are numbered busiest first: lane_steps[k] (non-increasing) is how
    many steps lane k works, so the lanes still at work at any step are a prefix of each chunk.
    busy_steps[j]: steps until chunk j (lanes j*width...) falls idle.
    """

    n_tokens: int
    width: int
    window: int
    tables: Dict[str, Tensor]
    starts: Dict[int, List[Tuple[int, int]]]
    ends: Dict[int, List[Tuple[int, int]]]
    lane_steps: List[int]

    @classmethod
    def build(cls, lengths: Sequence[int], width: int, window: int, device: torch.device) -> "LanePlan":
        """Sentences go longest first to the least loaded lane and start on multiples of
        ``window`` steps; lanes come in chunks of ``width``."""
        lengths_t = torch.as_tensor(list(lengths), dtype=torch.long)
        if bool((lengths_t < 0).any()):
            raise ValueError(f"Sentence lengths must be >= 0, got {list(lengths)}.")
        windows = [-(-length // window) for length in lengths_t.tolist()]
        n_lanes = _chunk_count(windows, width) * width
        lane_of, start_of, lane_steps = _assign_lanes(windows, n_lanes, window)
        tables = _token_tables(lengths_t, lane_of, start_of, n_lanes, max(lane_steps, default=0))
        starts: Dict[int, List[Tuple[int, int]]] = {}
        ends: Dict[int, List[Tuple[int, int]]] = {}
        for sentence, length in enumerate(lengths_t.tolist()):
            if length:
                starts.setdefault(start_of[sentence], []).append((lane_of[sentence], sentence))
                ends.setdefault(start_of[sentence] + length - 1, []).append((lane_of[sentence], sentence))
        return cls(
            n_tokens=int(lengths_t.sum()),
            width=width,
            window=window,
            starts=starts,
            ends=ends,
            lane_steps=lane_steps,
            tables={direction: table.to(device) for direction, table in tables.items()},
        )

    @property
    def n_lanes(self) -> int:
        return len(self.lane_steps)

    @property
    def busy_steps(self) -> List[int]:
        return self.lane_steps[:: self.width]  # a chunk's first lane is its busiest

    @property
    def n_steps(self) -> int:
        return max(self.lane_steps, default=0)

    def groups(self, step: int, multiple: int = 1) -> List[Tuple[int, int]]:
        """(first lane, lanes) at ``step`` for each chunk still at work: its working lanes (a
        prefix of the chunk), rounded up to a multiple of ``multiple`` and at most ``width``."""
        groups = []
        for first in range(0, self.n_lanes, self.width):
            if self.lane_steps[first] <= step:
                break
            working = sum(1 for steps in self.lane_steps[first : first + self.width] if steps > step)
            groups.append((first, min(self.width, -(-working // multiple) * multiple)))
        return groups


def _chunk_count(windows: List[int], width: int) -> int:
    """How many chunks of ``width`` lanes: one per ``width * longest`` windows of work, so the
    longest sentence stays the critical path (measured: fewer, fuller chunks beat more lanes),
    at least one, and no more than the sentences fill."""
    longest, total, busy = max(windows, default=0), sum(windows), sum(1 for w in windows if w)
    if longest == 0:
        return 1
    by_work = max(1, total // (width * longest))
    by_sentences = -(-busy // width)
    return max(1, min(by_work, by_sentences))


def _assign_lanes(windows: List[int], n_lanes: int, window: int) -> Tuple[List[int], List[int], List[int]]:
    """Longest first to the least loaded lane, then lanes renumbered busiest first. Returns each
    sentence's lane and first step, and each lane's number of busy steps (non-increasing)."""
    loads = [(0, lane) for lane in range(n_lanes)]
    lane_of, start_of = [0] * len(windows), [0] * len(windows)
    for sentence in sorted(range(len(windows)), key=lambda i: -windows[i]):
        if windows[sentence]:
            load, lane = heapq.heappop(loads)
            lane_of[sentence], start_of[sentence] = lane, load * window
            heapq.heappush(loads, (load + windows[sentence], lane))
    busiest_first = sorted(loads, key=lambda item: (-item[0], item[1]))
    renumber = {lane: rank for rank, (_, lane) in enumerate(busiest_first)}
    return [renumber[lane] for lane in lane_of], start_of, [load * window for load, _ in busiest_first]


def _token_tables(
    lengths: Tensor, lane_of: List[int], start_of: List[int], n_lanes: int, n_steps: int
) -> Dict[str, Tensor]:
    """(n_steps, n_lanes) packed token index per direction; N (one past the last token) where a
    lane idles. Backward, each sentence is read from its end."""
    sentence, position, reverse = _token_positions(lengths)
    lane = torch.tensor(lane_of, dtype=torch.long)[sentence]
    step = torch.tensor(start_of, dtype=torch.long)[sentence] + position
    token = torch.arange(len(sentence))
    tables = {}
    for direction, source in (("forward", token), ("backward", token - position + reverse)):
        table = torch.full((n_steps, n_lanes), len(sentence), dtype=torch.long)
        table[step, lane] = source
        tables[direction] = table
    return tables


def lane_multiple(cells: int) -> int:
    """Lanes per step come in multiples of this, so that a step's (lanes, 4H) gates and (lanes, H)
    cells are whole SIMD loop blocks (32 floats) and no element falls to the scalar tail (see
    ``elementwise_``)."""
    return 32 // math.gcd(cells, 32)


def step_lanes_for(lengths: Sequence[int], most: int, cells: int) -> int:
    """Lanes per chunk of the step loop where any row count gives the same rows: as many as there
    are sentences (empty ones aside), at most ``most``, rounded up to ``lane_multiple(cells)``."""
    multiple = lane_multiple(cells)
    sentences = max(1, min(most, sum(1 for length in lengths if length)))
    return -(-sentences // multiple) * multiple


class Matmuls(Protocol):
    """What the step loop reads of a backend (``backends.Backend``): its matmuls and whether a
    call may run at the rows it has."""

    any_rows: ClassVar[bool]

    def linear(
        self, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, out: Optional[Tensor] = None
    ) -> Tensor: ...

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]: ...


def check_path(path: str) -> None:
    """Raise ValueError unless ``path`` is one of ``PATHS``."""
    if path not in PATHS:
        raise ValueError(f"lstm_path must be one of {', '.join(PATHS)}, got {path!r}.")


def step_runner(
    stacks: LstmStacks, matmuls: Matmuls, lengths: List[int], width: int, device: torch.device
) -> PairRunner:
    """The exact step loop for one call's layers, ``width`` lanes per chunk."""
    plan = LanePlan.build(lengths, width, 1, device)
    scratch = Scratch()  # the layers run one after another: one input projection buffer
    return each_direction(
        stacks, lambda layer, x, direction, start: run_step_loop(layer, x, plan, direction, start, matmuls, scratch)
    )


def fused_runner(
    stacks: LstmStacks,
    lengths: List[int],
    sizes: Tuple[int, int, int],
    rows: int,
    steps: int,
    probed: bool,
    device: torch.device,
) -> PairRunner:
    """torch's fused kernel for one call's layers of ``sizes`` (P, H, P: input, cells, projection),
    on blocks of ``rows`` lanes (probed for lane-independent bits where ``probed``) and ``steps``
    steps (see ``LayerRunner``)."""
    lanes = fused_lanes(*sizes, rows, steps, probed)
    plan = LanePlan.build(lengths, lanes, steps, device)
    return each_direction(stacks, lambda layer, x, direction, start: run_fused_blocks(layer, x, plan, direction, start))


class StepMatmuls:
    """The three matmuls of a layer in the step loop, token-major, through the backend: the input
    projection x (N, I) -> (N, 4H) with the bias, the recurrence h (G, P) -> (G, 4H) and the
    projection hidden (G, H) -> (G, P), G the lanes at work (the whole chunk where rows depend on
    the row count). The two step matmuls are the backend's ``step_product``s, made once per call."""

    def __init__(self, layer: Any, matmuls: Matmuls) -> None:
        self.layer, self.matmuls = layer, matmuls
        self.recurrent = matmuls.step_product(layer.weight_hh)
        self.project = matmuls.step_product(layer.weight_hr)

    def inputs(self, x: Tensor, scratch: Optional["Scratch"] = None) -> Tensor:
        layer = self.layer
        out = scratch.take(x.shape[0], layer.weight_ih.shape[0], x) if scratch is not None else None
        return self.matmuls.linear(x, layer.weight_ih, layer.bias, out)


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
    layer: Any,
    x: Tensor,
    plan: LanePlan,
    direction: str,
    start: Optional[LayerState],
    matmuls: Matmuls,
    scratch: Optional[Scratch] = None,
) -> Tuple[Tensor, Optional[LayerState]]:
    """Exact, batch-invariant step loop. x (N, I) packed -> (N, P) packed; and with ``start``
    (h (B, P), c (B, H)), the state after each sentence's last token. ``scratch`` holds the
    input projection (shared by the layers of a call, which run one after another).

    State is token-major: h (lanes, P), c (lanes, H). The cell update runs on a chunk's working
    lanes only; the matmuls on those too where any row count gives the same rows, else on the
    whole chunk (idle rows cost time, not results)."""
    products = StepMatmuls(layer, matmuls)
    table = plan.tables[direction]
    schedule = [plan.groups(step, lane_multiple(layer.cells)) for step in range(plan.n_steps)]
    # The input projection's rows in the order the steps take them (row N, zeros, feeds idle
    # lanes): each step then reads a contiguous slice. Rows do not depend on their companions.
    order = [table[step, first : first + count] for step, groups in enumerate(schedule) for first, count in groups]
    tokens = torch.cat(order) if order else table.new_empty(0)  # (rows the steps take,) packed token index
    x_ext = torch.cat([x, x.new_zeros(1, x.shape[1])])
    inputs = products.inputs(x_ext[tokens], scratch).split([len(rows) for rows in order])  # one view per group
    h = x.new_zeros(plan.n_lanes, layer.projection_dim)
    c = x.new_zeros(plan.n_lanes, layer.cells)
    final = (start[0].clone(), start[1].clone()) if start is not None else None
    # each group's h in the order of ``tokens``, placed at their tokens at the end in one call, not a
    # call per step: (N, P) in all, under a quarter of the input projection's (N, 4H) (P < H)
    outputs = []
    group = 0
    for step, groups in enumerate(schedule):
        for lane, sentence in plan.starts.get(step, ()):
            h[lane] = start[0][sentence] if start is not None else 0
            c[lane] = start[1][sentence] if start is not None else 0
        for first, count in groups:
            rows = count if matmuls.any_rows else plan.width
            lanes = slice(first, first + count)
            gates = products.recurrent(h[first : first + rows])
            gates = (gates if rows == count else gates[:count]).add_(inputs[group])
            group += 1
            c[lanes], hidden = _cell_update(layer, gates, c[lanes])
            if count < rows:
                hidden = torch.cat([hidden, hidden.new_zeros(rows - count, hidden.shape[1])])
            projected = layer.project(hidden, products.project)
            projected = projected if rows == count else projected[:count]
            h[lanes] = projected
            outputs.append(projected)
        if final is not None:
            for lane, sentence in plan.ends.get(step, ()):
                final[0][sentence] = h[lane]
                final[1][sentence] = c[lane]
    out = x.new_empty(plan.n_tokens + 1, layer.projection_dim)
    if outputs:
        out[tokens] = torch.cat(outputs)
    return out[:-1], final


def _cell_update(layer: Any, gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
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


def run_fused_blocks(
    layer: Any, x: Tensor, plan: LanePlan, direction: str, start: Optional[LayerState]
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
    ``probed`` (on a CPU, whose backends probe the fused lanes) the smallest count from it up at which a
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


def fused_weights(layer: Any) -> List[Tensor]:
    """The layer's parameters in the order torch's LSTM kernel takes them (second bias zero)."""
    return [layer.weight_ih, layer.weight_hh, layer.bias, torch.zeros_like(layer.bias), layer.weight_hr]
