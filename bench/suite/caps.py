"""Lesser CPUs simulated for a benchmark: the kernel caps of tests/simulated_cpus.py, in place
before torch loads (oneDNN, ATen and MKL each read theirs when they load)."""

from __future__ import annotations

import os
import sys
from typing import Optional

from suite.report import ROOT

sys.path.insert(0, str(ROOT / "tests"))
from simulated_cpus import SIMULATED_CPUS, why_not_cap  # noqa: E402,F401  (SIMULATED_CPUS: the scripts' choices)


def run_capped(cap: Optional[str]) -> None:
    """With ``cap``, go on where its environment is already set, else start this script again from
    the top with it; refuse a cap this CPU cannot simulate (a cap only lowers)."""
    if cap is None:
        return
    environment = SIMULATED_CPUS[cap]
    if all(os.environ.get(name) == value for name, value in environment.items()):
        return
    reason = why_not_cap(cap)
    if reason:
        raise SystemExit(f"--cap {cap}: {reason}; a cap only simulates a lesser CPU.")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **environment})
