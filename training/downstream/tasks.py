"""The task models: ``spacy train`` of one shipped configuration (TASK-VARIANT: ``spacy_elmo.tasks``)
once per seed, each model then scored by ``spacy evaluate`` on the test split; the mean over seeds goes to
metrics/downstream/TASK-SIZE-VARIANT.json, with the layer weights the +ELMo models learned.

    python -m spacy_elmo.training.downstream.tasks upos 1 elmo --data corpus/downstream \
        --elmo pipelines/elmo-downstream --seeds 3

upos: UPOS accuracy with 1%, 10% or 100% of the training sentences; ner: entity F1. The baseline
and +ELMo runs of a (task, size) have the same training budget (BUDGETS). ``--precision bf16|int8``
runs the frozen elmo component in that precision (training and evaluation), as TASK-SIZE-elmo-PRECISION.
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

from spacy_elmo.cli.tasks import precision_parameter
from spacy_elmo.tasks.shipped_configs import config_path

from .metrics import METRICS, load_metrics, save_metrics
from .pipeline import with_precision

# Training budgets per (task, size): (max_steps, eval_frequency), the same for the baseline and +ELMo.
BUDGETS = {("upos", 1): (800, 50), ("upos", 10): (2000, 100), ("upos", 100): (4000, 200), ("ner", 100): (3000, 200)}
VARIANTS = ("baseline", "elmo")


class Task(NamedTuple):
    component: str  # the pipe whose tok2vec holds the ELMo task mix
    score: str  # its score in spacy evaluate's output
    train_file: str  # in --data; {size}: the percentage of the training sentences


TASKS = {"upos": Task("tagger", "upos_acc", "upos-train-{size}.spacy"), "ner": Task("ner", "ents_f", "ner-train.spacy")}


def main(
    task: str,
    size: int,
    variant: str,
    data: Path = typer.Option(..., help="Output of spacy_elmo.training.downstream.data."),
    elmo: Optional[Path] = typer.Option(None, help="The pipeline from `python -m spacy_elmo pipeline` (+ELMo runs)."),
    runs: Path = typer.Option(Path("runs/downstream")),
    seeds: int = typer.Option(1, help="Train with seeds 0..N-1; the score is their mean test score."),
    precision: str = typer.Option(
        "fp32",
        callback=precision_parameter,
        help="The elmo component's precision (+ELMo runs): fp32, bf16 or int8; runs and scores of bf16 and int8 "
        "are named TASK-SIZE-elmo-PRECISION.",
    ),
    metrics: Path = typer.Option(METRICS, help="Where the scores go (NAME.json, and seeds/ per seed)."),
) -> None:
    """spacy train one configuration (once per seed), then spacy evaluate each model on the test split.
    A seed whose model and test scores exist already is not trained again."""
    check_run(task, size, variant, elmo, seeds, precision)
    result = run(task, size, variant, data, elmo, runs, seeds, precision, metrics)
    scores = ", ".join(f"{s:.4f}" for s in result["seed_scores"])
    typer.echo(f"{run_name(task, size, variant, precision)}: {result['score']:.4f} (seeds: {scores})")


def check_run(task: str, size: int, variant: str, elmo: Optional[Path], seeds: int, precision: str = "fp32") -> None:
    """A usage error unless (task, size, variant) is a known run and the options fit it."""
    if (task, size) not in BUDGETS or variant not in VARIANTS:
        raise typer.BadParameter(
            f"unknown run {task} {size} {variant}; choose from {sorted(BUDGETS)} x {'|'.join(VARIANTS)}."
        )
    if variant == "elmo" and elmo is None:
        raise typer.BadParameter("+ELMo runs need --elmo PIPELINE.")
    if seeds < 1:
        raise typer.BadParameter(f"--seeds must be at least 1, got {seeds}.")
    precision_parameter(precision)
    if precision != "fp32" and variant != "elmo":
        raise typer.BadParameter(f"--precision {precision} sets the elmo component's precision: +ELMo runs only.")


def run_name(task: str, size: int, variant: str, precision: str = "fp32") -> str:
    """The name of a configuration's runs and scores: TASK-SIZE-VARIANT, and -PRECISION after it for
    an elmo component in reduced precision (fp32 keeps the plain name)."""
    name = f"{task}-{size}-{variant}"
    return name if precision == "fp32" else f"{name}-{precision}"


def run(
    task: str,
    size: int,
    variant: str,
    data: Path,
    elmo: Optional[Path],
    runs: Path,
    seeds: int,
    precision: str = "fp32",
    metrics: Path = METRICS,
) -> Dict:
    """Train and evaluate seeds 0..seeds-1 (reusing finished ones) and save their mean as
    ``metrics/NAME.json``; the saved result. With a reduced ``precision`` the elmo component is
    sourced from a copy of ``elmo`` with that precision set (``pipeline.with_precision``, in
    RUNS/pipelines/): spaCy keeps a sourced component's saved settings."""
    name = run_name(task, size, variant, precision)
    previous = load_metrics(name, metrics).get("train_minutes", [])
    finished = [_is_finished(runs, metrics, name, seed) for seed in range(seeds)]
    source = elmo
    if precision != "fp32" and not all(finished):
        source = with_precision(elmo, precision, runs / "pipelines" / f"{elmo.name}-{precision}")
    per_seed = []
    for seed in range(seeds):
        if finished[seed]:
            minutes = previous[seed] if seed < len(previous) else None
        else:
            output, scores = _run_dir(runs, name, seed), _scores_path(metrics, name, seed)
            minutes = _train_seed(task, size, variant, data, source, output, scores, seed)
        per_seed.append((json.loads(_scores_path(metrics, name, seed).read_text()), minutes))
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
        models = [_run_dir(runs, name, seed) / "model-best" for seed in range(seeds)]
        result["precision"] = _trained_precision(models, precision)
        mixes = [learned_mix(model) for model in models]
        result["layer_weights"] = [float(w) for w in np.mean([weights for weights, _ in mixes], axis=0)]
        result["gamma"] = float(np.mean([gamma for _, gamma in mixes]))
    save_metrics(name, result, metrics)
    return result


