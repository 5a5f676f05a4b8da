"""The optimizers a run can name (``TrainConfig.optimizer``): name -> factory of (parameters, lr)."""

from __future__ import annotations

from typing import Callable, Dict, Iterable

import torch
from torch.nn import Parameter

from spacy_elmo.choices import choose

OptimizerFactory = Callable[[Iterable[Parameter], float], torch.optim.Optimizer]

OPTIMIZERS: Dict[str, OptimizerFactory] = {
    # The original biLM's: Adagrad, lr 0.2, accumulators starting at 1.
    "adagrad": lambda parameters, lr: torch.optim.Adagrad(parameters, lr=lr, initial_accumulator_value=1.0),
    "adam": lambda parameters, lr: torch.optim.Adam(parameters, lr=lr),
}


def make_optimizer(name: str, parameters: Iterable[Parameter], lr: float) -> torch.optim.Optimizer:
    return choose(OPTIMIZERS, "optimizer", name)(parameters, lr)
