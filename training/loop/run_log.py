"""RUN/log.jsonl, the run's one curve: one JSON object per line, training lines (the loss over a
window of steps) and dev lines (perplexity)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Dict

import torch

from .run_state import RunState


class JsonlLog:
    """Appends one JSON object per line (rank 0). On resume, lines after the resumed step (written by
    the run that was killed) are dropped first, so the log is the run's one curve."""

    def __init__(self, path: Path, resume_step: int, enabled: bool) -> None:
        self.path, self.enabled = path, enabled
        if enabled and path.exists():
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))

    def write(self, **record: Any) -> None:
        if self.enabled:
            with open(self.path, "a") as stream:
                stream.write(json.dumps(record) + "\n")


class LossWindow:
    """The training loss since the last log line: NLL, predictions and tokens summed over every
    process, and the tokens per second since the window opened."""

    def __init__(self) -> None:
        self.nll = self.targets = self.tokens = 0.0
        self.opened = time.time()

    def add(self, nll: float, targets: float, tokens: float) -> None:
        self.nll, self.targets, self.tokens = self.nll + nll, self.targets + targets, self.tokens + tokens

    def record(self, state: RunState, full_softmax: bool) -> Dict[str, Any]:
        """The log line: step, tokens, elapsed, loss (mean NLL), tokens_per_s, and train_ppl where
        the loss is a perplexity's (the full softmax; a sampled-softmax loss is none)."""
        mean_nll = self.nll / self.targets
        rate = self.tokens / max(1e-9, time.time() - self.opened)
        record = {
            "step": state.step,
            "tokens": state.tokens,
            "elapsed": round(state.elapsed, 2),
            "loss": mean_nll,
            "tokens_per_s": rate,
        }
        if full_softmax:
            record["train_ppl"] = math.exp(mean_nll)
        return record


def device_memory(device: torch.device) -> Dict[str, float]:
    """For a log line on a GPU: the peak memory torch's allocator has held there so far, in MB."""
    if device.type != "cuda":
        return {}
    return {"gpu_peak_mb": round(torch.cuda.max_memory_allocated(device) / 1e6, 1)}
