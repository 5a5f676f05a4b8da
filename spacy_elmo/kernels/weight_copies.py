"""Copies of a weight in another form (a bfloat16 copy, oneDNN's reordered blocks), made once and
kept beside the weight: dropped when the weight is garbage collected, remade when it changes in
place (its version counter moves). Made under a lock: threads that meet a weight's copy missing
at once make it once (the model's copies are made at load, when its kernels first run)."""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, Hashable, Tuple

from torch import Tensor

# id(base tensor) -> {(kind, view geometry, version): copy}
_COPIES: Dict[int, Dict[Tuple, Any]] = {}
_LOCK = threading.RLock()  # a copy's make may itself take a copy (a reordered block of a bf16 copy)


def derived_copy(tensor: Tensor, kind: Hashable, make: Callable[[Tensor], Any]) -> Any:
    """``make(tensor)``, cached per ``kind``, per view of the base tensor (shape, strides, offset,
    device) and per version of the base tensor."""
    base = tensor._base if tensor._base is not None else tensor
    view = (tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), tensor.device)
    key = (kind, view, base._version)
    copy = _COPIES.get(id(base), {}).get(key)
    if copy is not None:
        return copy
    with _LOCK:
        copies = _COPIES.get(id(base))
        if copies is None:
            copies = _COPIES[id(base)] = {}
            weakref.finalize(base, _COPIES.pop, id(base), None)
        if key not in copies:
            for stale in [k for k in copies if k[-1] != base._version]:
                del copies[stale]  # the weight changed in place since
            copies[key] = make(tensor)
        return copies[key]
