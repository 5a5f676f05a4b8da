"""The task models: ``spacy train`` of one configuration (training/configs/TASK-VARIANT.cfg) once per
seed, each model then scored by ``spacy evaluate`` on the test split; the mean over seeds goes to
metrics/downstream/TASK-SIZE-VARIANT.json, with the layer weights the +ELMo models learned.

    python -m training.downstream.tasks upos 1 elmo --data corpus/downstream --elmo pipelines/elmo-downstream --seeds 3

upos: UPOS accuracy with 1%, 10% or 100% of the training sentences; ner: entity F1. The baseline
and +ELMo runs of a (task, size) have the same training budget (BUDGETS).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import typer

from .metrics import METRICS, save_metrics

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# Training budgets per (task, size): (max_steps, eval_frequency), the same for the baseline and +ELMo.
BUDGETS = {("upos", 1): (800, 50), ("upos", 10): (2000, 100), ("upos", 100): (4000, 200), ("ner", 100): (3000, 200)}
VARIANTS = ("baseline", "elmo")


class Task(NamedTuple):
    component: str  # the pipe whose tok2vec holds the ELMo task mix
    score: str  # its score in spacy evaluate's output
    train_file: str  # in --data; {size}: the percentage of the training sentences


TASKS = {"upos": Task("tagger", "tag_acc", "upos-train-{size}.spacy"), "ner": Task("ner", "ents_f", "ner-train.spacy")}


def main(
    task: str,
    size: int,
    variant: str,
    data: Path = typer.Option(..., help="Output of training.downstream.data."),
    elmo: Optional[Path] = typer.Option(None, help="The pipeline from training.downstream.pipeline (+ELMo runs)."),
    runs: Path = typer.Option(Path("runs/downstream")),
    seeds: int = typer.Option(1, help="Train with seeds 0..N-1; the score is their mean test score."),
) -> None:
    """spacy train one configuration (once per seed), then spacy evaluate each model on the test split.
    A seed whose model and test scores exist already is not trained again."""
    if (task, size) not in BUDGETS or variant not in VARIANTS:
        raise typer.BadParameter(
            f"unknown run {task} {size} {variant}; choose from {sorted(BUDGETS)} x {'|'.join(VARIANTS)}."
        )
    if variant == "elmo" and elmo is None:
        raise typer.BadParameter("+ELMo runs need --elmo PIPELINE.")
    if seeds < 1:
        raise typer.BadParameter(f"--seeds must be at least 1, got {seeds}.")
    name = f"{task}-{size}-{variant}"
    per_seed = [_train_seed(task, size, variant, data, elmo, runs, seed) for seed in range(seeds)]
    test_scores = [scores[TASKS[task].score] for scores, _ in per_seed]
    result = {
        "task": task,
        "size": size,
        "variant": variant,
        "max_steps": BUDGETS[(task, size)][0],
        "score": float(np.mean(test_scores)),
        "score_std": float(np.std(test_scores, ddof=1)) if seeds > 1 else 0.0,
        "seed_scores": test_scores,
        "train_minutes": [minutes for _, minutes in per_seed],
        "scores": per_seed[0][0],
    }
    if variant == "elmo":
        mixes = [learned_mix(_run_dir(runs, name, seed) / "model-best") for seed in range(seeds)]
        result["layer_weights"] = [float(w) for w in np.mean([weights for weights, _ in mixes], axis=0)]
        result["gamma"] = float(np.mean([gamma for _, gamma in mixes]))
    save_metrics(name, result)
    typer.echo(f"{name}: {result['score']:.4f} (seeds: {', '.join(f'{s:.4f}' for s in test_scores)})")


def _run_dir(runs: Path, name: str, seed: int) -> Path:
    return runs / (name if seed == 0 else f"{name}-seed{seed}")


def _train_seed(
    task: str, size: int, variant: str, data: Path, elmo: Optional[Path], runs: Path, seed: int
) -> Tuple[Dict, Optional[float]]:
    """(spacy evaluate's test scores, training minutes or None when reused) of one seed."""
    name = f"{task}-{size}-{variant}"
    output, scores_path = _run_dir(runs, name, seed), METRICS / "seeds" / f"{name}-seed{seed}.test.json"
    minutes = None
    if not (scores_path.exists() and (output / "model-best").exists()):
        config = CONFIGS / f"{task}-{variant}.cfg"
        started = time.time()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "spacy",
                "train",
                str(config),
                "--output",
                str(output),
                *_overrides(task, size, variant, data, elmo, seed),
            ],
            check=True,
        )
        minutes = (time.time() - started) / 60
        scores_path.parent.mkdir(parents=True, exist_ok=True)
        evaluate = [
            sys.executable,
            "-m",
            "spacy",
            "evaluate",
            str(output / "model-best"),
            str(data / f"{task}-test.spacy"),
            "--output",
            str(scores_path),
        ]
        subprocess.run(evaluate, check=True)
    return json.loads(scores_path.read_text()), minutes


def _overrides(task: str, size: int, variant: str, data: Path, elmo: Optional[Path], seed: int) -> List[str]:
    """spacy train's command-line overrides: the data, the seed, the budget and, for +ELMo, the
    pipeline (the task mix takes the biLM's sizes from its elmo component)."""
    steps, frequency = BUDGETS[(task, size)]
    train_file = data / TASKS[task].train_file.format(size=size)
    overrides = [
        "--paths.train",
        str(train_file),
        "--paths.dev",
        str(data / f"{task}-dev.spacy"),
        "--system.seed",
        str(seed),
        "--training.max_steps",
        str(steps),
        "--training.eval_frequency",
        str(frequency),
        "--training.patience",
        str(steps),
    ]
    if variant == "elmo":
        overrides += ["--paths.elmo", str(elmo)]
    return overrides


def learned_mix(model_path: Path) -> Tuple[List[float], float]:
    """(softmax-normalized layer weights, gamma) of the ELMo task mix in a trained model."""
    import spacy

    from spacy_elmo.task_mix import mix_weights, task_mixes

    nlp = spacy.load(model_path)
    for _, component in nlp.pipeline:
        for mix in task_mixes(component.model) if hasattr(component, "model") else ():
            weights, gamma = mix_weights(mix)
            return [float(w) for w in weights], gamma
    raise ValueError(f"{model_path} has no ELMo task mix.")


if __name__ == "__main__":
    typer.run(main)
