"""A bounded LRU cache of context-independent token representations, keyed by token string.

The char encoder is batch-invariant, so a cached row is bitwise the row it would recompute; the cache
empties when the encoder's parameters change (version counter, storage, dtype or device)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..kernels.devices import index_tensor


class TokenCache:
    """Up to ``capacity`` token representations, at most ``max_bytes``; ``capacity=0`` keeps none between
    calls. A call encodes each distinct token once (boundaries and function words repeat in every batch)."""

    def __init__(self, capacity: int = 20000, max_bytes: int | None = None) -> None:
        self._lock = threading.RLock()  # one lookup at a time: several threads may share a biLM
        self._slots: "OrderedDict[str, int]" = OrderedDict()
        self._rows: Tensor | None = None
        self._fingerprint: Tuple = ()
        self._max_bytes: int | None = None
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"TokenCache capacity must be an integer >= 0, got {value!r}.")
        with self._lock:
            self._capacity = value
            if len(self._slots) > value or (self._rows is not None and self._rows.shape[0] > value):
                self.clear()

    @property
    def max_bytes(self) -> int | None:
        """The most bytes its rows may take (None: ``capacity`` alone bounds it)."""
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"TokenCache max_bytes must be an integer >= 0 or None, got {value!r}.")
        with self._lock:
            self._max_bytes = value
            if self._rows is not None and self._rows.shape[0] > self._row_limit(self._rows):
                self.clear()

    @property
    def nbytes(self) -> int:
        """The bytes its rows take now (rows are allocated as the cache fills)."""
        rows = self._rows
        return 0 if rows is None else rows.numel() * rows.element_size()

    def _row_limit(self, like: Tensor) -> int:
        """How many rows like ``like``'s may be kept: ``capacity``, fewer where ``max_bytes`` says so."""
        if self._max_bytes is None:
            return self._capacity
        return min(self._capacity, self._max_bytes // max(1, like.shape[1] * like.element_size()))

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()
            self._rows = None

    def lookup(self, tokens: Sequence[str], encoder: nn.Module, encode: Callable[[List[str]], Tensor]) -> Tensor:
        """(len(tokens), P); unknown tokens go through ``encode(list_of_strings) -> (n, P)`` once, then are kept."""
        unique = list(dict.fromkeys(tokens))
        if self.capacity == 0 or not unique:
            return encode_distinct(tokens, encode)
        with self._lock:  # what is known, read out under the lock ...
            fingerprint = self._check_fingerprint(encoder)
            known = [token for token in unique if token in self._slots]
            missing = [token for token in unique if token not in self._slots]
            self.hits, self.misses = self.hits + len(known), self.misses + len(missing)
            known_rows = self._rows_of(known)
        fresh = encode(missing) if missing else None  # ... the rest encoded outside it: threads side by side
        if fresh is not None and len(unique) <= self._row_limit(fresh):
            with self._lock:
                if fingerprint == self._fingerprint:  # not weights changed meanwhile
                    stored = [i for i, token in enumerate(missing) if token not in self._slots]
                    if stored:
                        self._store([missing[i] for i in stored], fresh[stored], keep=set(unique))
        parts = [rows for rows in (known_rows, fresh) if rows is not None]
        table = parts[0] if len(parts) == 1 else torch.cat(parts)
        position = {token: i for i, token in enumerate(known + missing)}
        return table[index_tensor([position[t] for t in tokens], table.device)]

    def _rows_of(self, known: List[str]) -> Tensor | None:
        """The rows of tokens in the cache (a copy), marked most recently used; None for none."""
        if not known:
            return None
        assert self._rows is not None  # a token in _slots has its row in _rows
        for token in known:
            self._slots.move_to_end(token)
        return self._rows[index_tensor([self._slots[t] for t in known], self._rows.device)]

    def _store(self, tokens: List[str], rows: Tensor, keep: set) -> None:
        self._reserve(rows)
        assert self._rows is not None  # _reserve allocates it
        free = self._free_slots(len(tokens), keep)
        self._rows[index_tensor(free, rows.device)] = rows
        for token, slot in zip(tokens, free, strict=True):
            self._slots[token] = slot

    def _reserve(self, like: Tensor) -> None:
        limit = self._row_limit(like)
        if self._rows is None:
            self._rows = like.new_empty(min(limit, max(1024, like.shape[0])), like.shape[1])
        needed = min(limit, len(self._slots) + like.shape[0])
        if needed > self._rows.shape[0]:
            size = min(limit, max(needed, 2 * self._rows.shape[0]))
            grown = self._rows.new_empty(size, self._rows.shape[1])
            grown[: self._rows.shape[0]] = self._rows
            self._rows = grown

    def _free_slots(self, count: int, keep: set) -> List[int]:
        assert self._rows is not None  # called by _store, after _reserve
        used = len(self._slots)
        free = list(range(used, min(used + count, self._rows.shape[0])))
        while len(free) < count:  # evict the least recently used tokens not in this batch
            token = next(t for t in self._slots if t not in keep)
            free.append(self._slots.pop(token))
        return free

    def _check_fingerprint(self, encoder: nn.Module) -> Tuple:
        """The encoder's weights as they are now; the cache emptied where they changed."""
        fingerprint = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in encoder.parameters())
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint
        return fingerprint

    def __getstate__(self) -> Dict[str, Any]:
        """Its settings, not its lock or its rows: a copy (pickled into another process) starts empty."""
        return {"capacity": self._capacity, "max_bytes": self._max_bytes}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["capacity"], state.get("max_bytes"))  # type: ignore[misc]


def encode_distinct(tokens: Sequence[str], encode: Callable[[List[str]], Tensor]) -> Tensor:
    """``encode(tokens)`` (len(tokens), P), each distinct token encoded once (the encoder is batch-invariant)."""
    unique = list(dict.fromkeys(tokens))
    if len(unique) == len(tokens):
        return encode(list(tokens))
    rows = encode(unique)
    position = {token: i for i, token in enumerate(unique)}
    return rows[index_tensor([position[token] for token in tokens], rows.device)]
