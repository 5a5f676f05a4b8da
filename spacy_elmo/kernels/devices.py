"""CPU/CUDA differences around the kernels: host-to-GPU copies that do not wait (``upload``), the
thread's current CUDA device (``made_current``), and IEEE fp32 whatever the TF32 settings (``ieee_fp32``).

A copy from pageable memory waits for the GPU's queued work, so the host could not prepare the next
batch meanwhile; from pinned memory it is queued like a kernel (torch keeps the block until it has run).

cuDNN uses TF32 (10 mantissa bits) by default, cuBLAS under ``set_float32_matmul_precision("high")``: on
an H100 the fused LSTM then drifted from the exact step loop by more than docs/promises.md's
``fused-step`` allows (a small random model). ``fp32`` promises exact results, so GPU inference
switches both off; the first thread in switches, the last out
restores. bf16 and int8 do not read them.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional, Sequence, Tuple

import torch
from torch import Tensor


def upload(host: Tensor, device: torch.device, dtype: Optional[torch.dtype] = None) -> Tensor:
    """CPU tensor ``host`` on ``device`` (as ``dtype``, converted there: fewer bytes cross), queued on the stream."""
    if device.type != "cuda":
        return host.to(device, dtype or host.dtype)
    on_device = host.pin_memory().to(device, non_blocking=True)
    return on_device if dtype is None else on_device.to(dtype)


def index_tensor(positions: Sequence[int], device: torch.device) -> Tensor:
    """Row positions as a long tensor on ``device``, uploaded without waiting."""
    return upload(torch.tensor(list(positions), dtype=torch.long), device)


@contextlib.contextmanager
def made_current(device: torch.device) -> Iterator[None]:
    """Within the block, ``device`` is this thread's current CUDA device, torch's and cupy's; a no-op for a CPU."""
    if device.type != "cuda":
        yield
        return
    import cupy

    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index), cupy.cuda.Device(index):
        yield


_LOCK = threading.Lock()
_users = 0
_saved: Optional[Tuple[bool, bool]] = None


@contextlib.contextmanager
def ieee_fp32(device: torch.device) -> Iterator[None]:
    """Within the block, CUDA matmuls and cuDNN kernels on ``device`` compute IEEE fp32; a no-op off CUDA."""
    if device.type != "cuda":
        yield
        return
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _users, _saved
    with _LOCK:
        if _users == 0:
            _saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        _users += 1


def _leave() -> None:
    global _users, _saved
    with _LOCK:
        _users -= 1
        if _users == 0 and _saved is not None:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = _saved
            _saved = None
