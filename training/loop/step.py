"""One optimizer step of a pretraining process, and the clock that decides with it whether the run
stops (``max_minutes``) or checkpoints (``checkpoint_minutes``): every process reads its own clock,
and the step's all-reduce makes them agree."""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch

from .batching import TrainingBatch, make_batch
from .checkpoint import latest_checkpoint
from .session import Session


class Clock:
    """Training time, counted on from a resumed run's ``elapsed``, and the time since the last checkpoint."""

    def __init__(self, elapsed: float, max_minutes: float, checkpoint_minutes: float) -> None:
        self.started, self.last_checkpoint = time.time() - elapsed, time.time()
        self.max_minutes, self.checkpoint_minutes = max_minutes, checkpoint_minutes

    def elapsed(self) -> float:
        return time.time() - self.started

    def out_of_time(self) -> bool:
        return bool(self.max_minutes) and self.elapsed() >= 60 * self.max_minutes

    def checkpoint_due(self) -> bool:
        return time.time() - self.last_checkpoint >= 60 * self.checkpoint_minutes

    def checkpointed(self) -> None:
        self.last_checkpoint = time.time()


class StepTotals(NamedTuple):
    """A step summed over every process: predictions (both directions), NLL, tokens; and whether
    any process is out of time (stop) or due a checkpoint (save_now)."""

    targets: float
    nll: float
    tokens: float
    stop: bool
    save_now: bool


def take_step(session: Session, clock: Clock) -> StepTotals:
    """Each stream contributes a batch; the loss is normalized by the global count of predictions."""
    processes, cfg = session.processes, session.cfg
    sentences = [s.sentences.sentence(i) for s in session.streams for i in s.next_batch()]
    batch = make_batch(sentences, session.table).to(processes.device)
    with session.autocast:
        nll_forward, nll_backward = session.model(batch)
    flags = [float(clock.out_of_time()), float(clock.checkpoint_due())]
    targets, nll_sum, tokens, stop, save_now = processes.all_sum(
        [2 * batch.n_targets, float((nll_forward + nll_backward).detach()), len(batch.type_ids), *flags]
    )
    loss = (nll_forward + nll_backward) * (processes.world / targets)  # DDP averages over ranks
    if not math.isfinite(nll_sum):
        raise _non_finite_loss(session, batch, tokens)
    session.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.clip_norm:
        torch.nn.utils.clip_grad_norm_(session.bilm.parameters(), cfg.clip_norm)
    session.optimizer.step()
    return StepTotals(targets, nll_sum, tokens, bool(stop), bool(save_now))


def _non_finite_loss(session: Session, batch: TrainingBatch, tokens: float) -> FloatingPointError:
    """The error that names the step, this rank's batch and the checkpoint to go back to."""
    first = " ".join(session.table.strings[i] for i in batch.type_ids[1 : batch.lengths[0] - 1].tolist())[:80]
    return FloatingPointError(
        f"Non-finite loss at step {session.state['step'] + 1}: batch of {len(batch.lengths)} sentences, {int(tokens)} "
        "tokens "
        f"on this rank (first: {first!r}). The last checkpoint is {latest_checkpoint(session.checkpoints)}; lower lr "
        "or check the data."
    )
