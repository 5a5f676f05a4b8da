"""One optimizer step of a pretraining process, and the clock that decides with it whether the run
stops (``max_minutes``), checkpoints (``checkpoint_minutes``) or evaluates (``eval_minutes``), and
how much of the budget the learning-rate schedule sees spent: every process reads its own clock,
and the step's all-reduce makes them agree."""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch

from .batching import TrainingBatch, make_batch
from .checkpoint import latest_checkpoint
from .schedule import budget_spent, scheduled_lr, set_lr
from .session import Session
from .train_config import TrainConfig


class Clock:
    """Training time, counted on from a resumed run's ``elapsed``, and the time since the last
    checkpoint and the last evaluation."""

    def __init__(self, elapsed: float, cfg: TrainConfig) -> None:
        self.started = time.time() - elapsed
        self.last_checkpoint = self.last_evaluation = time.time()
        self.cfg = cfg

    def elapsed(self) -> float:
        return time.time() - self.started

    def out_of_time(self) -> bool:
        return bool(self.cfg.max_minutes) and self.elapsed() >= 60 * self.cfg.max_minutes

    def checkpoint_due(self) -> bool:
        return time.time() - self.last_checkpoint >= 60 * self.cfg.checkpoint_minutes

    def evaluation_due(self) -> bool:
        return bool(self.cfg.eval_minutes) and time.time() - self.last_evaluation >= 60 * self.cfg.eval_minutes

    def checkpointed(self) -> None:
        self.last_checkpoint = time.time()

    def evaluated(self) -> None:
        self.last_evaluation = time.time()


class StepTotals(NamedTuple):
    """A step summed over every process: predictions (both directions), NLL, tokens; whether any
    process is out of time (stop), due a checkpoint (save_now) or an evaluation (evaluate_now); and
    the learning rate the step took."""

    targets: float
    nll: float
    tokens: float
    stop: bool
    save_now: bool
    evaluate_now: bool
    lr: float


def take_step(session: Session, clock: Clock) -> StepTotals:
    """Each stream contributes a batch; the loss is normalized by the global count of predictions.
    The processes agree on the time (their mean elapsed), so they take the same learning rate."""
    processes, cfg = session.processes, session.cfg
    sentences = [s.sentences.sentence(i) for s in session.streams for i in s.next_batch()]
    batch = make_batch(sentences, session.table).to(processes.device)
    with session.autocast:
        nll_forward, nll_backward = session.model(batch)
    stop_now = clock.out_of_time() or out_of_patience(session)
    flags = [float(stop_now), float(clock.checkpoint_due()), float(clock.evaluation_due())]
    targets, nll_sum, tokens, elapsed, stop, save_now, evaluate_now = processes.all_sum(
        [
            2 * batch.n_targets,
            float((nll_forward + nll_backward).detach()),
            len(batch.type_ids),
            clock.elapsed(),
            *flags,
        ]
    )
    loss = (nll_forward + nll_backward) * (processes.world / targets)  # DDP averages over ranks
    if not math.isfinite(nll_sum):
        raise _non_finite_loss(session, batch, tokens)
    session.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.clip_norm:
        torch.nn.utils.clip_grad_norm_(session.bilm.parameters(), cfg.clip_norm)
    lr = _learning_rate(cfg, elapsed / processes.world, session.state.step + 1)
    set_lr(session.optimizer, lr)
    session.optimizer.step()
    return StepTotals(targets, nll_sum, tokens, bool(stop), bool(save_now), bool(evaluate_now), lr)


def out_of_patience(session: Session) -> bool:
    """Whether the last ``patience`` dev evaluations (rank 0's) brought no new best."""
    patience = session.cfg.patience
    return bool(patience) and session.state.evaluations_since_best >= patience


def _learning_rate(cfg: TrainConfig, elapsed: float, step: int) -> float:
    """The rate of step number ``step`` (counted from 1), ``elapsed`` seconds into the run."""
    spent = budget_spent(elapsed, step, cfg.max_minutes, cfg.max_steps)
    return scheduled_lr(cfg.lr_schedule, cfg.lr, spent, cfg.warmup, cfg.final_lr)


def _non_finite_loss(session: Session, batch: TrainingBatch, tokens: float) -> FloatingPointError:
    """The error that names the step, this rank's batch and the checkpoint to go back to."""
    first = " ".join(session.table.strings[i] for i in batch.type_ids[1 : batch.lengths[0] - 1].tolist())[:80]
    return FloatingPointError(
        f"Non-finite loss at step {session.state.step + 1}: batch of {len(batch.lengths)} sentences, {int(tokens)} "
        "tokens "
        f"on this rank (first: {first!r}). The last checkpoint is {latest_checkpoint(session.checkpoints)}; lower lr "
        "or check the data."
    )
