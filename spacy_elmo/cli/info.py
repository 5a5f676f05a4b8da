"""``info``: a native biLM's configuration and size, or what each precision runs on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ..network.config import ConfigError
from ..weights.native import WeightsError, load_bilm
from .app import app, describe_bilm


@app.command()
def info(
    path: Optional[Path] = typer.Argument(None, help="A native biLM directory."),
    machine: bool = typer.Option(
        False, "--machine", help="What this machine runs for each precision: the kernel, why, and the CPU features."
    ),
) -> None:
    """Show a native biLM's configuration and size, or (--machine) what each precision runs here."""
    if machine:
        _machine_report()
    if path is None:
        if not machine:
            msg.fail("Give a biLM directory, or --machine", exits=1)
        return
    try:
        bilm = load_bilm(path)
    except (WeightsError, ConfigError) as err:
        msg.fail("Cannot load the biLM", str(err), exits=1)
    msg.info(describe_bilm(bilm))
    print(json.dumps(bilm.config.to_dict(), indent=2))


def _machine_report() -> None:
    """One row per precision (and device): what runs, through which kernel, why, on which features."""
    import warnings

    import torch

    from ..kernels import kernel_choice
    from ..kernels.machine import cpu_description

    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernel_choice.PrecisionFallback)  # the table says it
        for device in devices:
            for precision in ("fp32", "bf16", "int8"):
                choice = kernel_choice.choose(precision, device)
                runs = choice.runs if not choice.fell_back else "fp32 (fallback)"
                rows.append(
                    (device.type, precision, runs, choice.kernel, ", ".join(choice.features) or "-", choice.reason)
                )
    msg.info(f"{cpu_description()}; torch {torch.__version__}")
    msg.table(rows, header=("device", "precision", "runs", "kernel", "CPU features", "why"), divider=True)
