import json
import math
import os
import re
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_nlp
from fork_host import ForkedChild
from served_process import free_port

from spacy_elmo import load_bilm
from spacy_elmo.training.corpus import prepare_corpus, read_sentences
from spacy_elmo.training.evaluate import evaluate
from spacy_elmo.training.evaluate import main as evaluate_cli
from spacy_elmo.training.loop.batching import TokenTable, make_batch, open_streams
from spacy_elmo.training.loop.train_config import TrainConfig
from spacy_elmo.training.pretrain import train
from spacy_elmo.training.vocab import Vocabulary

ROOT = Path(__file__).resolve().parents[1]
STORY = [
    "The cat sat on the mat. The dog sat on the log.",
    "A bird flew over the house. The cat watched the bird.",
    "The dog barked at the cat, and the cat ran away.",
    "Birds sing in the morning. Dogs sleep in the afternoon.",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny corpus: 4 training shards, dev = test = the same text."""
    root = tmp_path_factory.mktemp("corpus")
    text = root / "text.txt"
    text.write_text("\n\n".join(STORY * 6) + "\n", encoding="utf-8")
    prepare_corpus(root / "corpus", {"train": [text], "dev": [text], "test": [text]}, shard_size=12)
    Vocabulary.from_sentences(read_sentences(root / "corpus" / "train"), max_size=100).save(root / "vocab.txt")
    return root


def config(corpus, **changes):
    settings = dict(
        corpus=str(corpus / "corpus"),
        vocab=str(corpus / "vocab.txt"),
        preset="tiny",
        dropout=0.0,
        batch_tokens=120,
        eval_every=1000,
        eval_tokens=10**6,
        log_every=1,
        checkpoint_every=1000,
        seed=3,
        threads=1,
    )
    settings.update(changes)
    return TrainConfig(**settings)


def log_lines(run: Path):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def losses(run: Path):
    """(step, tokens, loss) of every logged step."""
    return [(line["step"], line["tokens"], line["loss"]) for line in log_lines(run) if "loss" in line]


def test_corpus_and_vocabulary(corpus):
    manifest = json.loads((corpus / "corpus" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["shards"] == 4 and manifest["splits"]["train"]["sentences"] == 42
    assert next(read_sentences(corpus / "corpus" / "train")) == ["The", "cat", "sat", "on", "the", "mat", "."]
    vocab = Vocabulary.load(corpus / "vocab.txt")
    assert vocab.words[:4] == ["<S>", "</S>", "<UNK>", "the"] and vocab.counts[0] == 42


def test_invalid_utf8_lines_are_skipped_and_counted(tmp_path):
    source = tmp_path / "mixed.txt"
    source.write_bytes("good line .\n".encode() + b"bad \xff\xfe line\n" + "another good one .\n".encode())
    manifest = prepare_corpus(tmp_path / "out", {"train": [source]})
    assert manifest["splits"]["train"]["invalid_lines_skipped"] == 1
    assert list(read_sentences(tmp_path / "out" / "train")) == [["good", "line", "."], ["another", "good", "one", "."]]


def test_batches_are_deterministic_and_within_budget(corpus):
    table = TokenTable(Vocabulary.load(corpus / "vocab.txt"))
    first = open_streams(corpus / "corpus" / "train", [0, 1], 2, 120, seed=1, table=table)
    again = open_streams(corpus / "corpus" / "train", [0, 1], 2, 120, seed=1, table=table)
    for stream, twin in zip(first, again, strict=True):
        for _ in range(15):  # across an epoch boundary
            batch = stream.next_batch()
            assert np.array_equal(batch, twin.next_batch())
            lengths = stream.sentences.lengths[batch] + 2
            assert lengths.sum() <= 60 or len(batch) == 1
    batch = make_batch([first[0].sentences.sentence(0)], table)
    assert batch.type_ids[0] == 0 and batch.type_ids[-1] == 1 and batch.n_targets == len(batch.type_ids) - 1


def test_tiny_model_overfits_tiny_corpus(corpus, tmp_path):
    """Dev perplexity under 5 after 60 steps (dev is the training text)."""
    state = train(
        config(corpus, optimizer="adam", lr=0.01, max_steps=60, eval_every=60, batch_tokens=400), tmp_path / "run"
    )
    dev = [line for line in log_lines(tmp_path / "run") if "dev_ppl" in line][-1]
    assert dev["dev_ppl"] < 5, dev
    assert state.best_dev == dev["dev_ppl"]
    assert (tmp_path / "run" / "curve.png").stat().st_size > 1000


def test_an_evaluation_redraws_the_curve_once_30_s_have_passed_and_the_last_one_always(tmp_path, monkeypatch):
    """docs/pretraining.md's 30 s, on the curve's own clock: since the start, then since the last drawing."""
    from spacy_elmo.training.loop import curve

    now, drawn = [1000.0], []
    monkeypatch.setattr(curve, "plot_learning_curve", lambda log, png: drawn.append((now[0], log.name, png.name)))
    run_curve = curve.RunCurve(tmp_path, clock=lambda: now[0])
    for moment, last, expected in [
        (1029.9, False, []),
        (1030.0, False, [1030.0]),
        (1059.9, False, [1030.0]),
        (1060.0, False, [1030.0, 1060.0]),
        (1061.0, True, [1030.0, 1060.0, 1061.0]),
    ]:
        now[0] = moment
        run_curve.evaluated(last)
        assert [at for at, _, _ in drawn] == expected, moment
    assert {(log, png) for _, log, png in drawn} == {("log.jsonl", "curve.png")}


def test_a_run_that_evaluates_every_step_draws_its_final_curve_with_every_evaluation(corpus, tmp_path, monkeypatch):
    """Its last drawing comes after its last evaluation: every dev point is on the final curve."""
    from spacy_elmo.training.loop import curve

    drawn = []  # at each drawing, the dev evaluations the log had

    def draw(log, png):
        drawn.append(sum("dev_ppl" in line for line in log_lines(log.parent)))

    monkeypatch.setattr(curve, "plot_learning_curve", draw)
    train(config(corpus, max_steps=4, eval_every=1), tmp_path / "run")
    evaluations = sum("dev_ppl" in line for line in log_lines(tmp_path / "run"))
    assert evaluations == 4 and drawn and drawn[-1] == evaluations, drawn


def test_without_matplotlib_a_run_says_so_at_once_and_trains_evaluates_and_checkpoints(corpus, tmp_path, monkeypatch):
    """A missing train extra costs the picture, not the run: the warning comes before the first
    step, and the run's dev evaluations, checkpoints and weights are all there."""
    from spacy_elmo.training.loop.curve import PlotSkipped

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    run = tmp_path / "run"
    with pytest.warns(PlotSkipped, match=r"matplotlib is not installed .*train extra.*matplotlib>=3\.5") as seen:
        train(config(corpus, max_steps=4, eval_every=2, checkpoint_every=2), run)
    # only PlotSkipped counts: on a GPU, cuDNN's LSTM warns too
    assert sum(issubclass(w.category, PlotSkipped) for w in seen) == 1, "said once, when the run starts"
    assert [line["step"] for line in log_lines(run) if "dev_ppl" in line] == [2, 4]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-00000004"
    assert load_bilm(run / "bilm").config.projection_dim > 0, "the final weights are written"
    assert not (run / "curve.png").exists()


def test_final_figure_is_the_whole_dev_split_as_evaluate_gives_it(corpus, tmp_path):
    """Evaluations during training name their subset; the last line is the whole dev split, equal
    to what spacy_elmo.training.evaluate gives for the run."""
    from spacy_elmo.training.evaluate import evaluate

    run = tmp_path / "run"
    state = train(config(corpus, max_steps=3, eval_every=1, eval_tokens=60), run)
    lines = log_lines(run)
    subset = [line for line in lines if "dev_ppl" in line]
    assert subset and all(line["dev_text"] == "subset: the first 60 tokens of dev" for line in subset)
    final = lines[-1]
    assert final["final_dev_text"] == "the whole dev split" and state.final_dev == final["final_dev_ppl"]
    assert final["final_dev_predictions_per_direction"] > subset[-1]["dev_predictions_per_direction"]
    scores = evaluate(run, read_sentences(corpus / "corpus" / "dev"), batch_tokens=120, device="cpu")
    assert scores["predictions_per_direction"] == final["final_dev_predictions_per_direction"]
    assert scores["perplexity"] == pytest.approx(final["final_dev_ppl"], rel=1e-5)


def test_dev_perplexity_runs_the_path_training_runs(corpus, tmp_path, monkeypatch):
    """Evaluation computes the loss that training computes: the differentiable path, never the
    inference kernels (which the caller would have to name)."""
    from spacy_elmo.kernels.backends import Backend, TritonBackend
    from spacy_elmo.network.char_encoder import CharEncoder
    from spacy_elmo.network.runner import BiLMRunner

    def refuse(*args, **kwargs):
        raise AssertionError("pretraining or its dev perplexity ran the inference kernels")

    # every inference call goes through a runner's two steps, and they through a backend
    for owner, step in (
        (BiLMRunner, "token_representations"),
        (BiLMRunner, "contextualize"),
        (CharEncoder, "represent"),
        (Backend, "contextualize"),
        (TritonBackend, "contextualize"),
    ):
        monkeypatch.setattr(owner, step, refuse)
    state = train(config(corpus, max_steps=2, eval_every=1), tmp_path / "run")
    assert [line["dev_ppl"] for line in log_lines(tmp_path / "run") if "dev_ppl" in line] and state.final_dev > 0


def test_warmup_cosine_over_steps_rises_then_falls_to_the_final_rate(corpus, tmp_path):
    settings = dict(optimizer="adam", lr=0.01, lr_schedule="warmup-cosine", warmup=0.25, final_lr=0.1)
    train(config(corpus, max_steps=12, **settings), tmp_path / "run")
    rates = [line["lr"] for line in log_lines(tmp_path / "run") if "lr" in line]
    assert len(rates) == 12
    assert rates[:3] == pytest.approx([0.01 / 3, 0.02 / 3, 0.01]), "warm-up: a third of lr per step to step 3"
    assert all(a > b for a, b in pairwise(rates[2:])), rates
    assert rates[-1] == pytest.approx(0.001)


class ReadsClock:
    """A clock that moves 50 ms each time it is read: a time budget then ends after the same number
    of reads on any machine, busy or quiet."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        self.now += 0.05
        return self.now


def test_warmup_cosine_over_minutes_ends_at_the_final_rate_when_time_is_up(corpus, tmp_path, monkeypatch):
    """The budget is time: the step that finds the time up is taken at the final rate."""
    from spacy_elmo.training.loop import step

    monkeypatch.setattr(step, "time", ReadsClock())
    settings = dict(optimizer="adam", lr=0.01, lr_schedule="warmup-cosine", warmup=0.3, final_lr=0.2)
    state = train(config(corpus, max_minutes=0.03, **settings), tmp_path / "run")
    rates = [line["lr"] for line in log_lines(tmp_path / "run") if "lr" in line]
    assert state.elapsed >= 0.03 * 60 and len(rates) == state.step > 3
    assert rates[0] < max(rates) and rates[-1] < max(rates)
    assert rates[-1] == pytest.approx(0.002)


def test_patience_stops_a_run_whose_dev_perplexity_no_longer_improves(corpus, tmp_path):
    """lr 0: the first evaluation is the best; after 2 more without a gain the next step stops."""
    state = train(config(corpus, max_steps=50, eval_every=1, eval_tokens=60, lr=0.0, patience=2), tmp_path / "run")
    assert state.step == 4 and state.evaluations_since_best >= 2
    stops = [line["stopped"] for line in log_lines(tmp_path / "run") if "stopped" in line]
    assert stops == ["no new best dev perplexity in 2 evaluations"]
    learning = train(
        config(corpus, max_steps=6, eval_every=1, eval_tokens=60, optimizer="adam", lr=0.01, patience=2),
        tmp_path / "on",
    )
    assert learning.step == 6, "a run that keeps improving runs to its budget"


OVERSHOOTING = dict(max_steps=10, eval_every=1, eval_tokens=60, optimizer="adam", lr=0.1)


def test_a_run_past_its_best_ends_on_the_weights_of_its_best_dev_evaluation(corpus, tmp_path):
    """adam at lr 0.1 overshoots: dev perplexity is lowest after a few steps, then rises. The run's
    result (RUN/bilm, what a run directory evaluates and continues from) is that best step's. On the
    CPU: the trajectory is the CPU's (on an H100 this run's dev perplexity fell again at its last step)."""
    run = tmp_path / "run"
    state = train(config(corpus, **OVERSHOOTING, patience=3, device="cpu"), run)
    lines = log_lines(run)
    dev = {line["step"]: line["dev_ppl"] for line in lines if "dev_ppl" in line}
    best_step = min(dev, key=dev.get)
    assert best_step < state.step and dev[state.step] > dev[best_step] * 1.2, dev
    assert [line["final_weights_from_step"] for line in lines if "final_weights_from_step" in line] == [best_step]
    checkpoints = run / "checkpoints"
    best_weights = checkpoints / f"best-step-{best_step:08d}"
    assert (checkpoints / "best").read_text().strip() == best_weights.name
    assert json.loads((best_weights / "best.json").read_text())["dev_ppl"] == dev[best_step]
    assert len(list(checkpoints.glob("best-step-*"))) == 1, "each new best replaces the one before"
    last_weights = checkpoints / (checkpoints / "latest").read_text().strip()
    final, best, last = (load_bilm(path).state_dict() for path in (run / "bilm", best_weights, last_weights))
    assert all(torch.equal(final[k], best[k]) for k in final)
    assert not all(torch.equal(final[k], last[k]) for k in final), "the last step's weights differ"
    scores = evaluate(run, list(read_sentences(corpus / "corpus" / "dev")), device="cpu")  # where it trained
    assert scores["model"] == str(best_weights)
    assert scores["perplexity"] == pytest.approx(state.final_dev, rel=1e-5)


def test_a_resumed_run_continues_from_its_last_step_not_its_best(corpus, tmp_path):
    straight = train(config(corpus, **OVERSHOOTING), tmp_path / "straight")
    train(config(corpus, **{**OVERSHOOTING, "max_steps": 6}), tmp_path / "stopped")
    resumed = train(config(corpus, **OVERSHOOTING), tmp_path / "stopped")
    assert losses(tmp_path / "straight") == losses(tmp_path / "stopped")
    assert resumed.best_dev == straight.best_dev and resumed.final_dev == straight.final_dev


@pytest.mark.parametrize("eval_minutes, evaluations", [(1e-6, 4), (10.0, 1)])
def test_evaluation_by_minutes_paces_the_dev_evaluations(corpus, tmp_path, eval_minutes, evaluations):
    """eval_every=0: evaluate by the clock only (here every step, or only at the end)."""
    train(config(corpus, max_steps=4, eval_every=0, eval_minutes=eval_minutes, eval_tokens=60), tmp_path / "run")
    assert len([line for line in log_lines(tmp_path / "run") if "dev_ppl" in line]) == evaluations


def test_sampled_softmax_training_lowers_full_softmax_perplexity(corpus, tmp_path):
    settings = dict(softmax="sampled", n_samples=16, optimizer="adam", lr=0.01, eval_every=60, batch_tokens=400)
    train(config(corpus, max_steps=60, **settings), tmp_path / "run")
    dev = [line["dev_ppl"] for line in log_lines(tmp_path / "run") if "dev_ppl" in line]
    vocab_size = len(Vocabulary.load(corpus / "vocab.txt"))
    assert dev[-1] < vocab_size / 4, f"full-softmax dev perplexity {dev[-1]:.1f} vs uniform {vocab_size}"


def test_resume_after_a_stop_continues_the_same_run(corpus, tmp_path):
    straight = train(config(corpus, max_steps=8), tmp_path / "straight")
    train(config(corpus, max_steps=5), tmp_path / "stopped")
    resumed = train(config(corpus, max_steps=8), tmp_path / "stopped")
    assert losses(tmp_path / "straight") == losses(tmp_path / "stopped")
    assert resumed.step == straight.step == 8
    a, b = load_bilm(tmp_path / "straight" / "bilm"), load_bilm(tmp_path / "stopped" / "bilm")
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


def test_the_device_setting_picks_where_a_run_trains(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"device must be one of \('auto', 'cpu', 'cuda'\), got 'tpu'\."):
        config(corpus, device="tpu")
    train(config(corpus, max_steps=2, device="cpu"), tmp_path / "cpu")
    assert not [line for line in log_lines(tmp_path / "cpu") if "gpu_peak_mb" in line], "trained on the CPU"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' was asked for, but torch sees no CUDA GPU here"):
            train(config(corpus, max_steps=2, device="cuda"), tmp_path / "cuda")
        return
    train(config(corpus, max_steps=2), tmp_path / "auto")
    assert all(line["gpu_peak_mb"] > 0 for line in log_lines(tmp_path / "auto") if "loss" in line), "on the GPU"


def test_resuming_with_other_data_streams_is_refused(corpus, tmp_path):
    train(config(corpus, max_steps=2), tmp_path / "run")
    with pytest.raises(ValueError, match="written by a run with 1 data streams; resume it with --set data_streams=1"):
        train(config(corpus, max_steps=4, data_streams=2), tmp_path / "run")


def test_a_setting_of_the_wrong_type_is_an_error_naming_it_its_value_and_the_type(tmp_path):
    import typer
    from typer.testing import CliRunner

    from spacy_elmo.training.pretrain import app

    with pytest.raises(typer.BadParameter, match=r"Training setting lr must be a number, got 'abc'\."):
        TrainConfig.load(None, ["lr=abc"])
    with pytest.raises(typer.BadParameter, match=r"max_steps must be an integer, got 1\.5\."):
        TrainConfig.load(None, ["max_steps=1.5"])
    with pytest.raises(typer.BadParameter, match=r"bf16 must be true or false, got 1\."):
        TrainConfig.load(None, ["bf16=1"])
    (tmp_path / "config.json").write_text('{"init_from": 3}')
    with pytest.raises(typer.BadParameter, match=r"init_from must be a string or null, got 3\."):
        TrainConfig.load(tmp_path / "config.json", [])
    loaded = TrainConfig.load(None, ["max_minutes=9", "init_from=null", 'model={"n_layers": 1}'])
    assert (loaded.max_minutes, loaded.init_from, loaded.model) == (9, None, {"n_layers": 1}), "an integer is a number"
    result = CliRunner().invoke(app, ["--output", str(tmp_path / "run"), "--set", "lr=abc"])
    assert result.exit_code == 2 and "lr must be a number, got 'abc'" in result.output
    assert not (tmp_path / "run").exists()


def test_unknown_optimizer_or_softmax_names_the_known_ones():
    from spacy_elmo.network.bilm import BiLM
    from spacy_elmo.network.config import BiLMConfig
    from spacy_elmo.training.loop.objective import LanguageModelLoss
    from spacy_elmo.training.loop.optimizers import make_optimizer

    with pytest.raises(ValueError, match=r"optimizer must be one of \('adagrad', 'adam'\), got 'sgd'\."):
        make_optimizer("sgd", [torch.nn.Parameter(torch.zeros(2))], 0.1)
    bilm = BiLM(BiLMConfig.preset("tiny", vocab_size=10))
    with pytest.raises(ValueError, match=r"softmax must be one of \('full', 'sampled'\), got 'hierarchical'\."):
        LanguageModelLoss(bilm, "hierarchical")


def pretrain_command(corpus, run, **settings):
    overrides = [f"--set={k}={json.dumps(v)}" for k, v in vars(config(corpus, **settings)).items()]
    return [sys.executable, "-m", "spacy_elmo.training.pretrain", "--output", str(run), *overrides]


def logged_steps(run: Path) -> list:
    """The steps of the training lines in ``run``'s log so far; a line still being written left out."""
    log = run / "log.jsonl"
    lines = log.read_text().split("\n")[:-1] if log.exists() else []  # the last piece: unfinished, or ""
    return [record["step"] for record in map(json.loads, lines) if "loss" in record]


