"""The peer: AllenNLP's `Elmo` (../shared/tools/peer-allennlp), run by its own Python in its own
virtual environment on the same sentences and weights as ours, in the same run.

    bash ../shared/tools/peer-allennlp/setup.sh PEER_DIR    # once: its venv and full-size weights
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Optional

from suite.report import SHARED

TOOLS = SHARED / "tools" / "peer-allennlp"
SIDE = Path(__file__).resolve().parent / "allennlp_side.py"


def peer_folder(folder: Optional[str]) -> Optional[Path]:
    """The peer's folder as a command line gives it, checked (None: no peer in this run)."""
    if folder is None:
        return None
    path = Path(folder)
    if not (path / "venv").is_dir() or not (path / "full" / "lm_weights.hdf5").is_file():
        raise SystemExit(
            f"{path} is not the peer's folder (no venv/ or full/lm_weights.hdf5): build it with "
            f"bash {TOOLS / 'setup.sh'} {path}"
        )
    return path


def run_peer(
    peer: Path,
    sentences_file: Path,
    mode: str,
    repeats: int,
    threads: int,
    device: str = "cpu",
    batch_size: int = 64,
) -> Dict[str, Any]:
    """The peer's result for one workload (``sentences_file``: a JSON list of token lists) and mode
    ("plain", or "cached": its ``vocab_to_cache``) on ``device``, in batches of ``batch_size``:
    words/s (median of ``repeats`` runs after a warm-up) and peak memory."""
    environment = {**os.environ, "PYTHONPATH": str(TOOLS / "stubs")}
    command = [
        str(peer / "venv" / "bin" / "python"),
        str(SIDE),
        *("--model", str(peer / "full"), "--sentences", str(sentences_file), "--mode", mode),
        *("--reps", str(repeats), "--threads", str(threads), "--device", device, "--batch-size", str(batch_size)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    line = next((row for row in done.stdout.splitlines() if row.startswith("RESULT ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"the peer failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])
