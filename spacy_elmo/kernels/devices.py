"""What differs between a CPU and a CUDA device for the code around the kernels: host-to-GPU copies
that do not wait for the GPU (``upload``), and the calling thread's current CUDA device
(``made_current``).

A copy from pageable host memory to a CUDA device waits until the GPU has finished the work queued
before it: each of a call's uploads (char ids, token-cache indices, step tables) would hold the host
until the previous batch's kernels were done, and the host could not prepare the next batch while
the GPU runs this one. From page-locked (pinned) memory the copy is queued on the stream like a
kernel and the host goes on. torch's pinned-memory allocator keeps the block until the copy has run.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Sequence

import torch
from torch import Tensor


def upload(host: Tensor, device: torch.device, dtype: Optional[torch.dtype] = None) -> Tensor:
    """``host`` (a CPU tensor) on ``device``, as ``dtype`` where given (converted there: fewer bytes
    cross); to a CUDA GPU through pinned memory, queued on the current stream without waiting."""
    if device.type != "cuda":
        return host.to(device, dtype or host.dtype)
    on_device = host.pin_memory().to(device, non_blocking=True)
    return on_device if dtype is None else on_device.to(dtype)


def index_tensor(positions: Sequence[int], device: torch.device) -> Tensor:
    """Row positions as a long tensor on ``device``, uploaded without waiting."""
    return upload(torch.tensor(list(positions), dtype=torch.long), device)


@contextlib.contextmanager
def made_current(device: torch.device) -> Iterator[None]:
    """Within the block, ``device`` is the calling thread's current CUDA device, torch's and cupy's
    (each thread has its own); a no-op for a CPU."""
    if device.type != "cuda":
        yield
        return
    import cupy

    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index), cupy.cuda.Device(index):
        yield
