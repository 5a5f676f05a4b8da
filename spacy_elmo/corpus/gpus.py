"""The GPU an embedding process runs on, with errors that say what to do where there is none."""

from __future__ import annotations

from typing import Optional

from ..extras import install_command


def check_gpu(gpu_id: int) -> None:
    """Raise a clear error where torch sees no CUDA GPU ``gpu_id``."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpu_id >= count:
        raise _no_such_gpu(gpu_id, f"torch sees {count} CUDA GPU(s)")


def use_gpu(gpu_id: int, allocator: Optional[str] = None) -> None:
    """``spacy.require_gpu(gpu_id)`` for gpu_id >= 0 (-1: the CPU), with an error that says what to
    do where there is no such CUDA GPU; then thinc's GPU arrays from ``allocator`` ("pytorch": the
    pool torch's tensors use) where given. That comes after ``require_gpu``: before it, thinc sees the
    CPU and sets nothing."""
    if gpu_id < 0:
        return
    import spacy

    check_gpu(gpu_id)
    try:
        spacy.require_gpu(gpu_id)
    except ValueError as err:
        raise _no_such_gpu(gpu_id, str(err)) from None
    if allocator is not None:
        from thinc.api import set_gpu_allocator

        set_gpu_allocator(allocator)


def _no_such_gpu(gpu_id: int, problem: str) -> ValueError:
    return ValueError(
        f"gpu_id {gpu_id}: no such CUDA GPU ({problem}). Run on a machine with an NVIDIA GPU and CUDA "
        f"support ({install_command('cuda12x')}), or leave --gpu-id at -1 to run on the CPU."
    )