def wait_for_logged_step(run: Path, step: int, process: ForkedChild, seconds: float) -> bool:
    """Whether ``run``'s log reaches ``step`` within ``seconds`` (the wait ends where ``process`` exits)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if max(logged_steps(run), default=0) >= step:
            return True
        time.sleep(0.01)
    return max(logged_steps(run), default=0) >= step


def uninterrupted_losses(corpus, tmp_path, **settings):
    """The losses of the run that the interrupted one must reproduce: in this process, as the
    command's own ``train`` runs it (a process of its own only where one is killed)."""
    train(config(corpus, **settings), tmp_path / "straight")
    return losses(tmp_path / "straight")


@pytest.mark.slow
def test_sigkill_and_resume_reproduces_the_uninterrupted_losses(corpus, tmp_path, fork_hosts):
    """The command killed in a child forked from a host (tests/fork_host.py): a process of its own."""
    settings = dict(max_steps=80, checkpoint_every=10)
    expected = uninterrupted_losses(corpus, tmp_path, **settings)
    killed, output = tmp_path / "killed", tmp_path / "killed-output.txt"
    with fork_hosts.lease() as host:
        process = host.start(pretrain_command(corpus, killed, **settings)[1:], os.environ, output, output, str(ROOT))
        # killed once its log shows step 15: past the checkpoint of step 10, so the resume must drop
        # the steps logged after it and run them again
        try:
            reached = wait_for_logged_step(killed, 15, process, seconds=120)
        finally:
            process.kill()
            process.wait(60)
    printed = output.read_text(errors="replace")[-3000:]
    assert reached, f"no step 15 logged within 120 s: {logged_steps(killed)}, exit {process.returncode}: {printed}"
    assert (killed / "checkpoints" / "latest").exists(), "step 10's checkpoint was written before step 15"
    assert 0 < len(losses(killed)) < 80, "killed mid-run"
    train(config(corpus, **settings), killed)  # resumes, as the command run again does
    assert losses(killed) == expected
    assert not list((killed / "checkpoints").glob(".step-*")), "no half-written checkpoint left"


