"""``info``: a native biLM's configuration and size, or what each precision runs on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from wasabi import msg

from ..network.config import BiLMConfig, ConfigError
from ..weights.native import WeightsError, load_bilm
from .app import app, describe_bilm
from .failure import fail

if TYPE_CHECKING:
    from ..kernels.advice import Advice


@app.command()
def info(
    path: Optional[Path] = typer.Argument(None, help="A native biLM directory."),
    machine: bool = typer.Option(
        False,
        "--machine",
        help="What this machine runs for each precision (for the biLM given, else the original model's shapes): "
        "the kernel and why, and its speed against fp32 measured now at the model's shapes (kept as advice: a "
        "later load in a precision measured slower than fp32 warns; what runs never depends on it).",
    ),
) -> None:
    """Show a native biLM's configuration and size, or (--machine) what each precision runs here."""
    if path is None and not machine:
        fail("Give a biLM directory, or --machine", fix="python -m spacy_elmo info --help")
    bilm = None
    if path is not None:
        try:
            bilm = load_bilm(path)
        except (WeightsError, ConfigError) as err:
            fail("Cannot load the biLM", err)
    if machine:
        config = bilm.config if bilm is not None else BiLMConfig.preset("original")
        _machine_report(config, "this biLM" if bilm is not None else "the original model")
    if bilm is not None and not machine:
        msg.info(describe_bilm(bilm))
        print(json.dumps(bilm.config.to_dict(), indent=2))


def _machine_report(config: BiLMConfig, model: str) -> None:
    """One row per precision (and device): what runs, through which kernel, why, on which
    features, and its speed against fp32 measured now; then the timings."""
    import torch

    from ..kernels import advice
    from ..kernels.machine import cpu_description

    rows, measured = advice.machine_report(config.kernel_shapes())
    msg.info(f"{cpu_description()}; torch {torch.__version__}; {torch.get_num_threads()} threads; kernels for {model}")
    header = ("device", "precision", "runs", "kernel", "x fp32 (1 sentence / batch)", "CPU features", "why")
    msg.table(rows, header=header, divider=True)
    for device, speed in measured:
        _timings_table(device, speed)


def _timings_table(device: str, speed: "Advice") -> None:
    """ms per call of each timed site, fp32 and the precision."""
    labels = list(speed.timings)
    sites = list(speed.timings[labels[0]])
    rows = [(site, *(f"{speed.timings[label].get(site, float('nan')):.3f}" for label in labels)) for site in sites]
    msg.text(f"{device}, {speed.precision}: ms per call at this model's shapes (fastest of several rounds)")
    msg.table(rows, header=("site", *labels), divider=True)
