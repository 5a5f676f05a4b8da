"""The lane schedule of inference: which token each lane of the step loop takes at each step.

Sentences arrive packed, one after another: x (N, I) with B lengths. For inference they stream
through a fixed number of *lanes* (continuous batching): each lane runs one sentence after another,
its state reset to the sentence's start state whenever a new one begins, so little compute is spent
on padding. The step loop (``step_loop``) and the fused blocks (``fused_lstm``) both follow a
``LanePlan``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor


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
