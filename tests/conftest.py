import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

# Imported whole here, before any worker starts: the xdist controller imports a warning's module to
# show a warning a worker sent, and imported there while a worker's report arrived, spacy_elmo's
# imports met their own module lock (importlib's _DeadlockError, seen with 3 workers).
import spacy_elmo  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SPACY_ELMO_SHARED", ROOT.parent / "shared"))
# No test reaches a package index: pip in every subprocess stays offline, and so does the
# `python -m build` that spaCy's `package` runs (offline it fails, and spaCy falls back to setuptools
# here). The matrix's install into an empty venv is the one test that asks the index, on purpose.
os.environ["PIP_NO_INDEX"] = "1"
# Ray's usage statistics off, for Ray started here and in every subprocess: with them on, Ray Data's
# executor thread queries a Prometheus on localhost:9090 after each run and logs the failure with its
# traceback while later tests run; on Python 3.11, formatting that traceback (ast.parse) beside a test's own
# ast.parse broke the test with "AST constructor recursion depth mismatch" (CPython gh-106905).
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
FIXTURE = SHARED / "fixtures" / "elmo-allennlp"
pytest_plugins = ["suite_plugin", "pytester", "served_schema"]  # served_schema: serve's answers checked against its API


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is missing: tests read shared data from ../shared (or $SPACY_ELMO_SHARED)")
    return path


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return _require(FIXTURE)


@pytest.fixture(scope="session")
def fixture_sentences(fixture_dir):
    """3 streams of 10 tokenized sentences."""
    streams = json.loads((fixture_dir / "sentences.json").read_text())
    return [[sentence.split() for sentence in stream] for stream in streams]


@pytest.fixture(scope="session")
def session_fixture_bilm(fixture_dir):
    from spacy_elmo import import_original

    return import_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")


@pytest.fixture
def fixture_bilm(session_fixture_bilm):
    """The fixture's biLM, loaded once for the session: a BiLM is data, which running it leaves as
    it was (tests/test_runner.py holds that), so every test may share it."""
    return session_fixture_bilm


@pytest.fixture
def fixture_runner(session_fixture_bilm):
    """An exact fp32 runner of the fixture's biLM, each test's own (its token cache, carried state)."""
    from spacy_elmo import BiLMRunner

    return BiLMRunner(session_fixture_bilm)


@pytest.fixture
def seeded():
    torch.manual_seed(1234)
    return 1234


def random_bilm(preset="tiny", **overrides):
    """A BiLM with random weights (biases too, so every parameter matters), in eval mode."""
    from spacy_elmo import BiLM, BiLMConfig

    bilm = BiLM(BiLMConfig.preset(preset, **overrides))
    with torch.no_grad():
        for name, param in bilm.named_parameters():
            if name.endswith("bias") or "embedding" in name:
                param.normal_(0, 0.3)
        bilm.char_encoder.embedding.weight[0] = 0
    return bilm.eval()


@pytest.fixture(scope="session")
def tiny_weights(tmp_path_factory):
    """A native biLM directory with random tiny weights."""
    from spacy_elmo import save_bilm

    torch.manual_seed(99)
    return save_bilm(random_bilm(), tmp_path_factory.mktemp("weights") / "tiny")