def launcher(nodes: int, processes: int, node_rank: int, port: int) -> list:
    """torchrun for one node of a job: a c10d rendezvous on 127.0.0.1, as on a cluster's head node."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nodes}",
        f"--nproc_per_node={processes}",
        f"--node_rank={node_rank}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        "--rdzv_id=two-node-test",
        "--max_restarts=0",
        "-m",
        "spacy_elmo.training.pretrain",
    ]


def test_the_launcher_runs_a_cpu_or_one_gpu_run_in_its_own_process(tmp_path, monkeypatch):
    """0 GPUs (or 1): the module runs here, as ``python -m`` runs it (its arguments, its exit status),
    with every GPU hidden for 0 and none initialised before; more GPUs: torchrun, one process each."""
    from spacy_elmo.training import launch

    (tmp_path / "recorder.py").write_text(
        "import json, os, sys\n"
        "if __name__ == '__main__':\n"
        f"    record = {{'pid': os.getpid(), 'argv': sys.argv, 'gpus': os.environ['CUDA_VISIBLE_DEVICES']}}\n"
        f"    open({str(tmp_path / 'ran.json')!r}, 'w').write(json.dumps(record))\n"
        "    sys.exit(3)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    if torch.cuda.is_available():  # without a GPU torch never starts CUDA; this process may have, for other tests
        probe = "import torch, spacy_elmo.training.launch; print(torch.cuda.is_initialized())"
        started = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
        assert started.stdout.strip() == "False", f"importing the launcher starts CUDA: {started.stderr[-2000:]}"
    with pytest.raises(SystemExit) as exit:
        launch.main(["0", "recorder", "--output", "run"])
    ran = json.loads((tmp_path / "ran.json").read_text())
    assert exit.value.code == 3 and ran["pid"] == os.getpid() and ran["gpus"] == ""
    assert ran["argv"] == [str(tmp_path / "recorder.py"), "--output", "run"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(SystemExit):
        launch.main(["1", "recorder"])
    one = json.loads((tmp_path / "ran.json").read_text())
    assert one["pid"] == os.getpid() and one["gpus"] == "0", "one GPU: here, the GPUs left as they were"
    assert launch.torchrun_command(4, "recorder", ["--output", "run"])[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
        "-m",
        "recorder",
        "--output",
        "run",
    ]
    assert launch.main(["two", "recorder"]) == 2, "a count of GPUs first"


@pytest.mark.slow
def test_two_processes_train_as_one_and_two_nodes_as_one_node(corpus, tmp_path):
    """2 gloo processes with one data stream each = 1 process running both streams, with the same
    learning rate at every step of the schedule; and torchrun --nnodes 2 (two launchers, one
    process each) = one node with two processes: the same losses, bitwise, and the same weights."""
    settings = dict(max_steps=4, data_streams=2, optimizer="adagrad", lr=0.2, lr_schedule="warmup-cosine", warmup=0.5)
    (tmp_path / "temp").mkdir()  # torch elastic's own folders (torchelastic_*) go there, not in /tmp
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "temp")}
    arguments = lambda run: pretrain_command(corpus, run, **settings)[3:]  # noqa: E731
    train(config(corpus, **settings), tmp_path / "one")  # one process: this one
    one_node = subprocess.run(
        launcher(1, 2, 0, free_port()) + arguments(tmp_path / "one-node"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert one_node.returncode == 0, one_node.stderr[-3000:]
    one, two = load_bilm(tmp_path / "one" / "bilm"), load_bilm(tmp_path / "one-node" / "bilm")
    worst = max(float((one.state_dict()[k] - two.state_dict()[k]).abs().max()) for k in one.state_dict())
    assert worst < 1e-5
    loss_values = lambda run: [loss for _, _, loss in losses(run)]  # noqa: E731
    np.testing.assert_allclose(loss_values(tmp_path / "one"), loss_values(tmp_path / "one-node"), rtol=1e-6)

    rendezvous, logs = free_port(), [tmp_path / f"node-{rank}.log" for rank in (0, 1)]
    nodes = []
    for rank, log in enumerate(logs):  # to files: a pipe read only after the other node ends could fill and block
        with log.open("w") as output:
            command = launcher(2, 1, rank, rendezvous) + arguments(tmp_path / "two-nodes")
            nodes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT))
    try:
        codes = [node.wait(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert codes == [0, 0], "".join(log.read_text()[-2000:] for log in logs)
    assert losses(tmp_path / "two-nodes") == losses(tmp_path / "one-node")
    one, two = load_bilm(tmp_path / "one-node" / "bilm"), load_bilm(tmp_path / "two-nodes" / "bilm")
    assert all(torch.equal(one.state_dict()[k], two.state_dict()[k]) for k in one.state_dict())
    checkpoints = tmp_path / "two-nodes" / "checkpoints"
    trainer = json.loads((checkpoints / (checkpoints / "latest").read_text().strip() / "trainer.json").read_text())
    assert trainer["world"] == 2, "two processes, one on each node"


def test_exported_model_loads_in_the_component(corpus, tmp_path):
    train(config(corpus, max_steps=2), tmp_path / "run")
    exported = load_bilm(tmp_path / "run" / "bilm")
    assert exported.lm_head is None and exported.config.vocab_size == 0
    doc = make_nlp(tmp_path / "run" / "bilm")("The cat sat on the mat.")
    assert doc._.elmo_data.shape == (3, 7, 32) and np.isfinite(doc._.elmo_data).all()


def test_evaluate_reports_perplexities_and_a_unigram_baseline(corpus, tmp_path):
    train(config(corpus, optimizer="adam", lr=0.01, max_steps=40), tmp_path / "run")
    result = evaluate(tmp_path / "run", read_sentences(corpus / "corpus" / "test"))
    assert set(result) >= {"perplexity", "perplexity_forward", "perplexity_backward", "unigram_perplexity", "oov_rate"}
    assert result["perplexity"] == pytest.approx(
        np.sqrt(result["perplexity_forward"] * result["perplexity_backward"]), rel=1e-9
    )
    assert result["perplexity"] < result["unigram_perplexity"]
    assert result["oov_rate"] == 0.0
    # --split test: the test split of the corpus the run was trained on.
    evaluate_cli(
        tmp_path / "run", text=None, shards=None, split="test", output=tmp_path / "ppl.json", pipeline="en", vocab=None
    )
    assert json.loads((tmp_path / "ppl.json").read_text())["perplexity"] == pytest.approx(
        result["perplexity"], rel=1e-12
    )
    with pytest.raises(ValueError, match=r"corpus/no-such-split: no shard"):  # the split named is the one read
        evaluate_cli(
            tmp_path / "run", text=None, shards=None, split="no-such-split", output=None, pipeline="en", vocab=None
        )
    with pytest.raises(ValueError, match="has no LM head"):
        evaluate(tmp_path / "run" / "bilm", [["The", "cat"]], corpus / "vocab.txt")


def test_continue_training_from_converted_original_weights(corpus, tmp_path, fixture_dir):
    from spacy_elmo import import_original, save_bilm

    save_bilm(import_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5"), tmp_path / "original")
    state = train(config(corpus, init_from=str(tmp_path / "original"), max_steps=3, batch_tokens=60), tmp_path / "run")
    continued = load_bilm(tmp_path / "run" / "bilm")
    source = load_bilm(tmp_path / "original")
    assert continued.config.cell_clip == 3.0 and state.step == 3
    assert not torch.equal(continued.forward_layers[1].weight_hh, source.forward_layers[1].weight_hh)


def test_continue_training_an_elmoformanylangs_model_through_its_own_vocabulary(corpus, tmp_path):
    """A model with its own char table and word embedding pretrains, evaluates and exports."""
    from test_efml import write_handmade_model

    from spacy_elmo import import_efml, save_bilm

    (tmp_path / "efml").mkdir()
    save_bilm(import_efml(write_handmade_model(tmp_path / "efml", word_dim=5)), tmp_path / "source")
    state = train(config(corpus, init_from=str(tmp_path / "source"), max_steps=2, batch_tokens=60), tmp_path / "run")
    continued, source = load_bilm(tmp_path / "run" / "bilm"), load_bilm(tmp_path / "source")
    assert state.step == 2 and continued.indexer.to_dict() == source.indexer.to_dict()
    assert not torch.equal(continued.char_encoder.projection.weight, source.char_encoder.projection.weight)
    scores = evaluate(tmp_path / "run", [["The", "cat", "sat"]])
    assert math.isfinite(scores["perplexity"])


def test_full_disk_while_checkpointing_fails_loudly_and_keeps_the_previous_one(corpus, tmp_path, monkeypatch):
    import errno

    import safetensors.torch

    real_save = safetensors.torch.save_file
    calls = []

    def filling_disk(tensors, path, metadata=None):
        calls.append(path)
        if len(calls) > 4:  # the second checkpoint: model, optimizer, rng each call save_file
            with open(path, "wb") as stream:
                stream.write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(tensors, path, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", filling_disk)
    with pytest.raises(
        OSError, match=r"Could not write the checkpoint of step 4 .*No space left on device.*step-00000002, is intact"
    ):
        train(config(corpus, max_steps=6, checkpoint_every=2), tmp_path / "run")
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step-00000002"
    assert not list(checkpoints.glob(".step-*")) and not (checkpoints / "step-00000004").exists()
    resumed = train(config(corpus, max_steps=6, checkpoint_every=2), tmp_path / "run")
    assert resumed.step == 6


def test_non_finite_loss_names_the_step_and_batch(corpus, tmp_path, monkeypatch):
    from spacy_elmo.training.loop.objective import LanguageModelLoss

    real_forward = LanguageModelLoss.forward
    calls = []

    def poisoned(self, batch):
        forward, backward = real_forward(self, batch)
        calls.append(1)
        return (forward * float("nan"), backward) if len(calls) == 3 else (forward, backward)

    monkeypatch.setattr(LanguageModelLoss, "forward", poisoned)
    with pytest.raises(
        FloatingPointError,
        match=r"Non-finite loss at step 3: batch of \d+ sentences, \d+ tokens on this rank \(first: '.+'\)",
    ):
        train(config(corpus, max_steps=5), tmp_path / "run")


CRASH_DURING_CHECKPOINT = """
import os, sys
import safetensors.torch
real_save = safetensors.torch.save_file
calls = []
def crash(tensors, path, metadata=None):
    calls.append(path)
    if len(calls) == 5:  # inside the second checkpoint, after its model file
        with open(path, "wb") as stream:
            stream.write(b"half a file")
        os._exit(137)
    return real_save(tensors, path, metadata=metadata)
