"""Where the downstream scores go: ``metrics/downstream/NAME.json``, relative to the working
directory (the project's, as project.yml runs the commands)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from spacy_elmo.io import atomic_write_text

METRICS = Path("metrics/downstream")


def save_metrics(name: str, result: Any) -> Path:
    return atomic_write_text(METRICS / f"{name}.json", json.dumps(result, indent=2) + "\n")


def load_metrics(name: str) -> Dict[str, Any]:
    """The scores saved as ``name``; empty when that step has not run."""
    path = METRICS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}
