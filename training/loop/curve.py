"""The learning curve of a run: training and dev perplexity against tokens seen, as a PNG."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable, Optional

from spacy_elmo.files import atomic_write

# (RUN/log.jsonl, the PNG to write) -> the PNG written
CurveDrawer = Callable[[Path, Path], object]


class CurveSkipped(UserWarning):
    """A run goes on without its learning curve: matplotlib (the ``train`` extra) is missing."""


def curve_drawer(warn: bool = True) -> CurveDrawer:
    """How a run draws its curve, decided when it starts: ``plot_learning_curve`` where matplotlib
    imports; else nothing, said once now (where ``warn``: the process that writes the run), so that
    a missing extra costs the picture and not the training before the first evaluation."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as missing:
        if warn:
            warnings.warn(
                f"matplotlib is not installed ({missing}): this run writes no curve.png, and trains, evaluates and "
                'checkpoints as usual. It comes with the train extra; pip install "matplotlib>=3.5" adds it.',
                CurveSkipped,
                stacklevel=2,
            )
        return lambda log_path, png_path: None
    return plot_learning_curve


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
