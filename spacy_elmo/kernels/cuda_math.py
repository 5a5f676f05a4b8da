"""IEEE fp32 on CUDA for inference, whatever the process's TF32 settings.

cuDNN's LSTM and convolutions use TF32 tensor cores by default (``torch.backends.cudnn.allow_tf32``
is True), and a process may switch cuBLAS matmuls to TF32 too
(``torch.set_float32_matmul_precision("high")``). TF32 keeps 10 bits of mantissa: measured on an
H100, the fused (cuDNN) LSTM then differed from the exact step loop by 1.3e-4 on a small random
model. ``fp32`` promises exact results, so inference on a GPU runs with both switched off and the
process's settings put back afterwards; the reduced precisions (bf16, int8) do not read them.
Calls from several threads share one switch: the first in turns TF32 off, the last out restores it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

import torch

_LOCK = threading.Lock()
_users = 0
_saved: Optional[Tuple[bool, bool]] = None


@contextmanager
def ieee_fp32(device: torch.device) -> Iterator[None]:
    """Within the block, CUDA matmuls and cuDNN kernels on ``device`` compute in IEEE fp32 (no
    TF32); a no-op off CUDA."""
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
