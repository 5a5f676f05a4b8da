"""How one LSTM layer runs over a batch of packed sentences.

Sentences arrive packed, one after another: x (N, I) with B lengths. For inference they stream
through a fixed number of *lanes* (continuous batching): each lane runs one sentence after another,
its state reset to the sentence's start state whenever a new one begins, so little compute is spent
on padding. A sentence's result is bitwise the same whatever else is in the batch: its matmul rows
go through kernels whose rows do not depend on the row count (oneDNN in fp32 on CPU, see
``onednn``; int8's exact integer sums, see ``quantized``) or through fixed shapes
(``batch_invariant``). Two inference runners share the plan:

- ``run_step_loop``: the exact step loop (cell and projection clipping, carried state), token-major:
  h (lanes, P), c (lanes, H); each step's matmuls take the chunk's lanes still at work.
- ``run_fused_blocks``: torch's fused LSTM kernel (as in ``nn.LSTM(proj_size=...)``; cuDNN on GPU)
  for unclipped layers, on blocks of (lanes, steps); sentences start at block boundaries.

``run_differentiable`` is the training path: cuDNN's fused kernel over a PackedSequence-style
batch for unclipped layers on GPU, an autograd step loop otherwise.
"""

from __future__ import annotations

import heapq
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..kernels import onednn
from ..kernels.batch_invariant import (
    Blocking,
    elementwise_,
    linear_rows,
    rows_any_count,
    smallest_clean_count,
    step_matmul,
)
from ..kernels.onednn import holds_at_thread_counts

if TYPE_CHECKING:
    from .lstm_layer import LstmLayer

LayerState = Tuple[Tensor, Tensor]  # h (B, P), c (B, H)

# torch warns each time that oneDNN lacks projections and falls back to its own kernel: expected.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")


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


class StepMatmuls:
    """The three matmuls of a layer in the step loop, token-major: the input projection
    x (N, I) -> (N, 4H) with the bias, the recurrence h (G, P) -> (G, 4H) and the projection
    hidden (G, H) -> (G, P), through ``batch_invariant.step_matmul``: where any G gives the same
    rows (``any_rows``: int8, and fp32 through oneDNN on CPU) G is the working lanes, elsewhere
    the chunk width."""

    def __init__(self, layer: LstmLayer, blocking: Blocking, device: torch.device) -> None:
        self.layer, self.blocking = layer, blocking
        self.any_rows = rows_any_count(device, blocking.precision)

    def inputs(self, x: Tensor, scratch: Optional["Scratch"] = None) -> Tensor:
        layer, blocking = self.layer, self.blocking
        out = scratch.take(x.shape[0], layer.weight_ih.shape[0], x) if scratch is not None else None
        return linear_rows(
            x, layer.weight_ih, layer.bias, blocking.gemm_rows, blocking.precision, out, blocking.int8_kernel
        )

    def recurrent(self, h: Tensor) -> Tensor:
        return step_matmul(h, self.layer.weight_hh, self.blocking)

    def project(self, hidden: Tensor) -> Tensor:
        return step_matmul(hidden, self.layer.weight_hr, self.blocking)


class Scratch:
    """One buffer that the layers of a call take in turn for their input projection (rows, 4H),
    the largest tensor of a call: a fresh one per layer would be fresh pages, each faulted in
    and zeroed by the kernel on first touch (measured on 64 sentences of the original model:
    writing the projection with its bias took 88 ms into fresh memory, 47 ms into reused)."""

    def __init__(self) -> None:
        self._flat: Optional[Tensor] = None

    def take(self, rows: int, cols: int, like: Tensor) -> Tensor:
        """An uninitialized (rows, cols) tensor of ``like``'s dtype and device."""
        size = rows * cols
        flat = self._flat
        if flat is None or flat.numel() < size or flat.dtype != like.dtype or flat.device != like.device:
            flat = self._flat = like.new_empty(size)
        return flat[:size].view(rows, cols)


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


def run_step_loop(
    layer: LstmLayer,
    x: Tensor,
    plan: LanePlan,
    direction: str,
    start: Optional[LayerState],
    blocking: Blocking,
    scratch: Optional[Scratch] = None,
) -> Tuple[Tensor, Optional[LayerState]]:
    """Exact, batch-invariant step loop. x (N, I) packed -> (N, P) packed; and with ``start``
    (h (B, P), c (B, H)), the state after each sentence's last token. ``scratch`` holds the
    input projection (shared by the layers of a call, which run one after another).

    State is token-major: h (lanes, P), c (lanes, H). The cell update runs on a chunk's working
    lanes only; the matmuls on those too where any row count gives the same rows, else on the
    whole chunk (idle rows cost time, not results)."""
    matmuls = StepMatmuls(layer, blocking, x.device)
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
            rows = count if matmuls.any_rows else plan.width
            lanes = slice(first, first + count)
            tokens = table[step, lanes]
            gates = matmuls.recurrent(h[first : first + rows])[:count].add_(inputs[taken : taken + count])
            taken += count
            hidden = _cell_update(gates, c[lanes], layer.cell_clip)
            if count < rows:
                hidden = torch.cat([hidden, hidden.new_zeros(rows - count, hidden.shape[1])])
            h[lanes] = matmuls.project(hidden)[:count]
            if layer.proj_clip is not None:
                h[lanes].clamp_(-layer.proj_clip, layer.proj_clip)
            out[tokens] = h[lanes]
        if final is not None:
            for lane, sentence in plan.ends.get(step, ()):
                final[0][sentence] = h[lane]
                final[1][sentence] = c[lane]
    return out[:-1], final


