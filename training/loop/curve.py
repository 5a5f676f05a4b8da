"""The learning curve of a run: training and dev perplexity against tokens seen, as a PNG."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

from spacy_elmo.extras import install_command
from spacy_elmo.files import atomic_write

# A dev evaluation redraws the curve once this many seconds have passed since it was last drawn
# (or the process began the run); the run's end always does (docs/pretraining.md, "Progress").
REDRAW_AFTER_S = 30.0


class PlotSkipped(UserWarning):
    """A command goes on without its plot: matplotlib (the ``train`` extra) is missing."""


def plots_here(what: str, warn: bool = True) -> bool:
    """Whether matplotlib imports, asked when a command starts, so that a missing extra costs the
    picture and not the work before it; where it does not, a warning now (where ``warn``) that
    ``what`` goes on without its plot."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as missing:
        if warn:
            warnings.warn(
                f"{what} without its plot: matplotlib is not installed ({missing}). It comes with the train "
                f"extra: {install_command('train')}.",
                PlotSkipped,
                stacklevel=3,
            )
        return False
    return True


class RunCurve:
    """RUN/curve.png, drawn from RUN/log.jsonl at dev evaluations (``evaluated``), decided when the
    run starts: where matplotlib imports (``plots_here``; ``warn``: the process that writes the run
    says so where it does not), else never.

    A drawing lays the figure out and renders it, which takes as long as tens of steps of the tiny
    preset: a run that evaluates every few steps would spend more time drawing than training. So an
    evaluation redraws it once ``REDRAW_AFTER_S`` seconds have passed since the last drawing (or
    the start), and the run's last evaluation always does: the final curve has every point, and
    RUN/log.jsonl has each as it comes. What the run computes does not depend on when it draws."""

    def __init__(self, output: Path, warn: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.log_path, self.png_path = output / "log.jsonl", output / "curve.png"
        self.plots = plots_here("this run trains, evaluates and checkpoints as usual, and writes no curve.png", warn)
        self.clock = clock
        self.drawn_at = clock()

    def evaluated(self, last: bool) -> None:
        """A dev evaluation was logged (``last``: the run's final one): the curve redrawn where due."""
        if self.plots and (last or self.clock() - self.drawn_at >= REDRAW_AFTER_S):
            plot_learning_curve(self.log_path, self.png_path)
            self.drawn_at = self.clock()


def plot_learning_curve(log_path: Path, png_path: Path, baseline: Optional[float] = None, title: str = "") -> Path:
    """Plot RUN/log.jsonl into ``png_path`` (written atomically); ``baseline``: a horizontal line,
    e.g. a unigram model's perplexity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    train = [(r["tokens"], r["train_ppl"]) for r in records if "train_ppl" in r]
    dev = [(r["tokens"], r["dev_ppl"]) for r in records if "dev_ppl" in r]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if train:
        ax.plot(*zip(*train, strict=True), color="#9ecae1", linewidth=1, label="train (full softmax, window mean)")
    if dev:
        ax.plot(*zip(*dev, strict=True), color="#08519c", marker="o", markersize=3, label="dev (full softmax)")
    if baseline:
        ax.axhline(baseline, color="#d62728", linestyle="--", label=f"unigram model: {baseline:,.0f}")
    ax.set_yscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("perplexity (forward and backward)")
    ax.set_title(title or f"biLM pretraining: {Path(log_path).parent.name}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        atomic_write(png_path, lambda temporary: fig.savefig(temporary, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return Path(png_path)
