"""``TritonOps``: the kernels of ``triton_kernels`` for one precision, chosen once per CUDA model
(``for_device``). One tile configuration per kernel and precision (``TILES``): what runs depends on
the precision alone, never on a timing or on the rows beside a row. The weights the kernels read
are made once per weight version (``precision.derived_copy``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .precision import derived_copy, operand


@dataclass(frozen=True)
class Tiles:
    """One kernel's tile: rows, columns and K per program, warps, pipeline stages; ``piece``: the K
    length of each separately summed piece of a step matmul (``triton_kernels.step_pieces_kernel``);
    ``narrow``: (lanes, rows): an fp32 step call of at most that many lanes runs programs of at
    most that many rows, so that few lanes do not leave SMs idle."""

    rows: int
    cols: int
    depth: int
    warps: int = 4
    stages: int = 2
    piece: int = 128
    narrow: Optional[Tuple[int, int]] = None


@dataclass(frozen=True)
class KernelTiles:
    """The tiles of every kernel in one precision (cell: ``cols`` is cells per program). fp32 step
    kernels sum in order, so ``rows`` is only the most: fewer lanes take the power of two covering them."""

    linear: Tiles
    conv: Tiles
    cell: Tiles
    projection: Tiles
    recurrent: Optional[Tiles] = None  # the recurrent matmul in pieces; None: inside the cell kernel
    sums: Tiles = Tiles(32, 128, 1, stages=3)  # adding the projection's pieces: the most lanes, columns
    unrolled: int = 32  # fp32 step kernels: lanes per program x multiply-adds unrolled, at least


# The fastest tried on an H100 (BENCHMARKS.md, "The Triton kernels' tiles"); fp32's step kernels at
# 128 and 512 lanes, and the projection's at 32.
TILES = {
    "fp32": KernelTiles(
        linear=Tiles(128, 128, 16, warps=8, stages=2),
        conv=Tiles(32, 128, 16, warps=4, stages=2),
        cell=Tiles(16, 64, 1, warps=2, stages=1),
        projection=Tiles(32, 64, 4, warps=1, stages=1, piece=128, narrow=(32, 8)),
        recurrent=Tiles(32, 64, 4, warps=1, stages=1, piece=128),
    ),
    "bf16": KernelTiles(
        linear=Tiles(128, 256, 64, warps=8, stages=3),
        conv=Tiles(128, 128, 16, warps=8, stages=3),
        cell=Tiles(16, 32, 64, warps=4, stages=3),
        projection=Tiles(16, 64, 64, warps=4, stages=3, piece=128),
    ),
}
GROUP_ROWS = 8  # row blocks a linear's programs walk down one column block before the next


class LayerPair(NamedTuple):
    """Both directions of one LSTM layer as the kernels read them: w_ih (2, 4H, I), bias (2, 4H)
    fp32, transposed w_hh (2, P, 4H) and w_hr (2, H, P); matmul weights in the precision's dtype."""

    w_ih: Tensor
    bias: Tensor
    w_hh: Tensor
    w_hr: Tensor


class StepTables(NamedTuple):
    """What each lane does at each step (see ``triton_kernels.lstm_cell_kernel``): token
    (2, steps, lanes), start and end (steps, lanes), active (steps,), all int32 on the device."""

    token: Tensor
    start: Tensor
    end: Tensor
    active: Tensor


class LaneState(NamedTuple):
    """The step loop's state: h (2, lanes, P), c and hidden (2, lanes, H), the projection's pieces
    (2, pieces, lanes, P) and the recurrent matmul's (2, pieces, lanes, 4H), empty if the cell kernel sums."""

    h: Tensor
    c: Tensor
    hidden: Tensor
    pieces: Tensor
    gate_pieces: Tensor


class Starts(NamedTuple):
    """Stateful runs: each sentence's start state h (2, B, P), c (2, B, H), and where its final
    state goes, final_h (2, B, P), final_c (2, B, H)."""

    h: Tensor
    c: Tensor
    final_h: Tensor
    final_c: Tensor