def _cell_update(gates: Tensor, c: Tensor, cell_clip: Optional[float]) -> Tensor:
    """gates (G, 4H) in order i, f, g, o, contiguous -> updates c (G, H) in place and returns
    hidden (G, H).

    One sigmoid runs over all four gates, the cell input's as tanh(x) = 2 sigmoid(2x) - 1: so the
    transcendental functions only ever see whole contiguous rows, wherever a lane sits, and the
    rest (x2, -1, products, sums, clipping) are IEEE operations that round alike everywhere."""
    cells = c.shape[1]
    cell_input = gates[:, 2 * cells : 3 * cells]
    cell_input.mul_(2)
    elementwise_(Tensor.sigmoid_, gates)
    cell_input.mul_(2).sub_(1)
    c.mul_(gates[:, cells : 2 * cells])
    c.add_(gates[:, :cells] * cell_input)
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    hidden = elementwise_(Tensor.tanh_, c.clone())  # c: whole rows, contiguous
    return hidden.mul_(gates[:, 3 * cells :])


def run_fused_blocks(
    layer: LstmLayer, x: Tensor, plan: LanePlan, direction: str, start: Optional[LayerState], blocking: Blocking
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
            y, h[chunk], c[chunk] = torch.lstm(
                x_ext[tokens], (h[chunk], c[chunk]), weights, True, 1, 0.0, False, False, True
            )
            out[tokens] = y
    return out[:-1], None


def fused_lanes(input_dim: int, cells: int, projection_dim: int, blocking: Blocking, device: torch.device) -> int:
    """Lanes per block of the fused kernel for a layer of these sizes: ``blocking.fused_rows``, or
    on CPU the smallest count from it up at which a probe finds torch's LSTM kernel (MKL matmuls,
    see ``clean_rows``) giving every lane the bits of the first at each of
    ``onednn.probed_thread_counts``; probed once per shape. Raises RuntimeError where no count up
    to ``fused_rows`` + ``max(8, fused_rows // 4)`` is."""
    lanes = blocking.fused_rows
    if device.type != "cpu":
        return lanes
    shapes = ((4 * cells, input_dim), (4 * cells, projection_dim), (4 * cells,), (4 * cells,), (projection_dim, cells))
    key = (lanes, blocking.fused_steps, shapes, onednn.probed_thread_counts())
    if key not in _FUSED_LANES:
        _FUSED_LANES[key] = _probe_fused_lanes(lanes, blocking.fused_steps, shapes, key[-1])
    return _FUSED_LANES[key]


_FUSED_LANES: Dict[Tuple, int] = {}


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
            y, _, _ = torch.lstm(x, state, weights, True, 1, 0.0, False, False, True)
            return bool(torch.equal(y, y[:1].expand_as(y)))

        return holds_at_thread_counts(check, thread_counts)

    return smallest_clean_count(
        lanes,
        lanes_agree,
        "torch's fused LSTM kernel gives the lanes of no block of {} lanes the same bits on this machine: its "
        "results would depend on the batch. Use path='step'.",
    )


def fused_weights(layer: LstmLayer) -> List[Tensor]:
    """The layer's parameters in the order torch's LSTM kernel takes them (second bias zero)."""
    return [layer.weight_ih, layer.weight_hh, layer.bias, torch.zeros_like(layer.bias), layer.weight_hr]


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
    """Autograd path for training. x (N, I) packed -> (N, P) packed. cuDNN's fused kernel on GPU
    for unclipped layers; elsewhere an autograd step loop (ATen's CPU LSTM slices its inputs once
    per step, and every slice's backward fills a gradient as large as all of them)."""
    if not order.batch_sizes:
        return x.new_zeros(0, layer.projection_dim)
    index = order.index[direction]
    x_time = x[index]
    active = order.batch_sizes[0]
    h0 = x.new_zeros(active, layer.projection_dim)
    c0 = x.new_zeros(active, layer.cells)
    if layer.is_clipped or x.device.type != "cuda":
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
        c = torch.sigmoid(f) * c[:active] + torch.sigmoid(i) * torch.tanh(g)
        if layer.cell_clip is not None:
            c = c.clamp(-layer.cell_clip, layer.cell_clip)
        h = (torch.sigmoid(o) * torch.tanh(c)) @ layer.weight_hr.t()
        if layer.proj_clip is not None:
            h = h.clamp(-layer.proj_clip, layer.proj_clip)
        outputs.append(h)
    return torch.cat(outputs)
