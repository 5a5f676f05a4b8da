"""The spaCy project workflow, end to end on a tiny configuration (a slice of the built-in text,
the tiny preset, a few steps), in English and in Bulgarian, in a copy of the project so the
checkout stays clean."""

import json
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
import spacy
import srsly

from spacy_elmo import BiLMConfig, load_bilm
from spacy_elmo.training.loop.train_config import TrainConfig
from spacy_elmo.training.vocab import Vocabulary

ROOT = Path(__file__).resolve().parents[1]


TINY = [
    "--vars.text_docs=12",
    "--vars.preset=tiny",
    "--vars.max_steps=4",
    "--vars.max_minutes=0",
    "--vars.vocab_size=800",
]


def copy_project(tmp_path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "project.yml", project)
    shutil.copytree(ROOT / "training", project / "training", ignore=shutil.ignore_patterns("__pycache__"))
    return project


class Finished(NamedTuple):
    """How a ``spacy project run`` ended: its exit code and what it and its steps printed."""

    returncode: int
    output: str


def run_project(capfd, project: Path, command: str, *overrides: str, dry: bool = False) -> Finished:
    """``spacy project run COMMAND PROJECT --vars...`` through weasel's ``project_run``, what that
    command runs: each step's script is still a process of its own (``forked_steps``), the driver
    is this one."""
    from weasel.cli.run import project_run
    from weasel.util import parse_config_overrides

    capfd.readouterr()
    settings = parse_config_overrides(list(overrides))
    try:
        project_run(project, command, overrides=settings, dry=dry, parent_command="python -m spacy")
        code = 0
    except SystemExit as exit:  # a failed step ends the run as the command would
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
    printed = capfd.readouterr()
    return Finished(code, printed.out + printed.err)


def test_the_workflow_trains_the_sweeps_best_candidate_on_the_clock():
    """The default preset and settings are those of the lowest test perplexity in the sweep's
    results (`python bench/pretrain.py sweep`), and the learning rate and evaluations follow the clock."""
    variables = srsly.read_yaml(ROOT / "project.yml")["vars"]
    settings = TrainConfig.load(ROOT / variables["config"], [f"max_minutes={variables['max_minutes']}"])
    sweep = json.loads((ROOT / "bench" / "results" / "sweep-cpu.json").read_text())
    best = min(sweep["candidates"], key=lambda candidate: candidate["test"])["settings"]
    assert variables["preset"] == settings.preset and variables["max_minutes"] == sweep["minutes"]
    assert BiLMConfig.preset(settings.preset) == BiLMConfig.preset(best["preset"], **best.get("model", {}))
    for name in (
        "softmax",
        "n_samples",
        "optimizer",
        "lr",
        "lr_schedule",
        "warmup",
        "final_lr",
        "batch_tokens",
        "dropout",
    ):
        assert getattr(settings, name) == best[name], name
    assert settings.eval_every == 0 and settings.eval_minutes > 0


@pytest.mark.slow
def test_workflow_all_on_a_tiny_configuration(tmp_path, monkeypatch, capfd, forked_steps):
    project, temp = copy_project(tmp_path), tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the steps' temporary files
    result = run_project(capfd, project, "all", *TINY)
    assert result.returncode == 0, result.output[-6000:]
    assert not list(temp.glob("elmo-demo-*")), "the demo removes the wheel it installed for itself"

    manifest = json.loads((project / "corpus" / "manifest.json").read_text())
    assert all(manifest["splits"][split]["sentences"] > 0 for split in ("train", "dev", "test"))
    assert len(Vocabulary.load(project / "corpus" / "vocab.txt")) == 800
    assert load_bilm(project / "runs" / "elmo" / "bilm").config.projection_dim == 16
    perplexity = json.loads((project / "metrics" / "perplexity.json").read_text())
    assert perplexity["perplexity"] > 1 and perplexity["unigram_perplexity"] > 1
    nlp = spacy.load(project / "pipelines" / "elmo")
    assert nlp.pipe_names == ["sentencizer", "elmo"] and nlp("Works. Twice.")._.elmo_data.shape == (3, 4, 32)
    assert list((project / "packages").glob("en_elmo_sample-0.0.1/dist/*.whl"))
    demo = (project / "metrics" / "demo.txt").read_text()
    assert "Loaded en_elmo_sample" in demo and "sentence similarities" in demo

    again = run_project(capfd, project, "all", *TINY, dry=True)  # dry: what a rerun would skip, without the demo's run
    assert again.returncode == 0
    assert again.output.count("Skipping") >= 6, "finished steps are skipped on a rerun"


@pytest.mark.slow
@pytest.mark.matrix  # 27 s: the default run keeps the English workflow; `nox -s matrix` runs this one
def test_workflow_all_in_bulgarian_on_a_tiny_configuration(tmp_path, capfd, forked_steps):
    project = copy_project(tmp_path)
    result = run_project(capfd, project, "all", "--vars.lang=bg", *TINY)
    assert result.returncode == 0, result.output[-6000:]

    text = (project / "assets" / "text" / "bg" / "wikipedia-sample.txt").read_text()
    assert text.count("\n\n") == 11 and "Григорианският календар" in text
    manifest = json.loads((project / "corpus" / "manifest.json").read_text())
    assert manifest["pipeline"] == "bg" and all(
        manifest["splits"][s]["sentences"] > 0 for s in ("train", "dev", "test")
    )
    assert any("календар" in line for line in (project / "corpus" / "vocab.txt").read_text().splitlines())
    perplexity = json.loads((project / "metrics" / "perplexity.json").read_text())
    assert perplexity["perplexity"] > 1 and perplexity["unigram_perplexity"] > 1
    nlp = spacy.load(project / "pipelines" / "elmo")
    assert nlp.lang == "bg" and nlp("Работи. Два пъти.")._.elmo_data.shape == (3, 5, 32)
    assert list((project / "packages").glob("bg_elmo_sample-0.0.1/dist/*.whl"))
    demo = (project / "metrics" / "demo.txt").read_text()
    assert "Loaded bg_elmo_sample" in demo and "topped up with" in demo
    assert '"България е малка страна в Европа." ~ "От друга страна, статията е твърде кратка."' in demo


def test_text_step_without_built_in_text_asks_for_text_and_is_skipped_with_it(tmp_path, capfd, forked_steps):
    """The step's command as project.yml gives it: it asks for text where it has none, and is
    skipped where text is given."""
    project = copy_project(tmp_path)
    missing = run_project(capfd, project, "text", "--vars.lang=de")
    assert missing.returncode != 0 and "No built-in text for language 'de'" in missing.output
    assert "--vars.text PATH" in missing.output
    given = run_project(capfd, project, "text", "--vars.lang=de", "--vars.text=my-text")
    assert given.returncode == 0 and "no built-in text needed" in given.output
    assert not (project / "assets" / "text" / "de").exists()
