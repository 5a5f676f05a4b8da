"""Triton kernels for inference on CUDA whose rows do not depend on how many rows a call has.

Tile shapes and the order of each sum over K are compile-time constants (``triton_ops.TILES``), the
row count only masks loads and stores, and a sum split across programs is split into fixed-length
pieces that the next kernel adds in order; no padding. fp32 products are IEEE (``tl.fma``, or
``input_precision="ieee"``, which bf16 operands ignore; no TF32); bf16 operands round to nearest
even, as ``.to(torch.bfloat16)``; sums accumulate in fp32. For Triton's interpreter
(``TRITON_INTERPRET=1``, the tests on CPU), loops over a run-time count are ``while`` loops,
``range`` bounds are constexpr, and a kernel calls other jit functions once per program, never in a
loop (the interpreter spends about a millisecond per call).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows"])
def linear_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    x_batch_stride,
    x_row_stride,
    out_batch_stride,
    out_row_stride,
    N: tl.constexpr,
    K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BF16: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """out[b] = x[b] @ w[b].T (+ bias[b]) for B matmuls (program axis 1): x (B, rows, K) and out
    (B, rows, N) with the given strides (x's batch stride 0: shared), contiguous rows; w (B, N, K)
    contiguous; bias (B, N). Programs walk GROUP_M row blocks down a column block before the next,
    so the row blocks sharing a weight tile read it from L2."""
    pid = tl.program_id(0)
    batch = tl.program_id(1)
    row_blocks = (rows + BM - 1) // BM
    col_blocks: tl.constexpr = (N + BN - 1) // BN
    group = pid // (GROUP_M * col_blocks)
    first = group * GROUP_M
    height = tl.minimum(row_blocks - first, GROUP_M)
    row_block = first + (pid % (GROUP_M * col_blocks)) % height
    col_block = (pid % (GROUP_M * col_blocks)) // height
    r = row_block * BM + tl.arange(0, BM)
    n = col_block * BN + tl.arange(0, BN)
    k = tl.arange(0, BK)
    rows64 = r.to(tl.int64)[:, None]  # offsets past 2**31 elements: 2 x 65,536 tokens x 16,384 gates
    x_rows = x_ptr + batch.to(tl.int64) * x_batch_stride + rows64 * x_row_stride
    w_cols = w_ptr + batch * N * K + n[None, :] * K
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(x_rows + (k0 + k)[None, :], mask=(r[:, None] < rows) & ((k0 + k)[None, :] < K), other=0.0)
        b = tl.load(w_cols + (k0 + k)[:, None], mask=(n[None, :] < N) & ((k0 + k)[:, None] < K), other=0.0)
        if BF16:
            a, b = a.to(tl.bfloat16, fp_downcast_rounding="rtne"), b.to(tl.bfloat16, fp_downcast_rounding="rtne")
        acc = tl.dot(a, b, acc, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(bias_ptr + batch * N + n, mask=n < N, other=0.0)[None, :]
    out = out_ptr + batch.to(tl.int64) * out_batch_stride + rows64 * out_row_stride + n[None, :]
    tl.store(out, acc, mask=(r[:, None] < rows) & (n[None, :] < N))


@triton.jit(do_not_specialize=["tokens", "positions"])
def conv_max_kernel(
    chars_ptr,
    w_ptr,
    widths_ptr,
    out_ptr,
    tokens,
    positions,
    F: tl.constexpr,
    E: tl.constexpr,
    WIDEST: tl.constexpr,
    BF16: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Every filter's best score over a token's character windows, without bias: chars (tokens,
    positions, E); w (F, WIDEST * E) position-major (position j's weights at j * E), zero past the
    filter's width; widths (F,) int32 -> out (tokens, F). Window p of width w reads characters
    p .. p + w - 1 and counts where p + w <= positions."""
    token_block = tl.program_id(0)
    filter_block = tl.program_id(1)
    t = token_block * BM + tl.arange(0, BM)
    f = filter_block * BN + tl.arange(0, BN)
    k = tl.arange(0, BK)
    K: tl.constexpr = WIDEST * E
    width = tl.load(widths_ptr + f, mask=f < F, other=1)
    token_chars = chars_ptr + t.to(tl.int64)[:, None] * (positions * E)
    filter_weights = w_ptr + f[None, :] * K
    best = tl.full((BM, BN), float("-inf"), dtype=tl.float32)
    p = 0
    while p < positions:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            inside = (k0 + k) < K
            a_mask = (t[:, None] < tokens) & inside[None, :] & ((p * E + k0 + k)[None, :] < positions * E)
            a = tl.load(token_chars + (p * E + k0 + k)[None, :], mask=a_mask, other=0.0)
            b = tl.load(filter_weights + (k0 + k)[:, None], mask=(f[None, :] < F) & inside[:, None], other=0.0)
            if BF16:
                a, b = a.to(tl.bfloat16, fp_downcast_rounding="rtne"), b.to(tl.bfloat16, fp_downcast_rounding="rtne")
            acc = tl.dot(a, b, acc, input_precision="ieee")
        best = tl.where((p + width <= positions)[None, :], tl.maximum(best, acc), best)
        p += 1
    tl.store(out_ptr + t.to(tl.int64)[:, None] * F + f[None, :], best, mask=(t[:, None] < tokens) & (f[None, :] < F))


# fmt: off
@triton.jit(do_not_specialize=["step", "steps", "lanes", "lane_stride", "gate_rows", "sentences"])
def lstm_cell_kernel(
    h_ptr, c_ptr, hidden_ptr, w_hh_ptr, gate_inputs_ptr,
    token_ptr, start_ptr, active_ptr, start_h_ptr, start_c_ptr, end_ptr, final_c_ptr,
    step, steps, lanes, lane_stride, gate_rows, sentences, pieces_ptr,
    PIECES: tl.constexpr, H: tl.constexpr, P: tl.constexpr, CELL_CLIP: tl.constexpr, STATEFUL: tl.constexpr,
    BF16: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr,
):
    # fmt: on
    """One step of both directions' cells (program axis 1: direction) on the lanes at work.
    h (2, lanes, P), c and hidden (2, lanes, H); w_hh (2, P, 4H) transposed, gates i, f, g, o;
    gate_inputs (2, gate_rows, 4H): each token's x @ w_ih.T + bias; token (2, steps, lane_stride)
    int32: the token each lane reads at each step; start (steps, lane_stride) int32: 1 + the
    sentence that begins there, 0 where a lane goes on; active (steps,) int32: the lanes at work (a
    prefix). A beginning lane starts from zeros, or stateful from start_h/start_c (2, sentences,
    P/H); stateful, end (steps, lane_stride) marks 1 + the sentence whose last token is there, whose
    c goes to final_c (2, sentences, H). Updates c, writes hidden = o * tanh(c). Recurrent sums:
    PIECES > 0 adds ``step_pieces_kernel``'s pieces (2, PIECES, lanes, 4H) in order; PIECES = 0
    sums here with bf16 ``tl.dot`` (BM fixed)."""
    direction = tl.program_id(1)
    row_block, cell_block = _lane_blocks(lanes, BM)
    active = tl.load(active_ptr + step)
    if row_block * BM < active:
        r = row_block * BM + tl.arange(0, BM)
        at_work = r < active
        cells = cell_block * BH + tl.arange(0, BH)
        mask = at_work[:, None] & (cells < H)[None, :]
        begins = tl.load(start_ptr + step * lane_stride + r, mask=at_work, other=0)
        if PIECES > 0:
            piece = pieces_ptr + (direction * PIECES * lanes + r[:, None]) * (4 * H) + cells[None, :]
            i, f, g, o = _gates_from_pieces(piece, mask, lanes * 4 * H, H, PIECES)
        else:
            h_rows = h_ptr + direction * lanes * P + r * P
            first_h = start_h_ptr + direction.to(tl.int64) * sentences * P + (begins - 1).to(tl.int64) * P
            w = w_hh_ptr + direction * P * 4 * H + cells
            i, f, g, o = _gates_by_dot(h_rows, first_h, w, at_work, begins, cells < H, H, P, STATEFUL, BM, BH, BK)
        token = tl.load(token_ptr + (direction * steps + step) * lane_stride + r, mask=at_work, other=0)
        token_row = direction.to(tl.int64) * gate_rows + token.to(tl.int64)
        inputs = gate_inputs_ptr + token_row[:, None] * (4 * H) + cells[None, :]
        at = direction * lanes * H + r[:, None] * H + cells[None, :]
        first_c = start_c_ptr + direction.to(tl.int64) * sentences * H + (begins - 1).to(tl.int64)[:, None] * H
        hidden_at, first_c = hidden_ptr + at, first_c + cells[None, :]
        c = _update_cells(i, f, g, o, inputs, c_ptr + at, hidden_at, first_c, mask, begins, H, CELL_CLIP, STATEFUL)
        if STATEFUL:
            ends = tl.load(end_ptr + step * lane_stride + r, mask=at_work, other=0)
            final = final_c_ptr + direction.to(tl.int64) * sentences * H + (ends - 1).to(tl.int64)[:, None] * H
            tl.store(final + cells[None, :], c, mask=mask & (ends > 0)[:, None])


@triton.jit
def _lane_blocks(lanes, BM: tl.constexpr):
    """This program's block of BM lanes and of columns, lanes fastest: neighbours read the same columns."""
    pid = tl.program_id(0)
    return pid % ((lanes + BM - 1) // BM), pid // ((lanes + BM - 1) // BM)


@triton.jit
def _gates_from_pieces(piece, mask, stride, H: tl.constexpr, PIECES: tl.constexpr):
    """The four gates' recurrent sums, their PIECES pieces (``stride`` apart) added in order."""
    i = tl.load(piece, mask=mask, other=0.0)
    f = tl.load(piece + H, mask=mask, other=0.0)
    g = tl.load(piece + 2 * H, mask=mask, other=0.0)
    o = tl.load(piece + 3 * H, mask=mask, other=0.0)
    for index in range(1, PIECES):
        at = piece + index * stride
        i += tl.load(at, mask=mask, other=0.0)
        f += tl.load(at + H, mask=mask, other=0.0)
        g += tl.load(at + 2 * H, mask=mask, other=0.0)
        o += tl.load(at + 3 * H, mask=mask, other=0.0)
    return i, f, g, o


# fmt: off
@triton.jit
def _gates_by_dot(h_rows, first_h, w, at_work, begins, in_layer, H: tl.constexpr, P: tl.constexpr,
                  STATEFUL: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr):
    # fmt: on
    """The four gates' recurrent sums in bf16 on tensor cores: h (the lanes' rows; beginning lanes
    zeros, or stateful their start) @ w (the gates' columns of the transposed weights)."""
    i = tl.zeros((BM, BH), dtype=tl.float32)
    f = tl.zeros((BM, BH), dtype=tl.float32)
    g = tl.zeros((BM, BH), dtype=tl.float32)
    o = tl.zeros((BM, BH), dtype=tl.float32)
    k = tl.arange(0, BK)
    for k0 in range(0, P, BK):
        inside = (k0 + k) < P
        reads = (at_work & (begins == 0))[:, None] & inside[None, :]
        a = tl.load(h_rows[:, None] + (k0 + k)[None, :], mask=reads, other=0.0)
        if STATEFUL:
            starting = (at_work & (begins > 0))[:, None]
            a += tl.load(first_h[:, None] + (k0 + k)[None, :], mask=starting & inside[None, :], other=0.0)
        a = a.to(tl.bfloat16, fp_downcast_rounding="rtne")
        w_k = w[None, :] + (k0 + k)[:, None] * (4 * H)
        w_mask = in_layer[None, :] & inside[:, None]
        i = tl.dot(a, tl.load(w_k, mask=w_mask, other=0.0).to(tl.bfloat16), i)
        f = tl.dot(a, tl.load(w_k + H, mask=w_mask, other=0.0).to(tl.bfloat16), f)
        g = tl.dot(a, tl.load(w_k + 2 * H, mask=w_mask, other=0.0).to(tl.bfloat16), g)
        o = tl.dot(a, tl.load(w_k + 3 * H, mask=w_mask, other=0.0).to(tl.bfloat16), o)
    return i, f, g, o


# fmt: off
@triton.jit
def _update_cells(i, f, g, o, inputs, c_at, hidden_at, first_c, mask, begins, H: tl.constexpr,
                  CELL_CLIP: tl.constexpr, STATEFUL: tl.constexpr):
    # fmt: on
    """The gates from the recurrent sums and the token's inputs, the cells c (a beginning lane's
    from zeros or, stateful, its start) updated and clipped, hidden = o * tanh(c); returns c.
    sigmoid(x) = 1 / (1 + exp(-x)); tanh(x) = 2 sigmoid(2x) - 1, as the CPU's cell update."""
    i = 1.0 / (1.0 + tl.exp(-(i + tl.load(inputs, mask=mask, other=0.0))))
    f = 1.0 / (1.0 + tl.exp(-(f + tl.load(inputs + H, mask=mask, other=0.0))))
    g = 2.0 / (1.0 + tl.exp(-2.0 * (g + tl.load(inputs + 2 * H, mask=mask, other=0.0)))) - 1.0
    o = 1.0 / (1.0 + tl.exp(-(o + tl.load(inputs + 3 * H, mask=mask, other=0.0))))
    c = tl.load(c_at, mask=mask & (begins == 0)[:, None], other=0.0)
    if STATEFUL:
        c += tl.load(first_c, mask=mask & (begins > 0)[:, None], other=0.0)
    c = f * c + i * g
    if CELL_CLIP > 0:
        c = tl.minimum(tl.maximum(c, -CELL_CLIP), CELL_CLIP)
    tl.store(c_at, c, mask=mask)
    tl.store(hidden_at, o * (2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0), mask=mask)
    return c


# fmt: off
@triton.jit(do_not_specialize=["step", "lanes", "lane_stride", "sentences"])
def step_pieces_kernel(
    x_ptr, w_ptr, pieces_ptr, active_ptr, start_ptr, start_x_ptr,
    step, lanes, lane_stride, sentences,
    K: tl.constexpr, N: tl.constexpr, CHUNK: tl.constexpr, RESTARTS: tl.constexpr, STATEFUL: tl.constexpr,
    BF16: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    # fmt: on
    """A step's matmul in pieces, both directions (program axis 1): x (2, lanes, K) @ w (2, K, N),
    each CHUNK-long piece of the sum over K on its own -> pieces (2, K / CHUNK, lanes, N), added in
    order by ``lstm_cell_kernel`` or ``lstm_projection_sum_kernel``. Fixed-length pieces give one
    sentence as many programs as a batch, and the same sums. Within a piece: an fp32 fused
    multiply-add chain (any BM) or bf16 ``tl.dot`` (BM fixed). RESTARTS (the recurrent matmul): a
    lane whose sentence begins at this step reads zeros, or stateful its row of start_x (2, sentences, K)."""
    pid = tl.program_id(0)
    direction = tl.program_id(1)
    row_blocks = (lanes + BM - 1) // BM
    col_blocks: tl.constexpr = (N + BN - 1) // BN
    row_block = pid % row_blocks
    col_block = (pid // row_blocks) % col_blocks
    chunk = pid // (row_blocks * col_blocks)
    active = tl.load(active_ptr + step)
    if row_block * BM < active:
        r = row_block * BM + tl.arange(0, BM)
        at_work = r < active
        n = col_block * BN + tl.arange(0, BN)
        begins = tl.zeros((BM,), dtype=tl.int32)
        if RESTARTS:
            begins = tl.load(start_ptr + step * lane_stride + r, mask=at_work, other=0)
        first = chunk * CHUNK
        rows = x_ptr + direction * lanes * K + r * K + first
        first_x = start_x_ptr + direction.to(tl.int64) * sentences * K + (begins - 1).to(tl.int64) * K + first
        w = w_ptr + direction * K * N + first * N + n
        acc = _piece_sum(rows, first_x, w, at_work, begins, n < N, first, K, N, CHUNK, STATEFUL, BF16, BM, BN, BK)
        pieces: tl.constexpr = (K + CHUNK - 1) // CHUNK
        at = pieces_ptr + ((direction * pieces + chunk) * lanes + r[:, None]) * N + n[None, :]
        tl.store(at, acc, mask=at_work[:, None] & (n < N)[None, :])


# fmt: off
@triton.jit
def _piece_sum(rows, first_x, w, at_work, begins, in_layer, first, K: tl.constexpr, N: tl.constexpr,
               CHUNK: tl.constexpr, STATEFUL: tl.constexpr, BF16: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr):
    # fmt: on
    """One piece of the sum over K: rows (lanes beginning a sentence read zeros, or stateful their
    first_x) @ w, k from ``first``; an fp32 multiply-add chain in order, or bf16 ``tl.dot``."""
    reads = at_work & (begins == 0)
    starting = at_work & (begins > 0)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if BF16:
        k = tl.arange(0, BK)
        for k0 in range(0, CHUNK, BK):
            inside = ((k0 + k) < CHUNK) & ((first + k0 + k) < K)
            a = tl.load(rows[:, None] + (k0 + k)[None, :], mask=reads[:, None] & inside[None, :], other=0.0)
            if STATEFUL:
                at = first_x[:, None] + (k0 + k)[None, :]
                a += tl.load(at, mask=starting[:, None] & inside[None, :], other=0.0)
            b = tl.load(w[None, :] + (k0 + k)[:, None] * N, mask=in_layer[None, :] & inside[:, None], other=0.0)
            acc = tl.dot(a.to(tl.bfloat16, fp_downcast_rounding="rtne"), b.to(tl.bfloat16), acc)
    else:
        for k0 in range(0, CHUNK, BK):
            for kk in tl.static_range(BK):
                inside = (k0 + kk < CHUNK) & (first + k0 + kk < K)
                a = tl.load(rows + k0 + kk, mask=reads & inside, other=0.0)
                if STATEFUL:
                    a += tl.load(first_x + k0 + kk, mask=starting & inside, other=0.0)
                b = tl.load(w + (k0 + kk) * N, mask=in_layer & inside, other=0.0)
                acc = tl.fma(a[:, None], b[None, :], acc)
    return acc


@triton.jit(do_not_specialize=["step", "steps", "lanes", "lane_stride", "out_rows", "sentences"])
def lstm_projection_sum_kernel(
    partial_ptr,
    h_ptr,
    out_ptr,
    token_ptr,
    active_ptr,
    end_ptr,
    final_h_ptr,
    step,
    steps,
    lanes,
    lane_stride,
    out_rows,
    sentences,
    P: tl.constexpr,
    PIECES: tl.constexpr,
    PROJ_CLIP: tl.constexpr,
    STATEFUL: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    """The projection's pieces added in order, clipped -> h (2, lanes, P) and out (2, out_rows, P) at
    each lane's token (see ``lstm_cell_kernel``); stateful, final_h (2, sentences, P) at a last token."""
    direction = tl.program_id(1)
    row_block, col_block = _lane_blocks(lanes, BM)
    active = tl.load(active_ptr + step)
    if row_block * BM < active:
        r = row_block * BM + tl.arange(0, BM)
        at_work = r < active
        n = col_block * BN + tl.arange(0, BN)
        mask = at_work[:, None] & (n < P)[None, :]
        pieces = partial_ptr + (direction * PIECES * lanes + r[:, None]) * P + n[None, :]
        acc = tl.load(pieces, mask=mask, other=0.0)
        for piece in range(1, PIECES):
            acc += tl.load(pieces + piece * lanes * P, mask=mask, other=0.0)
        if PROJ_CLIP > 0:
            acc = tl.minimum(tl.maximum(acc, -PROJ_CLIP), PROJ_CLIP)
        tl.store(h_ptr + direction * lanes * P + r[:, None] * P + n[None, :], acc, mask=mask)
        token = tl.load(token_ptr + (direction * steps + step) * lane_stride + r, mask=at_work, other=0)
        token_row = direction.to(tl.int64) * out_rows + token.to(tl.int64)
        tl.store(out_ptr + token_row[:, None] * P + n[None, :], acc, mask=mask)
        if STATEFUL:
            ends = tl.load(end_ptr + step * lane_stride + r, mask=at_work, other=0)
            final = final_h_ptr + direction.to(tl.int64) * sentences * P + (ends - 1).to(tl.int64)[:, None] * P
            tl.store(final + n[None, :], acc, mask=mask & (ends > 0)[:, None])
