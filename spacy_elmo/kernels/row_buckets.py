"""Row counts rounded up to a few sizes, so that oneDNN compiles a bounded number of kernels.

oneDNN compiles (JIT) a kernel for each matmul shape it meets and keeps it in its primitive cache,
up to 1,024 shapes by default. Where any row count gives the same rows (``onednn``, int8), a call
run at the rows it had would bring a new shape with every new sentence count in the step loop and
every new token count in a call's last block, and a service's memory would grow with the lengths of
the docs it met (BENCHMARKS.md: the memory of a long run). Rounded up to these sizes, zero rows after
the real ones, the shapes are few and the memory levels off.

The sizes: every count up to 8, then four per power of two (10, 12, 14, 16, 20, 24, 28, 32, 40,
...): a call pays for at most 25% more rows, and up to 256 rows there are 28 sizes. The zero rows
change no other row's bits: the kernels that take padded calls are those whose rows are probed
independent of the row count.
"""

from __future__ import annotations

from torch import Tensor

# Counts up to here run as they are; above, four sizes per power of two.
_EXACT_UP_TO = 8


def bucket_rows(rows: int) -> int:
    """The size a call of ``rows`` rows runs at: ``rows`` up to 8, else ``rows`` rounded up to a
    multiple of a quarter of the power of two below it (9 -> 10, 17 -> 20, 129 -> 160)."""
    if rows <= _EXACT_UP_TO:
        return rows
    step = 1 << (rows.bit_length() - 3)  # a quarter of the power of two at or below rows
    return -(-rows // step) * step


def padded_to_bucket(x: Tensor, least: int = 1) -> Tensor:
    """x (M, K) with zero rows appended up to ``bucket_rows(max(M, least))`` rows."""
    rows = bucket_rows(max(x.shape[0], least))
    if rows == x.shape[0]:
        return x
    padded = x.new_zeros(rows, x.shape[1])
    padded[: x.shape[0]] = x
    return padded