def with_this_checkout() -> dict:
    """The environment for a subprocess (``python -m spacy ...``) that imports spacy_elmo from this
    checkout, wherever the package is installed."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_report(*arguments: str) -> str:
    """spacy_elmo.training.downstream.report's command with ``--output RESULTS.md --results out`` and
    ``arguments``, in the working directory; the RESULTS.md it wrote."""
    import typer
    from typer.testing import CliRunner

    from spacy_elmo.training.downstream import report

    app = typer.Typer()
    app.command()(report.main)
    result = CliRunner().invoke(app, ["--output", "RESULTS.md", "--results", "out", *arguments])
    assert result.exit_code == 0, result.output
    return Path("RESULTS.md").read_text()


def make_nlp(weights, sentencizer=True, **config):
    import spacy

    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights), **config})
    nlp.initialize()
    return nlp


@pytest.fixture(scope="session")
def tiny_elmo_pipeline(tiny_weights, tmp_path_factory) -> Path:
    """A saved pipeline (sentencizer, elmo) with the tiny random biLM, L+1 = 3 layers of 2P = 32:
    what a training config sources as ``paths.elmo``."""
    path = tmp_path_factory.mktemp("pipelines") / "elmo"
    make_nlp(tiny_weights, sentence_cache_tokens=10000).to_disk(path)
    return path


@pytest.fixture(scope="session")
def upos_corpus(tmp_path_factory) -> Path:
    """A .spacy file of 40 sentences with UPOS tags (two sentences, repeated)."""
    import spacy
    from spacy.tokens import Doc, DocBin

    vocab = spacy.blank("en").vocab
    sentences = [
        ("The cat sat on the mat .", "DET NOUN VERB ADP DET NOUN PUNCT"),
        ("Dogs run fast .", "NOUN VERB ADV PUNCT"),
    ]
    docs = []
    for text, tags in sentences * 20:
        words = text.split()
        doc = Doc(vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1))
        for token, tag in zip(doc, tags.split(), strict=True):
            token.tag_ = tag
        docs.append(doc)
    path = tmp_path_factory.mktemp("corpus") / "upos.spacy"
    DocBin(docs=docs).to_disk(path)
    return path


class Ran(NamedTuple):
    returncode: int
    stdout: str  # what it printed, on one line (messages wrap at the terminal width)
    crash: str  # an exception that escaped the command (a traceback for a user), "" where none did


def run_cli(*args):
    """`python -m spacy_elmo ARGS`, run by the command line's own app in this process (the
    same code as the module's, without a process start per call)."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, list(map(str, args)))
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    return Ran(result.exit_code, " ".join(result.output.split()), repr(escaped) if escaped else "")


@pytest.fixture(scope="session")
def fork_hosts():
    """Hosts that run a command a test would run as ``python ...`` in a forked child, without
    importing torch, spaCy and spacy_elmo again (tests/fork_host.py); the first started when a test
    first asks."""
    from fork_host import ForkHosts

    hosts = ForkHosts()
    yield hosts
    hosts.close()


@pytest.fixture
def forked_steps(fork_hosts, monkeypatch):
    """weasel (``spacy project run``) runs each step's ``python ...`` in a child forked from a host
    (tests/fork_host.py): a process of its own, as weasel's would be, with this process's
    environment and folder, without importing torch, spaCy and spacy_elmo again. What the step
    printed is printed here, and a failed step ends the run as weasel ends it (its status)."""
    import shlex

    import weasel.cli.run

    def run_commands(commands, silent=False, dry=False, capture=False):
        for line in commands:
            python, *command = shlex.split(line)
            assert python == "python", line
            if not silent:
                print(f"Running command: {shlex.join([sys.executable, *command])}")
            if dry:
                continue
            done = fork_hosts.run(command, os.environ, timeout=600)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            if done.returncode:
                raise SystemExit(done.returncode)

    monkeypatch.setattr(weasel.cli.run, "run_commands", run_commands)


@pytest.fixture(scope="session")
def bench_smokes(tmp_path_factory, fork_hosts):
    """Every bench/ script's smoke run declared by a test module (tests/bench_runner.py), started at
    the first test that asks for one."""
    from bench_runner import SmokeRuns

    runs = SmokeRuns(tmp_path_factory.mktemp("bench-smokes"), fork_hosts)
    yield runs
    runs.close()


def setup_extras() -> dict:
    """setup.py's extras_require as setup.py computes it (run with setuptools' ``setup`` recorded):
    extra -> its requirement strings."""
    import runpy
    from unittest import mock

    with mock.patch("setuptools.setup") as setup:
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return setup.call_args.kwargs["extras_require"]
