"""Run a training module on N GPUs: torchrun for N > 1; otherwise (the CPU or one GPU) in this
process, as ``python -m MODULE`` runs it, so that torch and spaCy are imported once, not twice.

python -m spacy_elmo.training.launch 4 spacy_elmo.training.pretrain CONFIG --output RUN ...
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys


def torchrun_command(gpus: int, module: str, arguments: list) -> list:
    """torchrun on this node, one process per GPU."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={gpus}",
        "-m",
        module,
        *arguments,
    ]


def run_here(module: str, arguments: list) -> None:
    """``python -m MODULE ARGUMENTS`` in this process: its exit status is this process's."""
    sys.argv = [module, *arguments]  # runpy puts the module's file in place of argv[0], as -m does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv: list) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python -m spacy_elmo.training.launch N_GPUS MODULE [ARGS...]", file=sys.stderr)
        return 2
    gpus, module, arguments = int(argv[0]), argv[1], argv[2:]
    if gpus > 1:
        return subprocess.call(torchrun_command(gpus, module, arguments))
    if gpus == 0:
        # Read when CUDA starts, at the first CUDA call: importing spacy_elmo makes none.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # 0 GPUs asked for: stay on the CPU even where there are some
    run_here(module, arguments)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
