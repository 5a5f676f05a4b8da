"""Calls on a CUDA GPU replayed as CUDA graphs: one launch instead of three or four a step.

One sentence of 24 tokens takes 48 steps through the two layers, each three or four kernel launches
(both directions in each); a call of 4,096 tokens takes as many steps as its longest sentence,
hundreds of launches. Launching a Triton kernel from Python costs the host about as long as a small
step's kernels run (the profile in BENCHMARKS.md); replaying them as a graph removes that cost. A
graph is captured per bucket of (tokens, steps, lanes), each rounded up with
``row_buckets.bucket_rows`` (at most 25% more), and replayed for every call that falls in it: its
tokens copied into the graph's input rows (rows past the call's hold whatever the last call left: no
lane reads them, and no row's bits depend on another's), its step tables padded with steps where no
lane works. The graph runs the kernels of ``gpu_stacks.run_stacks`` on the same values, so its
results are bitwise those of launching them one by one.

A bucket is captured the second time a call falls in it (the first launches the kernels one by
one): a shape met once costs nothing more, and a stream of shapes that never come back costs no
captures. The capture's own run, which compiles what Triton has not, answers that call.

The graphs of a model share one memory pool (which keeps the largest call's intermediate values,
as the caching allocator would) and replay under one lock, each call's layers copied out before the
next replay. What each graph keeps for itself (its input rows, tables and layers) is bounded by
``MOST_GRAPH_BYTES`` and ``MOST_GRAPHS``, the least recently used dropped first. A capture watches
only its own thread's CUDA calls (a service's other threads may launch meanwhile); where a capture
fails all the same, the model launches its kernels one by one from then on (the same results), with
one warning that says why.

Graphs read the stacked weights they were captured with: a graph is kept for the ``LayerPair``
objects it read, and weights changed in place give new ones (and new graphs). Stateful calls and
calls above ``MOST_TOKENS`` tokens launch the kernels one by one.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..kernels.row_buckets import bucket_rows
from ..kernels.triton_ops import TritonOps
from .gpu_stacks import Schedule, Stacks, run_stacks

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
