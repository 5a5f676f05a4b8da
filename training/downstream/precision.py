"""UPOS accuracy at 1% with the elmo component in each precision (``precision``: fp32, bf16, int8;
spacy_elmo/kernels/precision.py): the +ELMo tagger of spacy_elmo.training.downstream.tasks, trained and evaluated with
the same biLM pipeline, data, budget and seeds, the frozen component's matmuls in fp32, bf16 or int8.
Writes metrics/downstream/precision.json and the plot bench/results/downstream-precision.png.

    python -m spacy_elmo.training.downstream.precision --data corpus/downstream \
        --elmo pipelines/elmo-downstream --seeds 3

The fp32 runs are those of ``tasks upos 1 elmo`` (upos-1-elmo; finished seeds are reused, as tasks
does); bf16 and int8 train as upos-1-elmo-bf16 and upos-1-elmo-int8, from a copy of the pipeline with
the precision set (pipeline.with_precision: spaCy keeps a sourced component's saved settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import typer

from spacy_elmo.cli.tasks import precision_parameter
from spacy_elmo.kernels.precision import PRECISIONS

from ..loop.curve import plots_here
from .metrics import METRICS, pyplot, save_metrics, save_plot
from .tasks import check_run, run, run_name

TASK, SIZE, VARIANT = "upos", 1, "elmo"
REFERENCE = "fp32"


def summary(runs: Dict[str, Dict], pipeline: str, note: str = "") -> Dict:
    """precision.json from each precision's task result (tasks.run): per precision the mean, the
    sample standard deviation, the seed scores, the difference of the mean to fp32's in points and
    the training minutes per seed (None for a seed trained before and not timed)."""
    reference = runs[REFERENCE]["score"]
    return {
        "task": TASK,
        "size": SIZE,
        "pipeline": pipeline,
        "note": note,
        "precisions": {
            precision: {
                "run": run_name(TASK, SIZE, VARIANT, precision),
                "score": result["score"],
                "score_std": result["score_std"],
                "seed_scores": result["seed_scores"],
                "difference_points": 100 * (result["score"] - reference),
                "train_minutes": result["train_minutes"],
            }
            for precision, result in runs.items()
        },
    }


def plot(result: Dict, path: Path) -> Path:
    """UPOS test accuracy per precision: each seed, and the mean ± sample standard deviation, with
    fp32's mean as the reference line."""
    per_precision = result["precisions"]
    names = list(per_precision)
    fig, ax = pyplot().subplots(figsize=(5.5, 3.6))
    for x, name in enumerate(names):
        entry = per_precision[name]
        seeds = [100 * s for s in entry["seed_scores"]]
        ax.scatter([x + 0.15] * len(seeds), seeds, color="grey", s=14, zorder=3, label="seeds" if x == 0 else None)
        mean = 100 * entry["score"]
        label = "mean ± std" if x == 0 else None
        ax.errorbar(x, mean, yerr=100 * entry["score_std"], fmt="o", color="tab:blue", capsize=6, label=label)
    ax.axhline(100 * per_precision[REFERENCE]["score"], color="tab:orange", linestyle=":", label="fp32 mean")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylabel("UPOS test accuracy (%)")
    ax.set_title(f"UPOS at {result['size']}% with the elmo component in each precision (mean ± std)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_plot(fig, path)


def check_precisions(precisions: Optional[List[str]]) -> List[str]:
    """The precisions to run, in PRECISIONS' order, fp32 (the reference) first; a usage error for
    an unknown name."""
    chosen = {precision_parameter(p) for p in precisions or ()} | {REFERENCE}
    return [p for p in PRECISIONS if p in chosen]


def main(
    data: Path = typer.Option(..., help="Output of spacy_elmo.training.downstream.data."),
    elmo: Path = typer.Option(
        ..., help="The pipeline from `python -m spacy_elmo pipeline` (its elmo component in fp32)."
    ),
    runs: Path = typer.Option(Path("runs/downstream")),
    seeds: int = typer.Option(3, help="Train with seeds 0..N-1 in each precision."),
    precisions: List[str] = typer.Option(
        list(PRECISIONS), "--precision", callback=check_precisions, help="The precisions compared (fp32 always)."
    ),
    metrics: Path = typer.Option(METRICS, help="Where the task runs' scores go (tasks --metrics)."),
    output: Path = typer.Option(METRICS / "precision.json", help="The summary."),
    plot_path: Path = typer.Option(Path("bench/results/downstream-precision.png"), "--plot"),
    note: str = typer.Option("", help="What the report should say about this pipeline's biLM."),
) -> None:
    """Train and evaluate upos 1% +ELMo in each precision; summarize against fp32."""
    chosen = check_precisions(precisions)
    drawing = plots_here("downstream.precision writes its results")
    for precision in chosen:
        check_run(TASK, SIZE, VARIANT, elmo, seeds, precision)
    runs_by_precision = {p: run(TASK, SIZE, VARIANT, data, elmo, runs, seeds, p, metrics) for p in chosen}
    result = summary(runs_by_precision, str(elmo), note)
    save_metrics(output.stem, result, output.parent)
    if drawing:
        plot(result, plot_path)
    for name, entry in result["precisions"].items():
        typer.echo(f"{name}: {describe(entry)}")


def describe(entry: Dict) -> str:
    seeds = ", ".join(f"{100 * s:.2f}" for s in entry["seed_scores"])
    return (
        f"{100 * entry['score']:.2f} ± {100 * entry['score_std']:.2f} ({entry['difference_points']:+.2f} points "
        f"against fp32; seeds {seeds})"
    )


if __name__ == "__main__":
    typer.run(main)