safetensors.torch.save_file = crash
from spacy_elmo.training.pretrain import app
app(sys.argv[1:])
"""


@pytest.mark.slow
def test_killed_while_writing_a_checkpoint_resumes_the_same_run(corpus, tmp_path, fork_hosts):
    settings = dict(max_steps=12, checkpoint_every=4)
    expected = uninterrupted_losses(corpus, tmp_path, **settings)
    crashed = tmp_path / "crashed"
    arguments = pretrain_command(corpus, crashed, **settings)[3:]
    died = fork_hosts.run(["-c", CRASH_DURING_CHECKPOINT, *arguments], os.environ, timeout=300, cwd=str(ROOT))
    assert died.returncode == 137, died.stderr[-3000:]
    assert (crashed / "checkpoints" / "latest").read_text().strip() == "step-00000004"
    assert list((crashed / "checkpoints").glob(".step-*")), "the half-written checkpoint is only a temporary"
    train(config(corpus, **settings), crashed)  # resumes, as the command run again does
    assert losses(crashed) == expected
    assert not list((crashed / "checkpoints").glob(".step-*")), "cleaned up on the next checkpoint"


def test_fine_tuning_from_a_run_keeps_its_vocabulary_and_head(corpus, tmp_path):
    """init_from a run directory: its result's body, LM head and vocab.txt (no vocab given)."""
    train(config(corpus, optimizer="adam", lr=0.01, max_steps=30), tmp_path / "run")
    # lr 0: the fine-tuned model must be the source exactly, head included.
    train(
        config(corpus, vocab="", init_from=str(tmp_path / "run"), optimizer="adam", lr=0.0, max_steps=2),
        tmp_path / "tuned",
    )
    test = list(read_sentences(corpus / "corpus" / "test"))
    assert evaluate(tmp_path / "tuned", test)["perplexity"] == evaluate(tmp_path / "run", test)["perplexity"]
    tuned_checkpoint = tmp_path / "tuned" / "checkpoints" / "step-00000002"
    assert (tuned_checkpoint / "vocab.txt").read_text() == (corpus / "vocab.txt").read_text()
    with pytest.raises(ValueError, match="No vocabulary"):
        train(config(corpus, vocab="", max_steps=1), tmp_path / "none")


