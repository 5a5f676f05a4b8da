"""The layers of recently seen sentences, kept by the ``elmo`` component (``sentence_cache_tokens``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    from ..network.bilm import BiLM


class SentenceCache:
    """The layers of recently seen sentences, up to ``capacity`` tokens (0: off), least recently
    used first out. Exact, since a sentence's layers do not depend on its batch; emptied when the
    component gets another biLM or runs it in another precision. Saves the frozen biLM from
    recomputing a training corpus every epoch."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()  # several threads may share the component
        self._entries: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
        self._tokens = 0
        self._owner: Optional[Tuple[int, str]] = None

    def __getstate__(self) -> dict:
        """Its capacity, not its lock or its entries: a copy (pickled into another process) starts empty."""
        return {"capacity": self.capacity}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["capacity"])  # type: ignore[misc]

    def for_model(self, bilm: BiLM) -> "SentenceCache":
        """This cache, emptied first unless its layers came from ``bilm`` in its current precision."""
        owner = (id(bilm), bilm.precision)
        with self._lock:
            if owner != self._owner:
                self._entries.clear()
                self._tokens, self._owner = 0, owner
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
        copy = np.array(layers, copy=True)
        with self._lock:
            if sentence in self._entries:
                return
            self._entries[sentence] = copy
            self._tokens += len(sentence)
            while self._tokens > self.capacity:
                old, _ = self._entries.popitem(last=False)
                self._tokens -= len(old)
