"""Every process's torch RNG state (and CUDA's), saved in checkpoints so that a resumed run draws
the same dropout masks and softmax samples as one never stopped."""

from __future__ import annotations

from typing import Dict

import torch
from torch import Tensor

from .processes import Processes


def gathered_rng_states(processes: Processes) -> Dict[str, Tensor]:
    """Every rank's RNG states, gathered for rank 0 to save: {"rank{r}.torch" | "rank{r}.cuda": state}."""
    mine = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        mine["cuda"] = torch.cuda.get_rng_state(processes.device)
    gathered = processes.gather({k: v.cpu() for k, v in mine.items()})
    return {f"rank{r}.{k}": v for r, states in enumerate(gathered) for k, v in states.items()}


def restore_rng_states(processes: Processes, rng: Dict[str, Tensor]) -> None:
    """This rank's states from ``rng`` (as saved by a run with at least as many ranks)."""
    if f"rank{processes.rank}.torch" in rng:
        torch.set_rng_state(rng[f"rank{processes.rank}.torch"])
        if torch.cuda.is_available() and f"rank{processes.rank}.cuda" in rng:
            torch.cuda.set_rng_state(rng[f"rank{processes.rank}.cuda"], processes.device)