def test_a_checkpoint_written_before_the_typed_state_resumes_with_its_figures():
    from spacy_elmo.training.loop.run_state import RunState, state_from_checkpoint, state_to_checkpoint

    before = {"step": 7, "tokens": 900, "elapsed": 12.5, "best_dev": 80.1, "streams": {"0": [1, 2]}, "world": 1}
    state, data_streams = state_from_checkpoint(before)  # no data_streams, evaluations_since_best, final_dev
    assert state == RunState(step=7, tokens=900, elapsed=12.5, best_dev=80.1, streams={"0": [1, 2]})
    assert data_streams is None and state.evaluations_since_best == 0
    assert state_from_checkpoint(state_to_checkpoint(state, world=2, data_streams=4)) == (state, 4)
    with pytest.raises(ValueError, match=r"trainer.json lacks \['elapsed', 'step', 'tokens'\]"):
        state_from_checkpoint({"best_dev": 3.0})


@pytest.mark.parametrize(
    "budget, shown",
    [
        ({"max_steps": 500}, "120/500 step"),
        ({"max_minutes": 9.0}, "2/9 min"),
        ({"max_steps": 500, "max_minutes": 9.0}, "24/100 % of the budget"),  # 120 of 500 steps outruns 2 of 9 min
        ({}, "120 step"),
    ],
)
def test_pretraining_shows_its_budget_done_out_of_total(budget, shown):
    """The bar counts what ends the run (steps, minutes, or the larger share of both), so its total
    and ETA are the run's; a run without a budget counts steps."""
    from spacy_elmo.training.loop.run_state import RunState
    from spacy_elmo.training.pretrain import BudgetProgress

    state = RunState()
    progress = BudgetProgress(TrainConfig(**budget), state, disable=False)
    state.step, state.elapsed = 120, 120.0
    progress.advance(state)
    line = str(progress.bar)
    progress.bar.close()
    assert shown in line, line
    assert bool(re.search(r"\[\d\d:\d\d<\d\d:\d\d", line)) == bool(budget), f"an ETA with a budget only: {line}"


def test_every_shipped_pretraining_config_stops_and_the_cpu_one_trains_the_swept_preset():
    """A config run as shipped ends by itself (a time or step budget), and the CPU one trains the
    preset the CPU sweep chose for the workflow (docs/pretraining.md), with the workflow's settings."""
    folder = Path(__file__).resolve().parents[1] / "training" / "configs"
    configs = {path.name: TrainConfig.load(path, []) for path in sorted(folder.glob("*.json"))}
    assert {"pretrain-cpu.json", "pretrain-gpu.json", "pretrain-workflow.json"} <= set(configs)
    assert all(cfg.max_minutes or cfg.max_steps for cfg in configs.values()), {
        name: (cfg.max_minutes, cfg.max_steps) for name, cfg in configs.items()
    }
    cpu, workflow = configs["pretrain-cpu.json"], configs["pretrain-workflow.json"]
    assert cpu.preset == workflow.preset == "mini"
    assert (cpu.lr, cpu.lr_schedule, cpu.optimizer) == (workflow.lr, workflow.lr_schedule, workflow.optimizer)
