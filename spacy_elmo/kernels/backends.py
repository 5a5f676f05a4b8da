"""``Backend``: how one loaded model computes on one device in one precision, as one object
(``select`` makes it, once, where a model's runner is made), of one class per way of keeping a
row's result bitwise independent of the other rows of a call:

- ``OneDnnAnyRows``: oneDNN, whose rows were probed independent of the row count (``onednn``):
  every call runs at the rows it has;
- ``OneDnnFixedRows``: oneDNN bf16 on AMX, whose tiles change kernels with the row count: step
  matmuls keep a fixed row count, position-wise ones run on fixed shapes;
- ``FixedShapes``: zero-padded blocks of a fixed shape (``batch_invariant``); ``CudaFixedShapes``
  on a GPU without Triton, where torch's fused (cuDNN) LSTM runs exact fp32 calls;
- ``Int8Sums``: exact integer sums (``quantized``), any row count;
- ``TritonBackend``: on a CUDA GPU, the Triton kernels (``triton_ops``) run everything at each
  call's own size, both LSTM stacks at once, stateless calls replayed as CUDA graphs
  (``gpu_stacks.CallGraphs``).

A backend offers the few operations the network needs: ``linear`` and ``step_product``, the char
convolutions' best windows (``conv_max``), the elementwise functions (``sigmoid_``,
``activation_``), how many tokens the char encoder takes at once (``token_blocks``), and both LSTM
stacks over a call's sentences (``contextualize``). The network calls them and never asks which
backend it has; nothing outside this room asks about a device, a precision or a route.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import gpu_stacks, onednn, quantized
from .batch_invariant import Blocking, elementwise_, matmul_rows
from .gpu_stacks import CallGraphs
from .lstm_steps import (
    LstmStacks,
    LstmState,
    PairRunner,
    check_path,
    fused_runner,
    run_stacks,
    step_lanes_for,
    step_runner,
)
from .quantized import Int8Kernel
from .triton_ops import TritonOps


class Route(enum.Enum):
    """How matmuls keep rows independent of the row count (see the module docstring)."""

    ONEDNN_ANY_ROWS = "oneDNN, any row count"
    ONEDNN_FIXED_ROWS = "oneDNN, fixed row counts"
    FIXED_SHAPES = "fixed shapes"
    INT8 = "exact int8 sums"
    TRITON = "Triton kernels"


@dataclass(frozen=True)
class KernelChoice:
    """What runs for a precision, in words: ``requested`` (asked for), ``runs`` (what computes:
    "fp32" where the precision fell back), ``kernel``, ``reason`` (why this kernel, or why not the
    one asked for), ``features`` (the CPU features it rests on), ``slower`` (where the rule knows
    it is no faster than fp32 here: why; else None)."""

    requested: str
    runs: str
    kernel: str
    reason: str
    features: Tuple[str, ...] = ()
    slower: Optional[str] = None

    @property
    def fell_back(self) -> bool:
        return self.runs != self.requested


@dataclass(frozen=True)
class Backend:
    """How one loaded model computes on one device in one precision, one subclass per ``Route``
    (``select`` makes the one for the machine and the precision; see the module docstring).

    choice: what runs and why. blocking: the fixed sizes of the step loop and char encoder.
    int8: the int8 kernel (``Int8Sums``). gpu: the Triton kernels (``TritonBackend``).
    """

    device: torch.device
    choice: KernelChoice
    blocking: Blocking
    int8: Optional[Int8Kernel] = None
    gpu: Optional[TritonOps] = None

    route: ClassVar[Route]
    any_rows: ClassVar[bool]  # whether a call may run at the rows it has (no fixed shapes)
    # whether the "auto" LSTM path takes torch's fused kernel for unclipped, stateless exact calls
    # (on a GPU, where it is faster than the step loop)
    fused_when_auto: ClassVar[bool] = False
    # whether the fused kernel's lane count is probed for lane-independent bits (on a CPU, whose
    # MKL matmuls may change kernels with the rows)
    probes_fused_lanes: ClassVar[bool] = True

    @property
    def runs(self) -> str:
        """The precision that computes: "fp32", "bf16" or "int8"."""
        return self.choice.runs

    @property
    def exact(self) -> bool:
        """Whether the matmuls are exact fp32 (torch's fused LSTM kernel computes only that)."""
        return self.choice.runs == "fp32"

    def with_blocking(self, blocking: Optional[Blocking]) -> "Backend":
        """This backend on other fixed sizes (None: these)."""
        return self if blocking is None else dataclasses.replace(self, blocking=blocking)

    def linear(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor] = None,
        out: Optional[Tensor] = None,
        rows: Optional[int] = None,
        fine_inputs: bool = False,
    ) -> Tensor:
        """Position-wise ``F.linear``: x (M, K), weight (N, K), bias (N,) -> (M, N), each row
        bitwise independent of M; in blocks of ``rows`` rows (default ``blocking.gemm_rows``) where
        the route blocks; written into ``out`` (M, N) where given and the route writes in place (a
        buffer reused across calls: no fresh pages to fault in). ``fine_inputs``: a matmul whose
        rounding reaches the token representation undamped (the char convolutions, the token
        projection); a route that quantizes its inputs keeps more of them (``Int8Sums``)."""
        run = self._fine_linear if fine_inputs else self._linear
        return run(x, weight, bias, out, rows or self.blocking.gemm_rows)

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        """``linear`` on this route, ``rows`` given."""
        raise NotImplementedError

    def _fine_linear(
        self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int
    ) -> Tensor:
        """``linear`` with ``fine_inputs``: ``_linear`` where the route keeps its inputs whole."""
        return self._linear(x, weight, bias, out, rows)

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]:
        """``x @ weight.T`` as the LSTM step loop runs its recurrent and projection matmuls, for one
        weight: x (G, K) -> (G, N), G from ``step_rows``. The step loop makes one per weight and call,
        so a route's copy of the weight (reordered, quantized) is looked up once, not at each step."""
        raise NotImplementedError

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        """One step matmul (``step_product`` of ``weight``, applied to ``x``)."""
        return self.step_product(weight)(x)

    def step_rows(self, lanes: int) -> int:
        """The rows a step matmul of ``lanes`` working lanes takes: the lanes where any row count
        gives the same rows, else the whole chunk (``blocking.step_columns``)."""
        return lanes if self.any_rows else max(lanes, self.blocking.step_columns)

    def token_blocks(self, tokens: int) -> Tuple[int, int]:
        """(tokens per char-encoder block, the multiple the last block is padded to) for a call of
        ``tokens`` tokens: any row count pads only to whole SIMD blocks (32 tokens); fixed shapes
        pad the block whole."""
        if self.any_rows:
            return self.blocking.token_block_any_rows, 32
        return self.blocking.token_block, self.blocking.token_block

    def conv_max(self, chars: Tensor, convs: Sequence[Any]) -> Tensor:
        """Each filter's best window score, without bias: chars (n, C', E) and the char encoder's
        ``nn.Conv1d`` layers -> (n, F), the filters of every width side by side. Each window's
        scores are a row of one matmul (its rows in ``blocking.gemm_rows`` blocks)."""
        n_tokens, best = chars.shape[0], []
        for conv in convs:
            width = conv.kernel_size[0]
            windows = chars.unfold(1, width, 1)  # (n, C'-w+1, E, w)
            n_windows = windows.shape[1]
            scores = self.linear(
                windows.reshape(n_tokens * n_windows, -1), conv.weight.reshape(conv.out_channels, -1), fine_inputs=True
            )
            best.append(scores.view(n_tokens, n_windows, -1).amax(dim=1))
        return torch.cat(best, dim=1)

    def sigmoid_(self, x: Tensor) -> Tensor:
        """Sigmoid in place, every element on one code path (``elementwise_``)."""
        return elementwise_(Tensor.sigmoid_, x)

    def activation_(self, x: Tensor, name: str) -> Tensor:
        """The char encoder's activation ("relu" or "tanh") in place, as ``sigmoid_``."""
        return x.relu_() if name == "relu" else elementwise_(Tensor.tanh_, x)

    def call_graphs(self) -> Optional[CallGraphs]:
        """What a runner keeps to replay its calls (CUDA graphs); None where calls are launched."""
        return None

    def check_fits(self, model: torch.nn.Module) -> None:
        """Raise ValueError where this backend cannot run ``model`` (nothing here: see ``Int8Sums``)."""

    def contextualize(
        self,
        stacks: LstmStacks,
        tokens: Tensor,
        lengths: Sequence[int],
        initial_state: Optional[LstmState],
        path: str,
        graphs: Optional[CallGraphs] = None,
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Both stacks over packed sentences: tokens (N, P), B lengths -> layers (L+1, N, 2P) and,
        where ``initial_state`` was given, the state after each sentence's last token; ``path``
        "auto", "step" or "fused"; ``graphs``: this backend's ``call_graphs``."""
        run = self.layer_runner(stacks, list(lengths), path, initial_state is not None)
        return run_stacks(stacks.depth, stacks.residual, run, tokens, initial_state)

    def layer_runner(self, stacks: LstmStacks, lengths: List[int], path: str, stateful: bool) -> PairRunner:
        """How one call's LSTM layers run: torch's fused kernel where ``path`` asks for it (or
        "auto" and ``fused_when_auto``: unclipped, stateless, exact), else the exact step loop."""
        check_path(path)
        layer = stacks.forward[0]
        if path == "fused":
            self.refuse_fused(layer.is_clipped, stateful)
        if path == "fused" or (
            path == "auto" and self.fused_when_auto and self.exact and not (layer.is_clipped or stateful)
        ):
            sizes = (layer.projection_dim, layer.cells, layer.projection_dim)  # every input is the P-wide layer below
            blocking = self.blocking
            return fused_runner(
                stacks, lengths, sizes, blocking.fused_rows, blocking.fused_steps, self.probes_fused_lanes, self.device
            )
        return step_runner(stacks, self, lengths, self.step_width(lengths, layer.cells), self.device)

    def refuse_fused(self, clipped: bool, stateful: bool) -> None:
        """Raise ValueError where torch's fused LSTM kernel cannot run a call: a clipped model, a
        stateful call, or a backend other than exact fp32."""
        if clipped or stateful or not self.exact:
            reason = (
                "the model clips its cells or projections"
                if clipped
                else "stateful runs need the step loop"
                if stateful
                else f"{self.runs} runs the step loop"
            )
            raise ValueError(f"The fused LSTM path cannot run this call: {reason}. Use path='step'.")

    def step_width(self, lengths: List[int], cells: int) -> int:
        """Lanes per chunk of the step loop: where any row count gives the same rows, as many as
        there are sentences, up to ``step_lanes``; else the fixed ``step_columns`` (bf16 on fixed
        shapes: measured 32 as the best balance of one sentence and many)."""
        if not self.any_rows:
            return self.blocking.step_columns
        return step_lanes_for(lengths, self.blocking.step_lanes, cells)

    def description(self) -> Dict[str, Any]:
        """What ``info`` and the service's ``/metadata`` print."""
        return {
            "requested": self.choice.requested,
            "runs": self.choice.runs,
            "kernel": self.choice.kernel,
            "route": self.route.value,
            "reason": self.choice.reason,
            "cpu_features": list(self.choice.features),
            "slower": self.choice.slower,
            "device": str(self.device),
        }


class OneDnnAnyRows(Backend):
    """oneDNN, whose rows were probed independent of the row count: every call at the rows it has."""

    route, any_rows = Route.ONEDNN_ANY_ROWS, True

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        precision = self.choice.runs
        reordered = not onednn.plain_takes(weight, precision)  # a plain weight needs no second copy
        if out is None:
            out = x.new_empty(x.shape[0], weight.shape[0])
        for start in range(0, len(x), rows):  # written in place (with the bias): one pass per block
            block = onednn.linear(x[start : start + rows], weight, precision, reordered)
            target = out[start : start + rows]
            if bias is None:
                target.copy_(block)
            else:
                torch.add(block, bias, out=target)
        return out

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]:
        return onednn.prepared_linear(weight, self.choice.runs)


