"""Every command fails in one style on what its user can fix (a wrong path, no network, a bad value):
what was wrong and how to fix it on stderr, exit 1, no traceback; ``--verbose`` (before the command;
the pretraining command's own option) or SPACY_ELMO_TRACEBACK=1 adds the traceback. "No network" is
a URL on a port of 127.0.0.1 where nothing listens."""

import socket
from importlib.util import find_spec

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training import pretrain


def closed_port_url() -> str:
    """A model's URL on a port nothing listens on (bound for a moment, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/model.tar.gz"


UNREACHABLE = ("Could not reach 1 file(s) of the model (no network?)", "then run the same command again")

# command -> (its arguments, NOWHERE: a path that is not there and UNREACHABLE: a URL no one answers;
# what the message says was wrong, the fix it gives)
FAILURES = {
    "convert": (
        ["convert", "NOWHERE/options.json", "NOWHERE/w.hdf5", "OUT"],
        ("options.json: file not found", "download NAME OUTPUT"),
    ),
    "convert-efml": (
        ["convert-efml", "NOWHERE", "OUT"],
        ("no such directory", "give the directory of an ELMoForManyLangs model"),
    ),
    "download": (["download", "UNREACHABLE", "OUT"], UNREACHABLE),
    "package": (["package", "UNREACHABLE", "OUT"], UNREACHABLE),
    "info": (["info", "NOWHERE"], ("no such biLM directory", "a directory with config.json and model.safetensors")),
    "embed": (
        ["embed", "NOWHERE.txt", "OUT", "--weights", "UNREACHABLE"],
        ("NOWHERE.txt: file not found", "give a UTF-8 text file"),
    ),
    "embed-weights": (["embed", "TEXT", "OUT", "--weights", "UNREACHABLE"], UNREACHABLE),
    "serve": (["serve", "UNREACHABLE", "--port", "0"], UNREACHABLE),
    "conllu": (
        ["conllu", "NOWHERE.conllu", "OUT.spacy"],
        ("NOWHERE.conllu", "Give the path of a Universal Dependencies file"),
    ),
    "pipeline": (["pipeline", "UNREACHABLE", "OUT"], UNREACHABLE),
    "config": (["config", "upos-elmo-typo", "OUT.cfg"], ("No shipped config 'upos-elmo-typo'", "the configs are: ")),
    "models": (
        ["models", "--language", "xx"],
        ("No published model in the language 'xx'", "The catalogue's languages"),
    ),
    "pretrain": (
        ["pretrain-cpu", "--output", "OUT", "--set", "vocab=NOWHERE.txt"],
        ("NOWHERE.txt: vocabulary file not found", "run the vocab step first"),
    ),
}


def run(command, arguments, verbose=False, env=None):
    """The command's app (pretraining has its own) on ``arguments``, ``--verbose`` where asked."""
    if command == "pretrain":
        return CliRunner().invoke(pretrain.app, [*arguments, *(["--verbose"] if verbose else [])], env=env)
    return CliRunner().invoke(app, [*(["--verbose"] if verbose else []), *arguments], env=env)


@pytest.fixture
def failing(tmp_path, monkeypatch):
    """``FAILURES``' arguments with their placeholders filled in (a cache of its own for downloads)."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text("The cat sat.\n", encoding="utf-8")
    places = {"NOWHERE": str(tmp_path / "nowhere"), "OUT": str(tmp_path / "out"), "TEXT": str(tmp_path / "text.txt")}
    url = closed_port_url()

    def fill(command):
        if command == "serve" and find_spec("uvicorn") is None:
            pytest.skip("the serve extra is not installed")
        arguments, (wrong, fix) = FAILURES[command]
        filled = [url if arg == "UNREACHABLE" else arg for arg in arguments]
        for placeholder, value in places.items():
            filled = [arg.replace(placeholder, value) for arg in filled]
            wrong = wrong.replace(placeholder, value)
        return filled, wrong, fix

    return fill


def assert_clean_failure(result, wrong, fix):
    stderr = " ".join(result.stderr.split())
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output, result.output
    assert wrong in stderr and fix in stderr, stderr


@pytest.mark.parametrize("command", sorted(FAILURES))
def test_a_failure_the_user_can_fix_says_what_and_how_without_a_traceback(failing, command):
    arguments, wrong, fix = failing(command)
    assert_clean_failure(run(command, arguments), wrong, fix)


@pytest.mark.parametrize("command", sorted(set(FAILURES) - {"models"}))  # models' is a check: no exception to trace
def test_verbose_adds_the_traceback_to_the_message(failing, command):
    arguments, wrong, fix = failing(command)
    result = run(command, arguments, verbose=True)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback (most recent call last)" in result.stderr and wrong in " ".join(result.stderr.split())


@pytest.mark.parametrize("command", ["info", "pretrain"])
def test_the_environment_variable_asks_for_the_traceback_too(failing, command):
    arguments, _, _ = failing(command)
    result = run(command, arguments, env={"SPACY_ELMO_TRACEBACK": "1"})
    assert result.exit_code == 1 and "Traceback (most recent call last)" in result.stderr, result.output


def test_every_command_of_the_app_has_its_failure_here():
    commands = {command.name or command.callback.__name__.replace("_", "-") for command in app.registered_commands}
    assert commands <= {command.split("-weights")[0] for command in FAILURES}, commands - set(FAILURES)


@pytest.mark.parametrize("command", ["serve", "pipeline", "conllu", "package", "embed"])
def test_a_language_spacy_lacks_is_a_usage_error_before_any_work(failing, command):
    arguments, _, _ = failing(command if command != "embed" else "embed-weights")
    result = run(command, [*arguments[:3], "--lang", "zz"] if command != "serve" else [*arguments, "--lang", "zz"])
    stderr = " ".join(result.stderr.split())
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "spaCy has no language 'zz'" in stderr and "spacy.lang (en, de, fr" in stderr, stderr
