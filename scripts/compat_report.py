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
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "bench" / "results" / "compat"
TABLE = ROOT / "docs" / "compatibility.md"
# The tests that exercise what depends on torch: parity with the original, the precisions and their
# kernels (probes, plan, oneDNN), batch and thread invariance, the component saved and loaded, a
# pretraining run resumed, embedding a corpus.
TESTS = [
    "tests/test_parity.py",
    "tests/test_precision.py",
    "tests/test_plan.py",
    "tests/test_kernel_choice.py",
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
    "Measured in one run on an AMD EPYC Zen 5, 2 threads (`bench/bench_peer_torch.py`, BENCHMARKS.md): one sentence "
    "at 0.55x AllenNLP's speed on torch 2.5.1 against 5.03x on torch 2.15.0; 64 sentences at 1.67x against 5.06x. "
    "bf16 and int8 keep their kernels. Prefer torch 2.13 or later.",
    "- **spaCy 3.7** rows install `click` beside it: spaCy 3.7's command line imports it, and today's typer no longer "
    "brings it (an environment that has spaCy 3.7 has it).",
    "- The kernels column is what the plan chose at the end of each row, timed there; rows timed while the machine "
    "was busy (its load above its cores: other work, or the row's own tests just before) are marked, and say "
    "nothing of the kernels.",
]
PLAN_CODE = """
import json, warnings, torch
from spacy_elmo.kernels import plan
from spacy_elmo.network.config import BiLMConfig
warnings.simplefilter("ignore")
shapes = BiLMConfig.preset("original").kernel_shapes()
made = {p: plan.plan_for(shapes, p, torch.device("cpu")) for p in ("fp32", "bf16", "int8")}
print(json.dumps({p: [m.runs, m.choice.kernel, plan.ratio_text(m), m.steady] for p, m in made.items()}))
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


def kernels() -> Dict[str, List[str]]:
    """What the plan chose for the original model's shapes, per precision (measured, fresh cache)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "SPACY_ELMO_CACHE": cache, "SPACY_ELMO_KERNEL_PLAN": "measure"}
        done = subprocess.run([sys.executable, "-c", PLAN_CODE], capture_output=True, text=True, env=env)
    if done.returncode:
        return {"error": [done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(order: List[str]) -> str:
    """docs/compatibility.md from every recorded row, in ``order`` (then any others)."""
    rows = {path.stem: json.loads(path.read_text()) for path in sorted(ROWS.glob("*.json"))}
    names = [name for name in order if name in rows] + sorted(set(rows) - set(order))
    lines = [
        "# Compatibility",
        "",
        "Each row is one run of `nox -s compat` (noxfile.py): a fresh virtual environment that installs torch first, "
        'then this package as a user would (`pip install ".[h5]"`), then runs the tests that exercise everything '
        "torch-dependent (`scripts/compat_report.py`), and asks the kernel plan what it runs for the original model. "
        "`setup.py` declares what passed here; `tests/test_compatibility.py` fails when the two disagree.",
        "",
        "| python | torch | spaCy | thinc | numpy | passed | failed | skipped | minutes | "
        "kernels: bf16 / int8 (x fp32, 1 sentence / batch) | machine, date |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for name in names:
        row = rows[name]
        v, t, k = row["versions"], row["tests"], row["kernels"]
        chosen = " / ".join(
            f"{k[p][0]}{' ' + k[p][2] if k[p][2] != '-' else ''}" if p in k else "?" for p in ("bf16", "int8")
        )
        if any(len(k[p]) < 4 or not k[p][3] for p in ("bf16", "int8") if p in k):
            chosen += " (timed on a busy machine: not a verdict on the kernels)"
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
