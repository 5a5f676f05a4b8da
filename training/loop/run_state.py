"""What a pretraining run carries from step to step and into its checkpoints (``trainer.json``),
in one typed record, saved and read back by one pair of functions. Checkpoints written before a
field existed load with its default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass
class RunState:
    """``step``: steps taken; ``tokens``: training tokens read (all processes); ``elapsed``: seconds
    of training across resumes (what the time budget counts); ``best_dev``: the best dev perplexity
    on the evaluation subset so far, and ``evaluations_since_best`` (what patience counts);
    ``final_dev``: the whole dev split's perplexity of the final weights, once the run ended;
    ``streams``: each data stream's position at the last checkpoint, by stream number."""

    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0
    best_dev: Optional[float] = None
    evaluations_since_best: int = 0
    final_dev: Optional[float] = None
    streams: Dict[str, List[Any]] = field(default_factory=dict)


def state_to_checkpoint(state: RunState, world: int, data_streams: int) -> Dict[str, Any]:
    """``trainer.json``'s content: the state, and the processes and data streams that wrote it."""
    return {**dataclasses.asdict(state), "world": world, "data_streams": data_streams}


def state_from_checkpoint(saved: Dict[str, Any]) -> Tuple[RunState, Optional[int]]:
    """The state in ``trainer.json`` and the number of data streams it was written with (None in
    checkpoints from before that was recorded)."""
    known = {f.name for f in dataclasses.fields(RunState)}
    missing = {"step", "tokens", "elapsed"} - set(saved)
    if missing:
        raise ValueError(f"trainer.json lacks {sorted(missing)}: not a pretraining checkpoint of this project")
    return RunState(**{k: v for k, v in saved.items() if k in known}), saved.get("data_streams")