class FixedShapes(Backend):
    """Zero-padded blocks of a fixed shape (``batch_invariant``): a row's bits are those of its
    block's shape, whatever the rows beside it."""

    route, any_rows = Route.FIXED_SHAPES, False

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        result = matmul_rows(x, weight.t(), rows, self.choice.runs)
        return result if bias is None else result.add_(bias)

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]:
        weight_t, precision = weight.t(), self.choice.runs
        return lambda x: matmul_rows(x, weight_t, x.shape[0], precision)


class OneDnnFixedRows(FixedShapes):
    """oneDNN bf16 on AMX, whose tiles change kernels with the row count: position-wise matmuls on
    fixed shapes, step matmuls at the fixed row count of the step loop's chunks."""

    route = Route.ONEDNN_FIXED_ROWS

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]:
        return onednn.prepared_linear(weight, self.choice.runs)


class Int8Sums(Backend):
    """Exact integer sums (``quantized``): the same bits at any row count, on every int8 kernel."""

    route, any_rows = Route.INT8, True

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        assert self.int8 is not None  # select gives Int8Sums its kernel
        return quantized.linear(x, weight, self.int8, bias)

    def _fine_linear(
        self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int
    ) -> Tensor:
        """x in two int8 terms (``quantized.quantize_rows_twice``): with one term per row, layer 0
        fell short of int8's promised cosine (docs/promises.md)."""
        assert self.int8 is not None
        return quantized.linear(x, weight, self.int8, bias, fine_inputs=True)

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]:
        assert self.int8 is not None
        return quantized.prepared_linear(weight, self.int8)

    def check_fits(self, model: torch.nn.Module) -> None:
        """Refuse a model with a matmul summing more than ``quantized.MAX_K`` products: its int32
        sums could overflow. Raises ValueError naming the weight and the alternative."""
        for name, weight in model.named_parameters():
            if weight.dim() >= 2:
                quantized.check_sum_length(weight[0].numel(), f"this model (its weight {name})")


