"""Continuous batching for one replica: requests queue while its worker runs a batch; the moment the
worker is free it takes every request waiting, oldest first, up to a token budget, and runs them as
one batch. A lone request starts at once (no timer holds it), and under load batches grow by
themselves to what arrived during the last one.

Clients in a closed loop (each sends its next request when its answer arrives) would otherwise
split into two alternating batches: the answers of a batch of n go out while the one request that
arrived meanwhile runs alone, and the n come back while it runs. So a replica that frees up with
fewer requests waiting than it saw last time (the last batch and those that arrived while it ran)
waits for that many, at most ``REFILL_SHARE`` of the last batch's run time. A lone client is never
held: it saw one request, and one waits.

The worker is one thread the replica owns (``ThreadPoolExecutor(max_workers=1)``), which also loaded
the pipeline: CUDA's current device and cupy's state are per thread, and a GPU pipeline must be
called from the thread that set them up. The event loop stays free meanwhile, so health, metrics and
refusals are answered while a batch runs. A request whose client left before its batch started is
dropped from the queue (its future is cancelled) and costs nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable, Deque, Generic, List, Optional, Tuple, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

REFILL_SHARE = 0.25  # the longest refill wait, as a share of the last batch's run time


@dataclass(frozen=True)
class BatchFigures:
    """What a batch was: its number in this batcher, its requests and their docs and tokens, and how
    many requests were still waiting when it started. ``reports``: true on one answer of the batch
    only, so that whoever counts batches from the answers counts each once."""

    number: int
    requests: int
    docs: int
    tokens: int
    waiting: int
    reports: bool = False


# A batch run: the items in, one result per item and the batch's token count out.
RunBatch = Callable[[List[Item]], Tuple[List[Result], int]]


@dataclass
class _Waiting(Generic[Item, Result]):
    item: Item
    size: int
    docs: int
    arrived: float
    future: "asyncio.Future[Tuple[Result, BatchFigures]]"


class ContinuousBatcher(Generic[Item, Result]):
    """Batches ``run`` over the items ``submit`` receives (see the module docstring).

    ``size(item)``: what the budget ``max_tokens`` counts (an item above it runs alone); ``docs(item)``:
    for the figures. ``max_requests``: most items a batch (1: each alone). ``max_wait_s`` above 0 holds
    a batch that is under its budget until its oldest item is that old; at 0, the refill wait holds
    it (see the module docstring). ``clock``: seconds, for the waits (``time.monotonic``)."""

    def __init__(
        self,
        run: "RunBatch[Item, Result]",
        worker: Executor,
        size: Callable[[Item], int],
        docs: Callable[[Item], int],
        max_tokens: int,
        max_requests: Optional[int] = None,
        max_wait_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run, self.worker, self.size, self.docs = run, worker, size, docs
        self.max_tokens, self.max_requests, self.max_wait_s = max_tokens, max_requests, max_wait_s
        self.clock = clock
        self._queue: Deque[_Waiting[Item, Result]] = deque()
        self._arrival = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None
        self._batches = 0
        self._seen = 1  # requests the last batch saw: its own and those that arrived while it ran
        self._last_run_s = 0.0

    @property
    def waiting(self) -> int:
        """Requests queued and not yet in a batch."""
        return sum(not entry.future.cancelled() for entry in self._queue)

    async def submit(self, item: Item) -> Tuple[Result, BatchFigures]:
        """``item``'s result and the figures of the batch it ran in."""
        loop = asyncio.get_running_loop()
        entry = _Waiting(item, self.size(item), self.docs(item), self.clock(), loop.create_future())
        self._queue.append(entry)
        if self._task is None or self._task.done():
            self._arrival = asyncio.Event()  # the serving task's own: an event belongs to one loop
            self._task = loop.create_task(self._serve())
        self._arrival.set()
        return await entry.future

    async def _serve(self) -> None:
        """Run batches while anything waits; returns when the queue is empty."""
        loop = asyncio.get_running_loop()
        while self._queue:
            await self._hold()
            batch = self._take()
            if not batch:
                continue
            self._batches += 1
            waiting = self.waiting  # when the batch starts
            items = [entry.item for entry in batch]
            started = self.clock()
            try:
                results, tokens = await loop.run_in_executor(self.worker, self.run, items)
                if len(results) != len(batch):  # none left waiting forever, none given another's result
                    raise RuntimeError(f"the batch run returned {len(results)} results for {len(batch)} requests")
            except Exception as failure:  # each request of the batch gets the error; the batcher goes on
                for entry in batch:
                    if not entry.future.done():
                        entry.future.set_exception(failure)
                continue
            finally:
                self._last_run_s = self.clock() - started
                self._seen = len(batch) + self.waiting
            figures = BatchFigures(self._batches, len(batch), sum(e.docs for e in batch), tokens, waiting)
            reported = False
            for entry, result in zip(batch, results, strict=True):
                if not entry.future.done():
                    entry.future.set_result((result, dataclasses.replace(figures, reports=not reported)))
                    reported = True

    async def _hold(self) -> None:
        """Wait for more requests until the budget is full (its tokens, or its ``max_requests``) or
        the deadline: with ``max_wait_s``, until the oldest waiting request is that old; otherwise the
        refill wait (see the module docstring)."""
        if self.max_wait_s > 0:
            await self._wait_while(lambda: not self._full(), self._queue[0].arrived + self.max_wait_s)
        else:
            expected = self._seen if self.max_requests is None else min(self._seen, self.max_requests)
            deadline = self.clock() + REFILL_SHARE * self._last_run_s
            await self._wait_while(lambda: self.waiting < expected and not self._full(), deadline)

    async def _wait_while(self, holding: Callable[[], bool], deadline: float) -> None:
        """Wait for arrivals while ``holding()`` and the deadline (on ``clock``) is ahead."""
        while holding() and self.clock() < deadline:
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), deadline - self.clock())
            except asyncio.TimeoutError:
                break

    def _take(self) -> List[_Waiting[Item, Result]]:
        """The next batch: the oldest live requests within the budget (at least one)."""
        batch: List[_Waiting[Item, Result]] = []
        tokens = 0
        while self._queue and (self.max_requests is None or len(batch) < self.max_requests):
            entry = self._queue[0]
            if entry.future.cancelled():
                self._queue.popleft()
                continue
            if batch and tokens + entry.size > self.max_tokens:
                break
            batch.append(self._queue.popleft())
            tokens += entry.size
        return batch

    def _full(self) -> bool:
        """Whether what waits fills a batch: its tokens, or its number of requests."""
        if self.max_requests is not None and self.waiting >= self.max_requests:
            return True
        return self._waiting_tokens() >= self.max_tokens

    def _waiting_tokens(self) -> int:
        return sum(entry.size for entry in self._queue if not entry.future.cancelled())
