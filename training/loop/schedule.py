"""The learning rate over a run (``TrainConfig.lr_schedule``), as a function of how much of the run's
budget is spent: its minutes (``max_minutes``) or its steps (``max_steps``), whichever runs out first.
A schedule over time is what lets a 9-minute run warm up and anneal fully on a CPU of any speed; a
schedule over steps would stop wherever the slow CPU's last step falls."""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import torch

from spacy_elmo.choices import choose

# fraction of the budget spent, warm-up fraction, final fraction of lr -> fraction of lr
LearningRateShape = Callable[[float, float, float], float]


def _constant(spent: float, warmup: float, final: float) -> float:
    return 1.0


def _warmup_cosine(spent: float, warmup: float, final: float) -> float:
    """Linear from 0 to 1 over the first ``warmup`` of the budget, then half a cosine down to ``final``."""
    if spent < warmup:
        return spent / warmup
    decay = min(1.0, (spent - warmup) / (1.0 - warmup))
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * decay))


SCHEDULES: Dict[str, LearningRateShape] = {"constant": _constant, "warmup-cosine": _warmup_cosine}
BUDGETED = {"warmup-cosine"}  # the schedules that need a budget to spread over


def budget_spent(elapsed_s: float, step: int, max_minutes: float, max_steps: int) -> Optional[float]:
    """The fraction of the run's budget spent (0 to 1): the larger of time and steps, of those the run
    has; None for a run without a budget."""
    parts = []
    if max_minutes:
        parts.append(elapsed_s / (60.0 * max_minutes))
    if max_steps:
        parts.append(step / max_steps)
    return min(1.0, max(parts)) if parts else None


def scheduled_lr(name: str, lr: float, spent: Optional[float], warmup: float, final: float) -> float:
    """The learning rate at ``spent`` of the budget (``lr`` itself where there is no budget)."""
    shape = choose(SCHEDULES, "lr_schedule", name)
    return lr if spent is None else lr * shape(spent, warmup, final)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
