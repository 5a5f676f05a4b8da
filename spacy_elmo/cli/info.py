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

if TYPE_CHECKING:
    from ..kernels.plan import KernelPlan


@app.command()
def info(
    path: Optional[Path] = typer.Argument(None, help="A native biLM directory."),
    machine: bool = typer.Option(
        False,
        "--machine",
        help="What this machine runs for each precision (for the biLM given, else the original model's shapes): "
        "the kernel, why, its measured speed against fp32 and the timings it was chosen on.",
    ),
) -> None:
    """Show a native biLM's configuration and size, or (--machine) what each precision runs here."""
    if path is None and not machine:
        msg.fail("Give a biLM directory, or --machine", exits=1)
    bilm = None
    if path is not None:
        try:
            bilm = load_bilm(path)
        except (WeightsError, ConfigError) as err:
            msg.fail("Cannot load the biLM", str(err), exits=1)
    if machine:
        config = bilm.config if bilm is not None else BiLMConfig.preset("original")
        _machine_report(config, "this biLM" if bilm is not None else "the original model")
    if bilm is not None and not machine:
        msg.info(describe_bilm(bilm))
        print(json.dumps(bilm.config.to_dict(), indent=2))


def _machine_report(config: BiLMConfig, model: str) -> None:
    """One row per precision (and device): what runs, through which kernel, how fast against fp32,
    why, on which features; then the timings the plans were made from."""
    import warnings

    import torch

    from ..kernels import plan as kernel_plan
    from ..kernels.kernel_choice import PrecisionFallback
    from ..kernels.machine import cpu_description

    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    rows, plans = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionFallback)  # the table says it
        for device in devices:
            for precision in ("fp32", "bf16", "int8"):
                plan = kernel_plan.plan_for(config.kernel_shapes(), precision, device)
                choice = plan.choice
                runs = choice.runs if not choice.fell_back else "fp32 (fallback)"
                features = ", ".join(choice.features) or "-"
                rows.append(
                    (device.type, precision, runs, choice.kernel, kernel_plan.ratio_text(plan), features, choice.reason)
                )
                plans.append((device.type, plan))
    msg.info(f"{cpu_description()}; torch {torch.__version__}; kernels for {model}")
    header = ("device", "precision", "runs", "kernel", "x fp32 (1 sentence / batch)", "CPU features", "why")
    msg.table(rows, header=header, divider=True)
    for device_type, plan in plans:
        if plan.timings:
            _timings_table(device_type, plan)


def _timings_table(device: str, plan: "KernelPlan") -> None:
    """ms per call of each timed site, per candidate (fp32 first)."""
    labels = list(plan.timings)
    sites = list(plan.timings[labels[0]])
    rows = [(site, *(f"{plan.timings[label].get(site, float('nan')):.3f}" for label in labels)) for site in sites]
    cached = " (from the cache)" if plan.cached else ""
    msg.text(f"{device}, {plan.choice.requested}: ms per call at this model's shapes{cached}")
    msg.table(rows, header=("site", *labels), divider=True)