def _run_dir(runs: Path, name: str, seed: int) -> Path:
    return runs / (name if seed == 0 else f"{name}-seed{seed}")


def _scores_path(metrics: Path, name: str, seed: int) -> Path:
    return metrics / "seeds" / f"{name}-seed{seed}.test.json"


def _is_finished(runs: Path, metrics: Path, name: str, seed: int) -> bool:
    return _scores_path(metrics, name, seed).exists() and (_run_dir(runs, name, seed) / "model-best").exists()


def _trained_precision(models: List[Path], expected: str) -> str:
    """The precision of the elmo component of the trained models (their config.cfg: what spacy
    evaluate ran and what training ran); an error unless it is ``expected`` in every one."""
    from spacy.util import load_config

    found = {  # a config from before the setting existed ran in fp32, the only precision then
        str(model): load_config(model / "config.cfg")["components"]["elmo"].get("precision", "fp32") for model in models
    }
    wrong = {model: value for model, value in found.items() if value != expected}
    if wrong:
        raise RuntimeError(f"the elmo component of these models does not run in {expected}: {wrong}")
    return expected


def _train_seed(
    task: str, size: int, variant: str, data: Path, elmo: Optional[Path], output: Path, scores_path: Path, seed: int
) -> float:
    """Train one seed into ``output``, evaluate its best model into ``scores_path``; the training minutes."""
    config = config_path(f"{task}-{variant}")
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
    return minutes


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

    from spacy_elmo.pipeline.task_mix import mix_weights, task_mixes

    nlp = spacy.load(model_path)
    for _, component in nlp.pipeline:
        for mix in task_mixes(component.model) if hasattr(component, "model") else ():
            weights, gamma = mix_weights(mix)
            return [float(w) for w in weights], gamma
    raise ValueError(f"{model_path} has no ELMo task mix.")


if __name__ == "__main__":
    typer.run(main)