@dataclass(frozen=True)
class TritonOps:
    """The kernels of one precision ("fp32": IEEE; "bf16": bf16 products, fp32 sums) and their
    tiles (``TILES[precision]``: what a model runs; others only in a benchmark of tiles)."""

    precision: str
    tiles: KernelTiles

    @classmethod
    def of(cls, precision: str) -> "TritonOps":
        if precision not in TILES:
            raise ValueError(f"The Triton kernels run 'fp32' or 'bf16', got {precision!r}.")
        return cls(precision, TILES[precision])

    @property
    def weight_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    @property
    def kernels(self) -> ModuleType:
        """``triton_kernels``, imported where a GPU (or Triton's interpreter) runs them."""
        from . import triton_kernels

        return triton_kernels

    def weight(self, weight: Tensor) -> Tensor:
        """``weight`` contiguous in the precision's dtype (bf16: ``precision.operand``'s cached copy)."""
        return operand(weight, self.precision).contiguous()

    def linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        """x (M, K) fp32 @ weight (N, K).T + bias (N,) -> (M, N) fp32."""
        out = x.new_empty(x.shape[0], weight.shape[0], dtype=torch.float32)
        x = x.contiguous()
        self._linear(x, self.weight(weight), bias, out, x_batch_stride=0, batches=1)
        return out

    def linear_pair(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """Both directions' input projections: x (2, M, K), a batch stride of 0 where both read
        the same rows; weight (2, N, K), bias (2, N) -> (2, M, N) fp32."""
        if x.stride(2) != 1 or x.stride(1) != x.shape[2]:
            x = x.contiguous()
        out = x.new_empty(2, x.shape[1], weight.shape[1], dtype=torch.float32)
        self._linear(x[0], weight, bias, out, x_batch_stride=x.stride(0), batches=2)
        return out

    def _linear(
        self, x: Tensor, weight: Tensor, bias: Optional[Tensor], out: Tensor, x_batch_stride: int, batches: int
    ) -> None:
        rows, (n, k) = x.shape[0], weight.shape[-2:]
        if rows == 0:
            return
        tiles = self.tiles.linear
        grid = (_blocks(rows, tiles.rows) * _blocks(n, tiles.cols), batches)
        self.kernels.linear_kernel[grid](
            x,
            weight,
            bias if bias is not None else out,
            out,
            rows,
            x_batch_stride,
            x.stride(0),
            out.stride(0) if batches > 1 else 0,
            out.stride(-2),
            N=n,
            K=k,
            HAS_BIAS=bias is not None,
            BF16=self.precision == "bf16",
            BM=tiles.rows,
            BN=tiles.cols,
            BK=tiles.depth,
            GROUP_M=GROUP_ROWS,
            num_warps=tiles.warps,
            num_stages=tiles.stages,
        )

    def conv_max(self, chars: Tensor, weight: Tensor, widths: Tensor) -> Tensor:
        """chars (n, C, E) fp32, weight (F, widest * E) position-major, widths (F,) int32 -> each
        filter's best window score (n, F), without bias (``triton_kernels.conv_max_kernel``)."""
        tokens, positions, dim = chars.shape
        filters = weight.shape[0]
        out = chars.new_empty(tokens, filters)
        if tokens == 0:
            return out
        tiles = self.tiles.conv
        self.kernels.conv_max_kernel[(_blocks(tokens, tiles.rows), _blocks(filters, tiles.cols))](
            chars.contiguous(),
            weight,
            widths,
            out,
            tokens,
            positions,
            F=filters,
            E=dim,
            WIDEST=weight.shape[1] // dim,
            BF16=self.precision == "bf16",
            BM=tiles.rows,
            BN=tiles.cols,
            BK=tiles.depth,
            num_warps=tiles.warps,
            num_stages=tiles.stages,
        )
        return out

    def conv_weights(self, weights: Sequence[Tensor]) -> Tuple[Tensor, Tensor]:
        """Convolution weights (F_w, E, w) of every width -> one position-major (F, widest * E) matrix
        in the precision's dtype, zero past each filter's width, and widths (F,) int32; cached."""
        first = weights[0]
        kind = ("triton conv", self.precision, tuple((id(w), w._version) for w in weights[1:]))
        return derived_copy(first, kind, lambda _: self._make_conv_weights(weights))

    def _make_conv_weights(self, weights: Sequence[Tensor]) -> Tuple[Tensor, Tensor]:
        widest = max(w.shape[2] for w in weights)
        dim = weights[0].shape[1]
        blocks, widths = [], []
        for w in weights:
            padded = w.new_zeros(w.shape[0], widest, dim)
            padded[:, : w.shape[2]] = w.permute(0, 2, 1)  # (F_w, width, E): position-major
            blocks.append(padded.reshape(w.shape[0], widest * dim))
            widths.append(torch.full((w.shape[0],), w.shape[2], dtype=torch.int32, device=w.device))
        return torch.cat(blocks).to(self.weight_dtype).contiguous(), torch.cat(widths)

    def layer_pair(self, forward: torch.nn.Module, backward: torch.nn.Module) -> LayerPair:
        """Both directions of an LSTM layer (``LstmLayer``) stacked, made once per weight version."""
        names = ("weight_ih", "bias", "weight_hh", "weight_hr")
        tensors = [getattr(layer, name) for name in names for layer in (forward, backward)]
        kind = ("triton layer pair", self.precision, tuple((id(t), t._version) for t in tensors[1:]))
        return derived_copy(tensors[0], kind, lambda _: self._make_layer_pair(tensors))

    def _make_layer_pair(self, tensors: Sequence[Tensor]) -> LayerPair:
        def stacked(pair: Sequence[Tensor], dtype: torch.dtype) -> Tensor:
            return torch.stack([t.detach() for t in pair]).to(dtype).contiguous()

        dtype = self.weight_dtype
        return LayerPair(
            w_ih=stacked(tensors[0:2], dtype),
            bias=stacked(tensors[2:4], torch.float32),
            w_hh=stacked([t.t() for t in tensors[4:6]], dtype),
            w_hr=stacked([t.t() for t in tensors[6:8]], dtype),
        )

    def lane_state(self, lanes: int, cells: int, proj: int, like: Tensor) -> LaneState:
        """Uninitialized buffers for the step loop of ``lanes`` lanes."""
        pieces = -(-cells // self.tiles.projection.piece)
        recurrent = self.tiles.recurrent
        gate_pieces = -(-proj // recurrent.piece) if recurrent is not None else 0
        return LaneState(
            h=like.new_empty(2, lanes, proj),
            c=like.new_empty(2, lanes, cells),
            hidden=like.new_empty(2, lanes, cells),
            pieces=like.new_empty(2, pieces, lanes, proj),
            gate_pieces=like.new_empty(2, gate_pieces, lanes, 4 * cells),
        )

    def program_shape(self, tiles: Tiles, lanes: int) -> Tuple[int, int]:
        """Lanes per program and K per loop step: fixed in bf16 (``tl.dot``); in fp32 (the same bits
        for any shape) ``lanes_per_program`` of the tiles' rows (``narrow``'s for few lanes), more K
        unrolled for fewer lanes so that one sentence keeps as many weight loads in flight as a batch."""
        if self.precision == "bf16":
            return tiles.rows, tiles.depth
        most = tiles.narrow[1] if tiles.narrow is not None and lanes <= tiles.narrow[0] else tiles.rows
        rows = lanes_per_program(most, lanes)
        return rows, min(max(tiles.depth, self.tiles.unrolled // rows), tiles.piece)

    def lstm_step(
        self,
        step: int,
        weights: LayerPair,
        gate_inputs: Tensor,
        tables: StepTables,
        state: LaneState,
        out: Tensor,
        clips: Tuple[Optional[float], Optional[float]],
        starts: Optional[Starts] = None,
    ) -> None:
        """Step ``step`` of both directions: the recurrent matmul (in pieces where ``tiles.recurrent``
        is set), the cells, the projection's pieces and their sum, written to ``state`` and to out
        (2, N, P) at each lane's token. gate_inputs (2, N, 4H); clips: (cell, projection), None: none."""
        lanes, cells, proj = state.h.shape[1], state.c.shape[2], state.h.shape[2]
        first = starts if starts is not None else Starts(state.h, state.c, state.h, state.c)
        if self.tiles.recurrent is not None:
            self._pieces(self.tiles.recurrent, step, state.h, weights.w_hh, state.gate_pieces, tables, True, starts)
        cell = self.tiles.cell
        rows, depth = self.program_shape(cell, lanes)
        self.kernels.lstm_cell_kernel[(_blocks(lanes, rows) * _blocks(cells, cell.cols), 2)](
            state.h, state.c, state.hidden, weights.w_hh, gate_inputs,
            tables.token, tables.start, tables.active, first.h, first.c, tables.end, first.final_c,
            step, tables.start.shape[0], lanes, tables.start.shape[1], gate_inputs.shape[1], first.h.shape[1],
            state.gate_pieces, PIECES=state.gate_pieces.shape[1],
            H=cells, P=proj, CELL_CLIP=float(clips[0] or 0.0), STATEFUL=starts is not None,
            BF16=self.precision == "bf16", BM=rows, BH=cell.cols, BK=depth, num_warps=cell.warps,
            num_stages=cell.stages,
        )  # fmt: skip
        self._pieces(self.tiles.projection, step, state.hidden, weights.w_hr, state.pieces, tables, False, None)
        sums = self.tiles.sums  # sums in order: any lanes per program give the same bits
        rows = lanes_per_program(sums.rows, lanes)
        self.kernels.lstm_projection_sum_kernel[(_blocks(lanes, rows) * _blocks(proj, sums.cols), 2)](
            state.pieces, state.h, out, tables.token, tables.active, tables.end, first.final_h,
            step, tables.start.shape[0], lanes, tables.start.shape[1], out.shape[1], first.h.shape[1],
            P=proj, PIECES=state.pieces.shape[1], PROJ_CLIP=float(clips[1] or 0.0), STATEFUL=starts is not None,
            BM=rows, BN=sums.cols, num_warps=sums.warps, num_stages=sums.stages,
        )  # fmt: skip

    def _pieces(
        self,
        tiles: Tiles,
        step: int,
        x: Tensor,
        weight: Tensor,
        pieces: Tensor,
        tables: StepTables,
        restarts: bool,
        starts: Optional[Starts],
    ) -> None:
        """x (2, lanes, K) @ weight (2, K, N) in pieces (``triton_kernels.step_pieces_kernel``);
        ``restarts``: the recurrent matmul, whose beginning lanes read zeros or ``starts``."""
        lanes, k, n = x.shape[1], weight.shape[1], weight.shape[2]
        rows, depth = self.program_shape(tiles, lanes)
        grid = (_blocks(lanes, rows) * _blocks(n, tiles.cols) * pieces.shape[1], 2)
        first = starts.h if starts is not None else x
        self.kernels.step_pieces_kernel[grid](
            x, weight, pieces, tables.active, tables.start, first, step, lanes, tables.start.shape[1], first.shape[1],
            K=k, N=n, CHUNK=tiles.piece, RESTARTS=restarts, STATEFUL=starts is not None,
            BF16=self.precision == "bf16", BM=rows, BN=tiles.cols, BK=depth,
            num_warps=tiles.warps, num_stages=tiles.stages,
        )  # fmt: skip


def _blocks(count: int, size: int) -> int:
    return -(-count // size)


def lanes_per_program(most: int, lanes: int) -> int:
    """The power of two that covers ``lanes``, at most ``most``."""
    return min(most, 1 << max(0, lanes - 1).bit_length())


def for_device(device: torch.device, precision: str) -> Optional[TritonOps]:
    """The Triton kernels for ``precision`` on a CUDA ``device`` where Triton imports, else None."""
    if device.type != "cuda" or precision not in TILES:
        return None
    return _ops(precision) if triton_available() else None


@functools.lru_cache(maxsize=None)
def _ops(precision: str) -> TritonOps:
    return TritonOps.of(precision)


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
