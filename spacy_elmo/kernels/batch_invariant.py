"""Fixed-shape kernels: a row's result never depends on the rows computed beside it.

BLAS picks its GEMM kernel (and so the order of the sums) from the shapes and splits long sums
(K = 2048 here) across threads; ATen's elementwise loops send a tensor's tail through scalar code
whose ``exp`` rounds differently from the SIMD lanes. So GEMMs run on zero-padded blocks of a fixed
shape with sums in fixed K blocks, and transcendental functions on fixed slices one thread takes
whole. Plain IEEE operations (add, mul, max, clamp), which round alike on every path, and int8's
exact sums (``quantized``) need no care.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

import torch
from torch import Tensor

from .machine import holds_at_thread_counts, probed_thread_counts, remembered, smallest_agreeing
from .onednn import K_BLOCK
from .precision import operand

# ATen runs an elementwise loop on one thread below this many elements (at::internal::GRAIN_SIZE);
# a multiple of every SIMD width, so slices of this size have no scalar tail.
_SINGLE_THREAD_ELEMENTS = 32768


@dataclass
class Blocking:
    """The fixed sizes of batch-invariant inference; which apply is the ``Backend``'s (``select``).

    gemm_rows: rows per block of position-wise matmuls (char CNN windows, LSTM input projection).
    token_block: tokens per char-encoder block on fixed shapes (each block padded whole).
    token_block_any_rows: the same where any row count gives the same rows (int8, fp32 through
        oneDNN): only the last block is padded, to 32 tokens, so a large block (faster per token on
        the original model's highways) costs a small call nothing.
    step_columns: sentences per recurrent matmul where its row count must stay fixed (bf16, GPUs,
        CPUs where oneDNN's probe fails).
    step_lanes: in fp32 through oneDNN, any count of sentences per recurrent matmul up to this.
    fused_rows, fused_steps: sentences and time steps per block of the fused LSTM kernel."""

    gemm_rows: int = 256
    token_block: int = 64
    token_block_any_rows: int = 256
    step_columns: int = 32
    step_lanes: int = 128
    fused_rows: int = 32
    fused_steps: int = 8

    def __post_init__(self) -> None:
        names = ("gemm_rows", "token_block", "token_block_any_rows", "step_columns", "step_lanes")
        for name in (*names, "fused_rows", "fused_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Blocking.{name} must be a positive integer, got {value!r}.")
        if self.token_block % 32 or self.token_block_any_rows % 32 or self.step_columns % 16:
            raise ValueError(
                "Blocking.token_block and token_block_any_rows must be multiples of 32 and step_columns a "
                f"multiple of 16 (whole SIMD vectors), got {self.token_block}, {self.token_block_any_rows} "
                f"and {self.step_columns}."
            )

    @classmethod
    def for_device(cls, device: torch.device) -> "Blocking":
        if device.type == "cuda":  # int8 and the fused cuDNN path; the Triton kernels take any size
            return cls(
                gemm_rows=8192,
                token_block=4096,
                token_block_any_rows=4096,
                step_columns=256,
                fused_rows=256,
                fused_steps=64,
            )
        return cls()


def matmul_rows(x: Tensor, weight_t: Tensor, rows: int, precision: str = "fp32") -> Tensor:
    """``x @ weight_t`` on zero-padded blocks of exactly ``rows`` rows, in ``precision``: x (M, K),
    weight_t (K, N) any strides -> (M, N), each row bitwise independent of M."""
    n_rows, n_blocks = x.shape[0], -(-x.shape[0] // rows)
    call_rows = clean_rows(rows, weight_t, precision)  # each block: its rows, then zeros up to call_rows
    if n_blocks * rows != n_rows:
        x = torch.cat([x, x.new_zeros(n_blocks * rows - n_rows, x.shape[1])])
    x = x.reshape(n_blocks, rows, x.shape[1])
    if call_rows != rows:
        x = torch.cat([x, x.new_zeros(n_blocks, call_rows - rows, x.shape[2])], dim=1)
    out = x.new_empty(n_blocks, call_rows, weight_t.shape[1])
    for block in range(n_blocks):
        matmul_k_blocks(x[block], weight_t, precision, out[block])
    return out[:, :rows].reshape(n_blocks * rows, weight_t.shape[1])[:n_rows]


def clean_rows(rows: int, weight_t: Tensor, precision: str = "fp32") -> int:
    """The row count a fixed-shape ``matmul_k_blocks`` call with ``weight_t`` (K, N) takes to hold
    ``rows`` rows, each with the bits it would get as the first row: ``rows`` off CPU; on CPU the
    smallest from ``rows`` up that a probe finds so at each of ``probed_thread_counts`` (once per
    shape, layout and precision); RuntimeError past ``rows`` + ``max(8, rows // 4)``. A fixed shape
    alone is not enough: MKL's AVX2 sgemm (seen on a Xeon capped at AVX2) sums the last two rows of
    some row counts in another order (rows 30-31 of 32, 126-127 and 254-255 of 256 on two threads)."""
    if weight_t.device.type != "cpu":
        return rows
    threads = probed_thread_counts()
    key = ("clean rows", rows, tuple(weight_t.shape), weight_t.stride(), precision, threads)
    return remembered(key, lambda: _probe_clean_rows(rows, weight_t, precision, threads))


def _probe_clean_rows(rows: int, weight_t: Tensor, precision: str, thread_counts: Tuple[int, ...]) -> int:
    generator = torch.Generator().manual_seed(0)
    probe = torch.empty_strided(weight_t.shape, weight_t.stride())  # the weight's layout, random values
    probe.copy_(torch.randn(weight_t.shape, generator=generator))
    samples = torch.randn(2, weight_t.shape[0], generator=generator)

    def positions_agree(count: int) -> bool:
        """Each sample row, repeated ``count`` times, gives the first row's bits at every position."""

        def check() -> bool:
            for sample in samples:
                out = matmul_k_blocks(
                    sample.expand(count, -1).contiguous(), probe, precision, probe.new_empty(count, probe.shape[1])
                )
                if not torch.equal(out, out[:1].expand_as(out)):
                    return False
            return True

        return holds_at_thread_counts(check, thread_counts)

    return smallest_agreeing(
        rows,
        positions_agree,
        f"No fixed-shape matmul of {{}} rows with a {tuple(weight_t.shape)} weight in {precision} gives every row "
        "position the same bits on this machine: its results would depend on the batch. Run a torch built with "
        "oneDNN (whose row-count probe passes on AVX2 and AVX-512 CPUs), or another precision.",
    )


def matmul_k_blocks(a: Tensor, b: Tensor, precision: str, out: Tensor) -> Tensor:
    """out = a @ b, a (M, K), b (K, N), with the sum over K in blocks of K_BLOCK added in order,
    so that no BLAS call splits a sum across threads. Products accumulate in fp32."""
    a, b = operand(a, precision), operand(b, precision)
    for start in range(0, a.shape[1], K_BLOCK):
        block = (a[:, start : start + K_BLOCK], b[start : start + K_BLOCK])
        if start == 0 and a.dtype == out.dtype:
            torch.mm(*block, out=out)
        elif start == 0:
            out.copy_(torch.mm(*block))
        else:
            out += torch.mm(*block)
    return out


def elementwise_(op_: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """Apply an in-place elementwise op (e.g. ``Tensor.sigmoid_``) to a contiguous tensor so that
    every element takes the same code path: on CPU in slices of ``_SINGLE_THREAD_ELEMENTS``. Only the
    tensor's end can have a scalar tail, so callers lay data out for it to cover all items alike:
    ``(features, columns)``, columns a multiple of 16, or ``(items, features)``, items a multiple of 32."""
    if x.device.type != "cpu" or x.numel() <= _SINGLE_THREAD_ELEMENTS:  # on CPU one slice: x itself
        return op_(x)
    flat = x.view(-1)
    # ATen splits threads x _SINGLE_THREAD_ELEMENTS into one such slice per thread (at::parallel_for:
    # chunks of ceil(n / threads)): parallel, each element on its one-thread code path.
    parallel = _SINGLE_THREAD_ELEMENTS * torch.get_num_threads()
    whole = flat.numel() - flat.numel() % parallel
    for start in range(0, whole, parallel):
        op_(flat[start : start + parallel])
    for start in range(whole, flat.numel(), _SINGLE_THREAD_ELEMENTS):
        op_(flat[start : start + _SINGLE_THREAD_ELEMENTS])
    return x
