"""Where a benchmark's results go, what machine they name, and its section of BENCHMARKS.md.

By default results go to bench/results/, working files to bench/out/ and sections into the
repository's BENCHMARKS.md. With ``SPACY_ELMO_BENCH_OUTPUT=DIR`` all three go under DIR (``results/``,
``out/``, ``BENCHMARKS.md``): the test suite's smoke runs write there, never into the repository.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
# As tests/conftest.py finds it: $SPACY_ELMO_SHARED, else ../shared beside the repository.
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", ROOT.parent / "shared"))
_ELSEWHERE = os.environ.get("SPACY_ELMO_BENCH_OUTPUT")
RESULTS = Path(_ELSEWHERE) / "results" if _ELSEWHERE else ROOT / "bench" / "results"
OUT = Path(_ELSEWHERE) / "out" if _ELSEWHERE else ROOT / "bench" / "out"
BENCHMARKS = Path(_ELSEWHERE) / "BENCHMARKS.md" if _ELSEWHERE else ROOT / "BENCHMARKS.md"


def _package_module(name: str):
    """spacy_elmo/NAME.py loaded by its path, for a module that needs no more than the standard
    library: importing it through its package would import torch and spaCy, seconds of CPU in
    every process that only runs workers, names the machine or renders a section."""
    spec = importlib.util.spec_from_file_location(
        f"spacy_elmo_{name.replace('/', '_')}", ROOT / "spacy_elmo" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FILES = _package_module("files")  # atomic writes under the user's umask
_MACHINE = _package_module("kernels/machine")  # the CPU in words (torch only where a probe runs)


def cpu_description() -> str:
    """The CPU in words (``spacy_elmo.kernels.machine.cpu_description``), without importing torch."""
    return _MACHINE.cpu_description()


def machine(threads: int, device: str = "cpu") -> str:
    """The machine a figure was measured on, as every result names it: the GPU's name, or the CPU's
    model and features with the thread count; and the torch release."""
    if device == "cuda":
        import torch

        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"{cpu_description()}, {threads} threads, torch {version('torch')}"


def result_name(kind: str, label: Optional[str] = None, cap: Optional[str] = None) -> str:
    """The name of a run's results file (and BENCHMARKS.md section): ``kind`` ("peer-cpu"), then
    this machine's ``label`` where its results stand beside another CPU's, then the cap."""
    name = f"{kind}-{label}" if label else kind
    return f"{name}-capped-{cap}" if cap else name


# The scripts merged into the suite, as results files written before it name them.
RENAMED = {
    "bench/bench_pretrain.py": "bench/pretrain.py perplexity",
    "bench/bench_sweep.py": "bench/pretrain.py sweep",
    "bench/bench_serve.py": "bench/serve.py",
}


def command_line(script: str, peer: Optional[str] = None, dropped: Sequence[str] = ()) -> str:
    """The command that reproduced this run, as a results file keeps it: ``python bench/SCRIPT``
    and this process's arguments (less ``dropped``), the peer's folder shown as PEER_DIR."""
    words = [word for word in sys.argv[1:] if word not in dropped]
    shown = ["PEER_DIR" if peer is not None and word == peer else shlex.quote(word) for word in words]
    return " ".join(["python", f"bench/{script}", *shown])


def shown_command(recorded: str) -> str:
    """A results file's command as it is run now (an older file's names the script it came from)."""
    for old, new in RENAMED.items():
        recorded = recorded.replace(old, new)
    return recorded


def write_results(name: str, report: Dict[str, Any]) -> Path:
    """``RESULTS/name.json``, written atomically; returns its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    _FILES.atomic_write_json(path, report)
    return path


def read_results(name: str) -> Dict[str, Any]:
    """A report ``write_results`` wrote, to render its section again without measuring."""
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"No results to render: {path} does not exist (run the benchmark first).")
    return json.loads(path.read_text(encoding="utf-8"))


def figure_path(name: str) -> Path:
    """Where a results file's plot goes (``RESULTS/name.png``), for a section to show it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{name}.png"


def save_figure(fig, path: Path, dpi: int = 120) -> None:
    """Lay out ``fig``, write it to ``path`` as PNG (atomically: a reader never sees half a plot)
    and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        _FILES.atomic_write(path, lambda temporary: fig.savefig(temporary, dpi=dpi, format="png"))
    finally:
        plt.close(fig)


def figure_link(name: str) -> str:
    """The Markdown image of ``figure_path(name)`` as BENCHMARKS.md shows it."""
    return f"![{name}](bench/results/{name}.png)"


def write_section(key: str, lines: Sequence[str]) -> None:
    """Replace (or append) the BENCHMARKS.md section between the ``<!-- key start/end -->`` marks."""
    start, end = f"<!-- {key} start -->", f"<!-- {key} end -->"
    text = BENCHMARKS.read_text(encoding="utf-8") if BENCHMARKS.exists() else "# Benchmarks\n\n"
    block = f"{start}\n" + "\n".join(lines).rstrip() + f"\n{end}"
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS.parent.mkdir(parents=True, exist_ok=True)
    _FILES.atomic_write_text(BENCHMARKS, text)


def run_worker(
    script: str,
    spec: Dict[str, Any],
    python: str = sys.executable,
    env: Optional[Dict[str, str]] = None,
    arguments: Sequence[str] = (),
) -> Dict[str, Any]:
    """``python script [arguments] --worker SPEC`` in a process of its own (its own peak memory, its
    own thread settings): the JSON object the worker prints on its last line of output."""
    command: List[str] = [python, script, *arguments, "--worker", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise SystemExit(f"The worker {Path(script).name} {json.dumps(spec)[:300]} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def worker_reply(result: Dict[str, Any]) -> None:
    """What a worker prints for ``run_worker``: its result, as one JSON line, last."""
    print(json.dumps(result), flush=True)
