"""The layers of recently seen sentences, kept by the ``elmo`` component (``sentence_cache_tokens``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    from ..network.runner import BiLMRunner


class SentenceCache:
    """The layers of recently seen sentences, up to ``capacity`` tokens (0: off) and ``max_bytes``
    of arrays (None: no bound in bytes), least recently used first out. Exact, since a sentence's
    layers do not depend on its batch; emptied when the component gets another biLM or runs it in
    another precision. Saves the frozen biLM from recomputing a training corpus every epoch."""

    def __init__(self, capacity: int, max_bytes: Optional[int] = None) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # several threads may share the component
        self._entries: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
        self._tokens = 0
        self.nbytes = 0
        self._owner: Optional[Tuple[int, str, str]] = None

    def __getstate__(self) -> dict:
        """Its bounds, not its lock or its entries: a copy (pickled into another process) starts empty."""
        return {"capacity": self.capacity, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["capacity"], state.get("max_bytes"))  # type: ignore[misc]

    def for_model(self, runner: BiLMRunner, dtype: type = np.float32) -> "SentenceCache":
        """This cache, emptied first unless its layers came from ``runner`` in its precision,
        handed out as ``dtype`` (on a GPU, float16 layers arrive already rounded: a float32 call must
        not be handed those)."""
        owner = (id(runner), runner.precision, np.dtype(dtype).name)
        with self._lock:
            if owner != self._owner:
                self._entries.clear()
                self._tokens, self.nbytes, self._owner = 0, 0, owner
        return self

    def get(self, sentence: tuple) -> Optional[np.ndarray]:
        with self._lock:
            layers = self._entries.get(sentence)
            if layers is not None:
                self._entries.move_to_end(sentence)
            return layers

    def put(self, sentence: tuple, layers: np.ndarray) -> None:
        if not self.capacity or len(sentence) > self.capacity:
            return
        if self.max_bytes is not None and layers.nbytes > self.max_bytes:
            return
        copy = np.array(layers, copy=True)
        with self._lock:
            if sentence in self._entries:
                return
            self._entries[sentence] = copy
            self._tokens += len(sentence)
            self.nbytes += copy.nbytes
            while self._tokens > self.capacity or (self.max_bytes is not None and self.nbytes > self.max_bytes):
                old, dropped = self._entries.popitem(last=False)
                self._tokens -= len(old)
                self.nbytes -= dropped.nbytes
