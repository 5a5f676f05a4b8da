"""UPOS with the elmo component in reduced precision (spacy_elmo.training.downstream.precision): the precision
reaches the component that spacy train sources, the runs are named apart from fp32's, and the
summary, plot and RESULTS.md section follow from the scores."""

import json
from pathlib import Path

import numpy as np
import pytest
import spacy
import typer
from conftest import run_report, with_this_checkout
from typer.testing import CliRunner

from spacy_elmo.cli import tasks as task_commands
from spacy_elmo.cli.tasks import pipeline as source_pipeline_command
from spacy_elmo.pipeline.component import Elmo
from spacy_elmo.tasks.shipped_configs import config_path
from spacy_elmo.training.downstream import precision, report, tasks
from spacy_elmo.training.downstream.pipeline import with_precision

UPOS_ELMO = config_path("upos-elmo")


def precisions_seen_in_training(monkeypatch, config_overrides, output: Path) -> set:
    """spacy train (in this process) of the shipped +ELMo UPOS config; the precisions the elmo
    component ran its biLM in while training and evaluating on dev."""
    from spacy.cli.train import train

    seen = set()
    predict = Elmo.predict

    def spied(self, docs):
        layers = predict(self, docs)
        seen.add(self.runner.precision)
        return layers

    monkeypatch.setattr(Elmo, "predict", spied)
    train(UPOS_ELMO, output, overrides={"training.max_steps": 10, "training.eval_frequency": 5, **config_overrides})
    return seen


@pytest.mark.slow
def test_the_precision_reaches_the_sourced_component_only_through_the_pipeline(
    tiny_elmo_pipeline, upos_corpus, tmp_path, monkeypatch
):
    data = {"paths.train": str(upos_corpus), "paths.dev": str(upos_corpus)}
    ignored = {**data, "paths.elmo": str(tiny_elmo_pipeline), "components.elmo.precision": "int8"}
    assert precisions_seen_in_training(monkeypatch, ignored, tmp_path / "ignored") == {"fp32"}, (
        "spaCy drops settings given beside `source`: the reason for pipeline.with_precision"
    )

    int8 = with_precision(tiny_elmo_pipeline, "int8", tmp_path / "elmo-int8")
    assert precisions_seen_in_training(monkeypatch, {**data, "paths.elmo": str(int8)}, tmp_path / "int8") == {"int8"}
    trained = spacy.load(tmp_path / "int8" / "model-best")
    trained("The cat sat on the mat .")
    assert trained.get_pipe("elmo").settings.precision == "int8" and trained.get_pipe("elmo").runner.precision == "int8"
    source, copy = spacy.load(tiny_elmo_pipeline), spacy.load(int8)
    assert source.get_pipe("elmo").settings.precision == "fp32", "the source pipeline is left as it was"
    weights = [p.detach().numpy() for p in source.get_pipe("elmo").bilm.parameters()]
    assert all(
        np.array_equal(a, b.detach().numpy())
        for a, b in zip(weights, copy.get_pipe("elmo").bilm.parameters(), strict=True)
    )
    assert copy.get_pipe("elmo").settings.sentence_cache_tokens == 10000, "the other settings are kept"


def test_run_names_set_reduced_precisions_apart():
    assert tasks.run_name("upos", 1, "elmo") == tasks.run_name("upos", 1, "elmo", "fp32") == "upos-1-elmo"
    assert tasks.run_name("upos", 1, "elmo", "bf16") == "upos-1-elmo-bf16"
    assert tasks.run_name("upos", 1, "elmo", "int8") == "upos-1-elmo-int8"


