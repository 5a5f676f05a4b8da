"""bench/pretrain.py runs as a user runs it, at a tiny size, on a tiny corpus made here: 3 steps of
the tiny preset for ``perplexity`` and ``speed`` (on the CPU: the GPU's run is the same code); their
results, plots and sections, and each section again from its results file alone, the sweep's from
bench/results/sweep-cpu.json. A training process costs about 5 s here (torch, spaCy, dynamo), so
``sweep``'s own training (``train_candidate``: the same ``train_run`` with a candidate's settings,
then ``evaluate``) is not run here."""

import json
import shutil
from pathlib import Path

import torch
from bench_runner import smoke

STORY = [
    "The cat sat on the mat. The dog sat on the log.",
    "A bird flew over the house. The cat watched the bird.",
    "The dog barked at the cat, and the cat ran away.",
]
TINY = {
    **{"preset": "tiny", "softmax": "sampled", "n_samples": 32, "optimizer": "adam", "lr": 0.01, "dropout": 0.0},
    **{"batch_tokens": 120, "max_steps": 3, "log_every": 1, "eval_every": 1000, "checkpoint_every": 1000},
    **{"eval_tokens": 1000, "threads": 1},
}
SWEEP = Path(__file__).resolve().parents[1] / "bench" / "results" / "sweep-cpu.json"
SPEED = ["--device", "cpu", "--presets", "tiny", "--variants", "fp32", "--steps", "3", "--log-every", "1"]


def tiny_corpus(output: Path) -> list:
    """A prepared corpus with its vocab.txt and a config of the tiny preset for 3 steps, under
    ``output``: the arguments that give them to a run."""
    from spacy_elmo.training.corpus import prepare_corpus, read_sentences
    from spacy_elmo.training.vocab import Vocabulary

    text = output / "text.txt"
    text.write_text("\n\n".join(STORY * 4) + "\n", encoding="utf-8")
    corpus = output / "corpus"
    prepare_corpus(corpus, {"train": [text], "dev": [text], "test": [text]})
    Vocabulary.from_sentences(read_sentences(corpus / "train"), max_size=100).save(corpus / "vocab.txt")
    config = output / "tiny.json"
    config.write_text(json.dumps(TINY))
    return ["--corpus", str(corpus), "--config", str(config)]


def the_sweeps_results(output: Path) -> list:
    (output / "results").mkdir()
    shutil.copy(SWEEP, output / "results")
    return []


PERPLEXITY = smoke(
    "pretrain-perplexity",
    [("pretrain.py", "perplexity", "--minutes", "0")],
    [("pretrain.py", "perplexity", "--render-only")],
    prepare=tiny_corpus,
)
THROUGHPUT = smoke(
    "pretrain-speed",
    [("pretrain.py", "speed", *SPEED)],
    [("pretrain.py", "speed", "--device", "cpu", "--render-only")],
    prepare=tiny_corpus,
)
SWEEP_RENDER = smoke("pretrain-sweep", [], [("pretrain.py", "--render-only")], prepare=the_sweeps_results)
PNG_OF = "![{0}](bench/results/{0}.png)"


def test_perplexity_bench_trains_scores_and_renders_again(bench_smokes):
    run = bench_smokes.outcome(PERPLEXITY)
    trained = run.results("pretrain-cpu")
    assert trained["steps"] == 3 and trained["tokens_per_s_median"] > 0 and trained["config"]["preset"] == "tiny"
    assert trained["valid"]["perplexity"] > 1 and trained["test"]["unigram_perplexity"] > 1 and trained["curve"]
    assert "threads" in trained["machine"] and torch.__version__ in trained["machine"]
    written = run.measured("pretrain:pretrain-cpu")
    given = f"--corpus {run.output / 'corpus'} --config {run.output / 'tiny.json'}"
    assert f"`python bench/pretrain.py perplexity --minutes 0 {given}`" in written
    assert trained["machine"] in written and "(3 steps)" in written
    assert run.is_png("pretrain-cpu") and PNG_OF.format("pretrain-cpu") in written
    assert run.rendered("pretrain:pretrain-cpu") == written


def test_speed_bench_measures_training_throughput_and_renders_again(bench_smokes):
    run = bench_smokes.outcome(THROUGHPUT)
    (row,) = run.results("train-speed-cpu")["rows"]
    assert (row["preset"], row["variant"], row["steps"]) == ("tiny", "fp32", 3) and row["tokens_per_s"] > 0
    assert row["peak_rss_mb"] > 0 and row["warmup_s"] >= 0
    written = run.measured("pretrain:train-speed-cpu")
    given = f"--corpus {run.output / 'corpus'} --config {run.output / 'tiny.json'}"
    assert f"`python bench/pretrain.py speed {' '.join(SPEED)} {given}`" in written
    assert f"| tiny | fp32 | {row['tokens_per_s']:,.0f}" in written
    assert run.is_png("train-speed-cpu") and PNG_OF.format("train-speed-cpu") in written
    assert run.rendered("pretrain:train-speed-cpu") == written


def test_the_sweeps_section_renders_from_its_results(bench_smokes):
    run = bench_smokes.outcome(SWEEP_RENDER)
    sweep = run.rendered("pretrain:sweep-cpu")
    best = min(json.loads(SWEEP.read_text())["candidates"], key=lambda candidate: candidate["test"])
    assert f"| `{best['name']}` |" in sweep and "`python bench/pretrain.py sweep" in sweep
    assert run.is_png("sweep-cpu")
