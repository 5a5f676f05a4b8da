"""What the benchmark scripts share: where the shared data is, and their section of BENCHMARKS.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from spacy_elmo.files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
# As tests/conftest.py finds it: $SPACY_ELMO_SHARED, else ../shared beside the repository.
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", ROOT.parent / "shared"))


def machine(threads: int, device: str = "cpu") -> str:
    """The machine a figure was measured on, as every result names it: the GPU's name, or the CPU's
    model and features with the thread count; and the torch release."""
    import torch

    from spacy_elmo.kernels.machine import cpu_description

    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"{cpu_description()}, {threads} threads, torch {torch.__version__}"


def result_name(kind: str, label: Optional[str] = None, cap: Optional[str] = None) -> str:
    """The name of a run's bench/results file (and BENCHMARKS.md section): ``kind`` ("peer-cpu"),
    then this machine's ``label`` where its results stand beside another CPU's, then the cap."""
    name = f"{kind}-{label}" if label else kind
    return f"{name}-capped-{cap}" if cap else name


def write_section(key: str, lines: list) -> None:
    """Replace (or append) the BENCHMARKS.md section between the ``<!-- key start/end -->`` marks."""
    start, end = f"<!-- {key} start -->", f"<!-- {key} end -->"
    text = BENCHMARKS.read_text(encoding="utf-8") if BENCHMARKS.exists() else "# Benchmarks\n\n"
    block = f"{start}\n" + "\n".join(lines) + end
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    atomic_write_text(BENCHMARKS, text)
