"""One row of the compatibility matrix, run inside a matrix session's venv (noxfile.py, `nox -s compat`):
the versions installed, the tests that exercise everything torch-dependent, and what the kernel plan
chose for each precision; then docs/compatibility.md is rewritten from every row recorded so far.

    python scripts/compat_report.py ROW_ID [pytest arguments...]

Rows are bench/results/compat/ROW_ID.json; the table lists them in the order of noxfile.COMPAT.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Union

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "bench" / "results" / "compat"
TABLE = ROOT / "docs" / "compatibility.md"
# The tests that exercise what depends on torch: parity with the original, the precisions and their
# kernels (probes, selection, oneDNN), batch and thread invariance, the component saved and loaded, a
# pretraining run resumed, embedding a corpus.
TESTS = [
    "tests/test_parity.py",
    "tests/test_precision.py",
    "tests/test_advice.py",
    "tests/test_select.py",
    "tests/test_onednn.py",
    "tests/test_bilm.py",
    "tests/test_threads.py",
    "tests/test_component.py",
    "tests/test_reload.py",
    "tests/test_public_api.py",
    "tests/test_training.py::test_resume_after_a_stop_continues_the_same_run",
    "tests/test_training.py::test_tiny_model_overfits_tiny_corpus",
    "tests/test_embed_cli.py",
]
# What the rows alone do not say; kept here so that the page is rewritten whole from the rows.
NOTES = [
    "- **Python 3.9** is not supported: past its end of life, it cannot install spaCy 3.8's current release (spaCy "
    "since 3.8.8, thinc since 8.3.7 and blis 1.3 ship no wheels for it, and their source builds need Python 3.10).",
    "- **torch 2.5 to 2.9** pass, but oneDNN's fp32 probe fails there, so exact "
    "fp32 runs MKL on fixed shapes: more skipped tests (those of oneDNN's path), and slower one sentence at a time. "
    "Measured in one run on an AMD EPYC Zen 5, 2 threads (`bench/peer.py --pythons`, BENCHMARKS.md): one sentence "
    "at 0.55x AllenNLP's speed on torch 2.5.1 against 5.03x on torch 2.15.0; 64 sentences at 1.67x against 5.06x. "
    "bf16 and int8 keep their kernels. Prefer torch 2.13 or later.",
    "- **spaCy 3.7** rows install `click` beside it: spaCy 3.7's command line imports it, and today's typer no longer "
    "brings it (an environment that has spaCy 3.7 has it).",
    "- The kernels column is what `select` chose for each precision at the end of each row: a rule on the CPU's "
    "features and probes of the kernels' bits, the same on a busy machine as on a quiet one. Rows recorded before "
    "`select` give what a plan timed at load chose and its ratios to fp32; those timed while the machine was busy "
    "are marked.",
]
PLAN_CODE = """
import json, torch
from spacy_elmo.kernels.select import select
made = {p: select(torch.device("cpu"), p) for p in ("fp32", "bf16", "int8")}
print(json.dumps({p: {"runs": m.runs, "kernel": m.choice.kernel} for p, m in made.items()}))
"""


def versions() -> Dict[str, str]:
    code = (
        "import json, numpy, spacy, thinc, torch; print(json.dumps({'torch': torch.__version__, 'spacy': "
        "spacy.__version__, 'thinc': thinc.__version__, 'numpy': numpy.__version__}))"
    )
    found = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    return {"python": platform.python_version(), **found}


def run_tests(arguments: List[str]) -> Dict[str, object]:
    """Counts and duration of the test subset, and the names of the failures."""
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *(arguments or TESTS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail)}
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.MULTILINE)
    return {
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
        "skipped": counts.get("skipped", 0),
        "seconds": round(time.time() - started),
        "failures": failures,
        "failure_output": done.stdout[-4000:] if failures else "",  # what a failure said, to fix it from the record
        "summary": tail,
        "returncode": done.returncode,
    }


def kernels() -> Dict[str, object]:
    """What each precision runs here (``select``), from an empty user cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "SPACY_ELMO_CACHE": cache}
        done = subprocess.run([sys.executable, "-c", PLAN_CODE], capture_output=True, text=True, env=env)
    if done.returncode:
        return {"error": [done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _kernel_cell(kernel: Union[None, Dict[str, str], List[str]]) -> str:
    """What runs: its precision and kernel; rows recorded before ``select`` (lists) gave what a
    timed plan ran and its ratio to fp32."""
    if not kernel:
        return "?"
    if isinstance(kernel, dict):
        return f"{kernel['runs']} ({kernel['kernel']})"
    return f"{kernel[0]}{' ' + kernel[2] if len(kernel) > 2 and kernel[2] != '-' else ''}"


def render(order: List[str]) -> str:
    """docs/compatibility.md from every recorded row, in ``order`` (then any others)."""
    rows = {path.stem: json.loads(path.read_text()) for path in sorted(ROWS.glob("*.json"))}
    names = [name for name in order if name in rows] + sorted(set(rows) - set(order))
    lines = [
        "# Compatibility",
        "",
        "Each row is one run of `nox -s compat` (noxfile.py): a fresh virtual environment that installs torch first, "
        'then this package as a user would (`pip install ".[h5]"`), then runs the tests that exercise everything '
        "torch-dependent (`scripts/compat_report.py`), and asks `select` what each precision runs. "
        "`setup.py` declares what passed here; `tests/test_compatibility.py` fails when the two disagree.",
        "",
        "| python | torch | spaCy | thinc | numpy | passed | failed | skipped | minutes | "
        "kernels: bf16 / int8 (older rows: a timed plan's x fp32, 1 sentence / batch) | machine, date |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for name in names:
        row = rows[name]
        v, t, k = row["versions"], row["tests"], row["kernels"]
        chosen = " / ".join(_kernel_cell(k.get(p)) for p in ("bf16", "int8"))
        if any(isinstance(k[p], list) and (len(k[p]) < 4 or not k[p][3]) for p in ("bf16", "int8") if p in k):
            chosen += " (timed on a busy machine: not a verdict on the kernels)"  # rows recorded before select
        lines.append(
            f"| {v['python']} | {v['torch']} | {v['spacy']} | {v['thinc']} | {v['numpy']} | {t['passed']} | "
            f"{t['failed']} | {t['skipped']} | {t['seconds'] / 60:.1f} | {chosen} | {row['machine']}, {row['date']} |"
        )
    lines += ["", *NOTES]
    failing = [(name, rows[name]["tests"]["failures"]) for name in names if rows[name]["tests"]["failures"]]
    if failing:
        lines += ["", "Failures:", ""]
        lines += [f"- {name}: {', '.join(failures)}" for name, failures in failing]
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from spacy_elmo.files import atomic_write_json, atomic_write_text
    from spacy_elmo.kernels.machine import cpu_description

    row_id, arguments = sys.argv[1], sys.argv[2:]
    record = {
        "versions": versions(),
        "tests": run_tests(arguments),
        "kernels": kernels(),
        "machine": cpu_description(),
        "date": time.strftime("%Y-%m-%d"),
    }
    atomic_write_json(ROWS / f"{row_id}.json", record)
    atomic_write_text(TABLE, render(os.environ.get("COMPAT_IDS", "").split(",")))
    print(json.dumps(record["tests"]["summary"]), json.dumps(record["versions"]))
    if record["tests"]["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