class CudaFixedShapes(FixedShapes):
    """Fixed shapes on a CUDA GPU without Triton: exact fp32 calls take torch's fused (cuDNN) LSTM."""

    fused_when_auto, probes_fused_lanes = True, False


class TritonBackend(Backend):
    """On a CUDA GPU, the Triton kernels (``triton_ops``), everything at each call's own size."""

    route, any_rows = Route.TRITON, True
    probes_fused_lanes = False

    @property
    def ops(self) -> TritonOps:
        """The Triton kernels themselves."""
        assert self.gpu is not None  # select gives TritonBackend its kernels
        return self.gpu

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        return self.ops.linear(x, weight, bias)

    def step_product(self, weight: Tensor) -> Callable[[Tensor], Tensor]:
        return functools.partial(self.ops.linear, weight=weight)

    def token_blocks(self, tokens: int) -> Tuple[int, int]:
        """Every token of a call at once: a row's bits do not depend on the others'."""
        return max(tokens, 1), 1

    def conv_max(self, chars: Tensor, convs: Sequence[Any]) -> Tensor:
        weights, widths = self.ops.conv_weights([conv.weight for conv in convs])
        return self.ops.conv_max(chars, weights, widths)

    def call_graphs(self) -> Optional[CallGraphs]:
        return CallGraphs()

    def contextualize(
        self,
        stacks: LstmStacks,
        tokens: Tensor,
        lengths: Sequence[int],
        initial_state: Optional[LstmState],
        path: str,
        graphs: Optional[CallGraphs] = None,
    ) -> Tuple[Tensor, Optional[LstmState]]:
        """Through the Triton kernels, unless the fused path is asked for: stateless calls replay a
        CUDA graph (``graphs``) from their bucket's second call on, the others launch the kernels
        one by one; the same bits either way."""
        if path == "fused":
            return super().contextualize(stacks, tokens, lengths, initial_state, path)
        check_path(path)
        pairs = gpu_stacks.Stacks.of(self.ops, stacks.forward, stacks.backward, stacks.residual)
        if initial_state is None and graphs is not None and graphs.takes(tokens):
            replayed = graphs.run(self.ops, pairs, tokens, lengths)
            if replayed is not None:
                return replayed, None
        schedule = gpu_stacks.Schedule.build(lengths)
        return gpu_stacks.run_stacks(
            self.ops, pairs, tokens, schedule.tables(schedule.on(tokens.device)), initial_state
        )