@pytest.mark.slow
def test_a_task_run_in_int8_trains_apart_and_is_reused(tiny_elmo_pipeline, upos_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", with_this_checkout()["PYTHONPATH"])  # for spacy train and evaluate
    monkeypatch.setitem(tasks.BUDGETS, ("upos", 1), (10, 5))
    data = tmp_path / "data"
    data.mkdir()
    for name in ("upos-train-1", "upos-dev", "upos-test"):
        (data / f"{name}.spacy").write_bytes(upos_corpus.read_bytes())
    runs, metrics = tmp_path / "runs", tmp_path / "metrics"
    result = tasks.run("upos", 1, "elmo", data, tiny_elmo_pipeline, runs, 1, "int8", metrics)
    assert result["precision"] == "int8" and len(result["train_minutes"]) == 1 and result["train_minutes"][0] > 0
    assert json.loads((metrics / "upos-1-elmo-int8.json").read_text()) == result
    assert (metrics / "seeds" / "upos-1-elmo-int8-seed0.test.json").exists()
    assert (runs / "upos-1-elmo-int8" / "model-best").exists() and not (runs / "upos-1-elmo").exists()
    evaluated = spacy.load(runs / "upos-1-elmo-int8" / "model-best")
    assert evaluated.get_pipe("elmo").settings.precision == "int8", "spacy evaluate ran the model in int8 too"

    monkeypatch.setattr(tasks, "_train_seed", lambda *args: pytest.fail("a finished seed was trained again"))
    again = tasks.run("upos", 1, "elmo", data, tiny_elmo_pipeline, runs, 1, "int8", metrics)
    assert again["seed_scores"] == result["seed_scores"] and again["train_minutes"] == result["train_minutes"]


def test_a_trained_model_in_another_precision_is_an_error(tmp_path):
    for name, setting in (("int8", 'precision = "int8"'), ("older", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.cfg").write_text(f'[components]\n\n[components.elmo]\nfactory = "elmo"\n{setting}\n')
    assert tasks._trained_precision([tmp_path / "int8"], "int8") == "int8"
    assert tasks._trained_precision([tmp_path / "older"], "fp32") == "fp32", "before the setting, fp32 was all"
    with pytest.raises(RuntimeError, match=r"does not run in fp32: \{'.*int8': 'int8'\}"):
        tasks._trained_precision([tmp_path / "older", tmp_path / "int8"], "fp32")


def task_result(seed_scores, minutes=1.0):
    return {
        "score": float(np.mean(seed_scores)),
        "score_std": float(np.std(seed_scores, ddof=1)) if len(seed_scores) > 1 else 0.0,
        "seed_scores": seed_scores,
        "train_minutes": [minutes] * len(seed_scores),
    }


RESULTS = {
    "fp32": task_result([0.840, 0.843, 0.846]),
    "bf16": task_result([0.841, 0.842, 0.847], 0.9),
    "int8": task_result([0.820, 0.823, 0.826], 0.8),
}


def test_the_summary_gives_means_spreads_and_differences_to_fp32(tmp_path):
    result = precision.summary(RESULTS, "pipelines/elmo-downstream", "a note")
    assert result["pipeline"] == "pipelines/elmo-downstream" and result["note"] == "a note"
    entries = result["precisions"]
    assert list(entries) == ["fp32", "bf16", "int8"]
    assert entries["int8"]["run"] == "upos-1-elmo-int8" and entries["fp32"]["run"] == "upos-1-elmo"
    assert entries["fp32"]["difference_points"] == 0
    assert entries["int8"]["difference_points"] == pytest.approx(-2.0)
    assert entries["bf16"]["score_std"] == pytest.approx(np.std([0.841, 0.842, 0.847], ddof=1))
    assert entries["bf16"]["seed_scores"] == [0.841, 0.842, 0.847] and entries["bf16"]["train_minutes"] == [0.9] * 3
    assert precision.plot(result, tmp_path / "plot.png").stat().st_size > 10000


def test_the_command_runs_every_precision_with_the_same_seeds_and_writes_its_files(tmp_path, monkeypatch):
    calls = []

    def fake_run(task, size, variant, data, elmo, runs, seeds, chosen, metrics):
        calls.append((task, size, variant, data, elmo, runs, seeds, chosen, metrics))
        return RESULTS[chosen]

    monkeypatch.setattr(precision, "run", fake_run)
    app = typer.Typer()
    app.command()(precision.main)
    arguments = ["--data", "data", "--elmo", "elmo", "--runs", "runs", "--seeds", "3", "--metrics", "scores"]
    arguments += ["--output", str(tmp_path / "out" / "precision.json"), "--plot", str(tmp_path / "plot.png")]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert [call[7] for call in calls] == ["fp32", "bf16", "int8"]
    assert {call[:7] + call[8:] for call in calls} == {
        ("upos", 1, "elmo", Path("data"), Path("elmo"), Path("runs"), 3, Path("scores"))
    }
    written = json.loads((tmp_path / "out" / "precision.json").read_text())
    assert written == precision.summary(RESULTS, "elmo")
    assert (tmp_path / "plot.png").exists() and "int8: 82.30 ± 0.30 (-2.00 points against fp32" in result.output

    calls.clear()
    only = CliRunner().invoke(app, [*arguments, "--precision", "int8"])
    assert only.exit_code == 0, only.output
    assert [call[7] for call in calls] == ["fp32", "int8"], "fp32, the reference, always runs"


def unboxed(output: str) -> str:
    """A usage error's text without the box and line breaks typer draws around it."""
    return " ".join(output.replace("│", " ").split())


@pytest.mark.parametrize(
    "command, arguments",
    [
        (precision.main, ["--data", "d", "--elmo", "e", "--precision", "fp16"]),
        (tasks.main, ["upos", "1", "elmo", "--data", "d", "--elmo", "e", "--precision", "fp16"]),
        (source_pipeline_command, ["bilm", "out", "--precision", "fp16"]),
    ],
)
def test_an_unknown_precision_is_a_usage_error_that_names_the_choices(command, arguments, monkeypatch):
    monkeypatch.setattr(tasks, "run", lambda *args: pytest.fail("ran despite a bad precision"))
    monkeypatch.setattr(task_commands, "save_source_pipeline", lambda *args: pytest.fail("ran despite a bad precision"))
    app = typer.Typer()
    app.command()(command)
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2
    assert "precision must be one of ('fp32', 'bf16', 'int8'), got 'fp16'" in unboxed(result.output)


def test_a_reduced_precision_baseline_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(tasks, "run", lambda *args: pytest.fail("ran a baseline in int8"))
    app = typer.Typer()
    app.command()(tasks.main)
    result = CliRunner().invoke(app, ["upos", "1", "baseline", "--data", "d", "--precision", "int8"])
    assert result.exit_code == 2 and "sets the elmo component's precision: +ELMo runs only" in unboxed(result.output)


def run_record(task, size, variant, seed_scores, **extra):
    return {"task": task, "size": size, "variant": variant, **task_result(seed_scores), **extra}


def test_report_section_7_from_the_precision_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    metrics = tmp_path / "metrics" / "downstream"
    metrics.mkdir(parents=True)
    for name, record in {
        "upos-1-baseline": run_record("upos", 1, "baseline", [0.78, 0.79, 0.80]),
        "upos-1-elmo": run_record("upos", 1, "elmo", [0.840, 0.843, 0.846], layer_weights=[0.3, 0.4, 0.3], gamma=1.0),
        "upos-1-elmo-int8": run_record(
            "upos", 1, "elmo", [0.820, 0.823, 0.826], layer_weights=[0.5, 0.2, 0.3], gamma=0.5, precision="int8"
        ),
    }.items():
        (metrics / f"{name}.json").write_text(json.dumps(record))
    summary = precision.summary(RESULTS, str(tmp_path / "pipelines" / "elmo-downstream"), "a biLM like the other.")
    (metrics / "precision.json").write_text(json.dumps(summary))
    text = run_report()
    section = text[text.index("## 7. UPOS at 1% with reduced-precision ELMo") :]
    assert "The same biLM pipeline (" in section and "budget and seeds were used for all 3 precisions" in section
    assert "elmo-downstream: a biLM like the other." in section
    assert "| fp32 | 3 | 84.30 ± 0.30 | +0.00 | 84.00, 84.30, 84.60 | 1.0 |" in section
    assert "| bf16 | 3 | 84.33 ± 0.32 | +0.03 | 84.10, 84.20, 84.70 | 0.9 |" in section
    assert "| int8 | 3 | 82.30 ± 0.30 | -2.00 | 82.00, 82.30, 82.60 | 0.8 |" in section
    assert "bf16 +0.03 points, within the spread (0.32)" in section
    assert "int8 -2.00 points, lower by more than the spread (0.30)" in section
    assert "With these seeds, int8 costs accuracy beyond seed-to-seed variation." in section
    assert text.count("- UPOS 1%: softmax(s)") == 1, "the int8 run is section 7's, not section 4's"
    assert "| 1% | 3 | 79.00 ± 1.00 | 84.30 ± 0.30 | +5.30 |" in text
    written = json.loads((tmp_path / "out" / "downstream.json").read_text())
    assert written["precision"] == summary and "upos-1-elmo-int8" not in written["runs"]


def test_report_section_7_from_a_recorded_downstream_json_beside_its_other_sections(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    near = {"fp32": RESULTS["fp32"], "int8": task_result([0.838, 0.842, 0.845], None)}
    recorded = {
        "runs": {"upos-1-baseline": run_record("upos", 1, "baseline", [0.78, 0.79, 0.80])},
        "precision": precision.summary(near, "pipelines/elmo-downstream"),
        "bilm": {"description": "a recorded biLM."},
    }
    recorded["runs"]["upos-1-elmo"] = run_record("upos", 1, "elmo", [0.840, 0.843, 0.846])
    (tmp_path / "recorded.json").write_text(json.dumps(recorded))
    text = run_report("--recorded", "recorded.json")
    assert "| 1% | 3 | 79.00 ± 1.00 | 84.30 ± 0.30 | +5.30 |" in text
    assert "| int8 | 3 | 84.17 ± 0.35 | -0.13 | 83.80, 84.20, 84.50 | - |" in text, "untimed seeds: no minutes"
    assert "int8 -0.13 points, within the spread (0.35). With these seeds, reduced precision costs no UPOS " in text


def test_with_one_seed_the_verdict_says_there_is_no_spread():
    one = {name: task_result(result["seed_scores"][:1]) for name, result in RESULTS.items()}
    section = report.precision_section(precision.summary(one, "p"), Path("missing.png"), Path("."))
    assert "With one seed there is no seed-to-seed spread" in section and "| int8 | 1 | 82.00 | -2.00 |" in section
