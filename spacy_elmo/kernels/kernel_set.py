"""``Kernels``: what a loaded model computes its matmuls with, as one object (``select`` makes it),
of one class per way of keeping a row's result bitwise independent of the other rows of a call:

- ``OneDnnAnyRows``: oneDNN, whose rows were probed independent of the row count (``onednn``):
  every call runs at the rows it has;
- ``OneDnnFixedRows``: oneDNN bf16 on AMX, whose tiles change kernels with the row count: step
  matmuls keep a fixed row count, position-wise ones run on fixed shapes;
- ``FixedShapes``: zero-padded blocks of a fixed shape (``batch_invariant``);
- ``Int8Sums``: exact integer sums (``quantized``), any row count;
- ``TritonKernels``: on a CUDA GPU, the Triton kernels of ``gpu`` run everything at each call's
  own size (``triton_ops``).

The network never asks which one runs: it calls the entry points (``linear`` for position-wise
matmuls, ``step_matmul`` for the LSTM step loop) and reads the sizes they need (``step_rows``,
``token_blocks``, ``blocking``); ``network.backends`` runs a call's char convolutions and LSTM
layers the way the kernels take.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple

import torch
from torch import Tensor

from . import onednn, quantized
from .batch_invariant import Blocking, matmul_rows
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
class Kernels:
    """The matmul entry points of one loaded model on one device, one subclass per ``Route``
    (``select`` makes the one for the machine and the precision).

    choice: what runs and why. blocking: the fixed sizes of the step loop and char encoder.
    int8: the int8 kernel (``Int8Sums``). gpu: the Triton kernels (``TritonKernels``).
    """

    device: torch.device
    choice: KernelChoice
    blocking: Blocking
    int8: Optional[Int8Kernel] = None
    gpu: Optional[TritonOps] = None

    route: ClassVar[Route]
    any_rows: ClassVar[bool]  # whether a call may run at the rows it has (no fixed shapes)

    @property
    def runs(self) -> str:
        """The precision that computes: "fp32", "bf16" or "int8"."""
        return self.choice.runs

    @property
    def exact(self) -> bool:
        """Whether the matmuls are exact fp32 (torch's fused LSTM kernel computes only that)."""
        return self.choice.runs == "fp32"

    @property
    def fused_when_auto(self) -> bool:
        """Whether the "auto" LSTM path takes torch's fused kernel for unclipped, stateless calls:
        exact fp32 on a CUDA GPU (where it is faster than the step loop)."""
        return self.exact and self.device.type == "cuda"

    @property
    def probes_fused_lanes(self) -> bool:
        """Whether torch's fused LSTM kernel needs its lane count probed for lane-independent bits
        (on a CPU, whose MKL matmuls may change kernels with the rows; ``fused_lstm.fused_lanes``)."""
        return self.device.type == "cpu"

    @property
    def captures_graphs(self) -> bool:
        """Whether calls may be captured and replayed as CUDA graphs (on a CUDA device)."""
        return self.device.type == "cuda"

    def with_blocking(self, blocking: Optional[Blocking]) -> "Kernels":
        """These kernels on other fixed sizes (None: these)."""
        return self if blocking is None else dataclasses.replace(self, blocking=blocking)

    def linear(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor] = None,
        out: Optional[Tensor] = None,
        rows: Optional[int] = None,
    ) -> Tensor:
        """Position-wise ``F.linear``: x (M, K), weight (N, K), bias (N,) -> (M, N), each row
        bitwise independent of M; in blocks of ``rows`` rows (default ``blocking.gemm_rows``) where
        the route blocks; written into ``out`` (M, N) where given and the route writes in place (a
        buffer reused across calls: no fresh pages to fault in)."""
        return self._linear(x, weight, bias, out, rows or self.blocking.gemm_rows)

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        """``linear`` on this route, ``rows`` given."""
        raise NotImplementedError

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        """``x @ weight.T`` as the LSTM step loop runs its recurrent and projection matmuls:
        x (G, K) -> (G, N), G from ``step_rows``."""
        raise NotImplementedError

    def step_rows(self, lanes: int) -> int:
        """The rows a step matmul of ``lanes`` working lanes takes: the lanes where any row count
        gives the same rows, else the whole chunk (``blocking.step_columns``)."""
        return lanes if self.any_rows else max(lanes, self.blocking.step_columns)

    def token_blocks(self) -> Tuple[int, int]:
        """(tokens per char-encoder block, the multiple the last block is padded to): any row
        count pads only to whole SIMD blocks (32 tokens); fixed shapes pad the block whole."""
        if self.any_rows:
            return self.blocking.token_block_any_rows, 32
        return self.blocking.token_block, self.blocking.token_block

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


class OneDnnAnyRows(Kernels):
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

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        return onednn.linear(x, weight, self.choice.runs)


class FixedShapes(Kernels):
    """Zero-padded blocks of a fixed shape (``batch_invariant``): a row's bits are those of its
    block's shape, whatever the rows beside it."""

    route, any_rows = Route.FIXED_SHAPES, False

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        result = matmul_rows(x, weight.t(), rows, self.choice.runs)
        return result if bias is None else result.add_(bias)

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        return matmul_rows(x, weight.t(), x.shape[0], self.choice.runs)


class OneDnnFixedRows(FixedShapes):
    """oneDNN bf16 on AMX, whose tiles change kernels with the row count: position-wise matmuls on
    fixed shapes, step matmuls at the fixed row count of the step loop's chunks."""

    route = Route.ONEDNN_FIXED_ROWS

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        return onednn.linear(x, weight, self.choice.runs)


class Int8Sums(Kernels):
    """Exact integer sums (``quantized``): the same bits at any row count, on every int8 kernel."""

    route, any_rows = Route.INT8, True

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        assert self.int8 is not None  # select gives Int8Sums its kernel
        return quantized.linear(x, weight, self.int8, bias)

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        assert self.int8 is not None
        return quantized.linear(x, weight, self.int8)


class TritonKernels(Kernels):
    """On a CUDA GPU, the Triton kernels of ``gpu``, everything at each call's own size
    (``triton_ops``)."""

    route, any_rows = Route.TRITON, True

    @property
    def ops(self) -> TritonOps:
        """The Triton kernels themselves (char convolutions, LSTM steps: ``network.backends``)."""
        assert self.gpu is not None  # select gives TritonKernels their kernels
        return self.gpu

    def _linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Optional[Tensor], rows: int) -> Tensor:
        return self.ops.linear(x, weight, bias)

    def step_matmul(self, x: Tensor, weight: Tensor) -> Tensor:
        return self.ops.linear(x, weight)
