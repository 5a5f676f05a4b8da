"""Run a training module on N GPUs: torchrun for N > 1, a plain process otherwise (CPU or one GPU).

python -m spacy_elmo.training.launch 4 spacy_elmo.training.pretrain CONFIG --output RUN ...
"""

from __future__ import annotations

import os
import subprocess
import sys


def command(gpus: int, module: str, arguments: list) -> list:
    if gpus > 1:
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
    return [sys.executable, "-m", module, *arguments]


def main(argv: list) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python -m spacy_elmo.training.launch N_GPUS MODULE [ARGS...]", file=sys.stderr)
        return 2
    gpus, module, arguments = int(argv[0]), argv[1], argv[2:]
    env = dict(os.environ)
    if gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""  # 0 GPUs asked for: stay on the CPU even where there are some
    return subprocess.call(command(gpus, module, arguments), env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
