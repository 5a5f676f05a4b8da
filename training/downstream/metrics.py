"""Where the downstream scores go: ``metrics/downstream/NAME.json``, relative to the working
directory (the project's, as project.yml runs the commands); and how the plots are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from spacy_elmo.files import atomic_write, atomic_write_text

METRICS = Path("metrics/downstream")


def save_metrics(name: str, result: Any, folder: Path = METRICS) -> Path:
    return atomic_write_text(folder / f"{name}.json", json.dumps(result, indent=2) + "\n")


def load_metrics(name: str, folder: Path = METRICS) -> Dict[str, Any]:
    """The scores saved as ``name``; empty when that step has not run."""
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def pyplot():
    """matplotlib.pyplot, drawing to files (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(fig, path: Path) -> Path:
    """The figure as a PNG at ``path``, written atomically; the figure is closed."""
    atomic_write(path, lambda temporary: fig.savefig(temporary, format="png", dpi=110))
    pyplot().close(fig)
    return Path(path)
