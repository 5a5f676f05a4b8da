"""What a load costs: seconds to make and initialize an `elmo` pipeline on full-size weights, per
precision, each in a new process with an empty user cache (a first load), twice; and what it runs.

    python bench/bench_load.py [--weights DIR] [--label zen3]
    PYTHONPATH=OTHER_CHECKOUT python bench/bench_load.py --out NAME   # another version of the package

Writes bench/results/load-cpu[-LABEL].json (or NAME.json) and prints one line per load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import result_name

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LOADS = 2

ONE_LOAD = r"""
import json, sys, time, warnings
import torch
torch.set_num_threads(int(sys.argv[3]))
import spacy, spacy_elmo
warnings.simplefilter("ignore")
started = time.perf_counter()
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"weights": sys.argv[1], "precision": sys.argv[2], "set_vector_hooks": False})
nlp.initialize()
seconds = time.perf_counter() - started
bilm = nlp.get_pipe("elmo").bilm
print(json.dumps({"precision": sys.argv[2], "seconds": seconds, "runs": bilm.precision,
                  "kernel": bilm.precision_choice.kernel, "package": spacy_elmo.__file__}))
"""


def load_once(weights: str, precision: str, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "SPACY_ELMO_CACHE": cache}
        command = [sys.executable, "-c", ONE_LOAD, weights, precision, str(threads)]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=str(ROOT / "bench" / "out" / "peer-full-bilm"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--label", help="this machine's results under their own name (load-cpu-LABEL)")
    parser.add_argument("--out", help="the results file's name (default load-cpu[-LABEL])")
    args = parser.parse_args()
    loads = [load_once(args.weights, p, args.threads) for p in ("fp32", "bf16", "int8") for _ in range(LOADS)]
    for load in loads:
        print(f"{load['precision']}: {load['seconds']:.2f} s, runs {load['runs']} ({load['kernel']})")
    from spacy_elmo.files import atomic_write_json
    from spacy_elmo.kernels.machine import cpu_description

    name = args.out or result_name("load-cpu", args.label)
    report = {"machine": cpu_description(), "date": time.strftime("%Y-%m-%d"), "loads": loads}
    atomic_write_json(RESULTS / f"{name}.json", report)


if __name__ == "__main__":
    main()
