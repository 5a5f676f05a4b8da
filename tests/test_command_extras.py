"""Each command with each extra it uses hidden (as if not installed) says so before its work: it
stops with a message that names the extra and the command that installs it, or, where the step
that needs the extra can be left out (pretraining's plot), warns as it starts and does the rest.
The table covers every extra setup.py declares; an extra added there fails here until it is in
the table. Hidden: the packages that extra alone brings (ray's, not the serve extra's it holds
too), None in sys.modules, which ``import`` and ``find_spec`` both take for not installed."""

import functools
import importlib.metadata
import json
import sys
import warnings

import pytest
from conftest import setup_extras
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.hub.catalogue import CATALOGUE
from spacy_elmo.training import builtin_text, pretrain
from spacy_elmo.training.corpus import prepare_corpus, read_sentences
from spacy_elmo.training.vocab import Vocabulary

LEMMA_MODEL = next(model.name for model in CATALOGUE.values() if model.input_attr == "LEMMA")
ORIGINAL = "FIXTURES/options.json", "FIXTURES/lm_weights.hdf5"

# extra -> the commands that use it, each as its arguments (placeholders filled in by ``filled``);
# a command's first word picks its app: pretrain and builtin_text have their own
USES = {
    "h5": {
        "convert": ["convert", *ORIGINAL, "OUT"],
        "embed": ["embed", "TEXT", "OUT", "--weights", "TINY"],
        # an original release by name: the check comes before the download
        "download": ["download", "original", "OUT"],
        "package": ["package", "original", "OUT"],
        "pipeline": ["pipeline", "original", "OUT"],
        "serve": ["serve", "original", "--port", "0"],
    },
    "cuda12x": {
        "embed": ["embed", "TEXT", "OUT", "--weights", "TINY", "--gpu-id", "0"],
        "serve": ["serve", "TINY", "--device", "cuda", "--port", "0"],
    },
    "serve": {"serve": ["serve", "TINY", "--port", "0"]},
    "ray": {
        "serve": ["serve", "TINY", "--replicas", "2", "--port", "8123"],
        "embed": ["embed", "TEXT", "OUT", "--weights", "TINY", "--ray"],
    },
    "lemmas": {
        "package": ["package", LEMMA_MODEL, "OUT"],
        "pipeline": ["pipeline", LEMMA_MODEL, "OUT"],
        "embed": ["embed", "TEXT", "OUT", "--weights", LEMMA_MODEL],
        "serve": ["serve", LEMMA_MODEL, "--port", "0"],
    },
    "train": {
        "builtin_text": ["builtin_text", "gensim", "OUT"],
        "pretrain": ["pretrain", "RUN_CONFIG", "--output", "OUT", "--set", "max_steps=1"],
    },
}
# where the extra's step is left out with a warning and the command goes on
WARNS = {("train", "pretrain")}
CASES = [(extra, command) for extra, commands in USES.items() for command in commands]


def test_the_table_holds_every_extra_of_setup_py():
    assert set(USES) == set(setup_extras()) - {"dev"}, "each extra a user installs is checked by a command here"


def declared(extra: str) -> set:
    return {canonicalize_name(Requirement(line).name) for line in setup_extras()[extra]}


def own_modules(extra: str) -> list:
    """The top-level modules of the installed packages that ``extra`` brings and no extra it holds
    does; a package not installed is hidden already."""
    held = [declared(other) for other in USES if other != extra and declared(other) < declared(extra)]
    own = declared(extra).difference(*held)
    return sorted(m for m, names in installed_modules().items() if own & names)


@functools.lru_cache(maxsize=None)
def installed_modules() -> dict:
    """Each installed top-level module -> the distributions that bring it (names canonicalized);
    read once: it walks every installed distribution's file list."""
    distributions = importlib.metadata.packages_distributions()
    return {module: {canonicalize_name(name) for name in names} for module, names in distributions.items()}


@pytest.fixture
def filled(tmp_path, tiny_weights, fixture_dir, monkeypatch):
    """A case's arguments with the paths of this test (a download cache of its own: nothing is
    fetched, the checks come first)."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text("The cat sat.\n", encoding="utf-8")
    places = {
        "FIXTURES": lambda: str(fixture_dir),
        "TINY": lambda: str(tiny_weights),
        "TEXT": lambda: str(tmp_path / "text.txt"),
        "OUT": lambda: str(tmp_path / "out"),
        "RUN_CONFIG": lambda: str(tiny_run_config(tmp_path)),  # a corpus and vocabulary: made where asked for
    }

    def fill(arguments):
        for placeholder, value in places.items():
            if any(placeholder in argument for argument in arguments):
                arguments = [argument.replace(placeholder, value()) for argument in arguments]
        return arguments

    return fill


def tiny_run_config(tmp_path):
    """A pretraining config of the tiny preset on a corpus of a few sentences, one step long."""
    text = tmp_path / "story.txt"
    text.write_text("The cat sat on the mat.\nThe dog ran to the park.\n" * 4, encoding="utf-8")
    prepare_corpus(tmp_path / "corpus", {"train": [text], "dev": [text], "test": [text]}, shard_size=4)
    Vocabulary.from_sentences(read_sentences(tmp_path / "corpus" / "train"), max_size=50).save(tmp_path / "vocab.txt")
    config = {"corpus": str(tmp_path / "corpus"), "vocab": str(tmp_path / "vocab.txt"), "preset": "tiny"}
    config.update(batch_tokens=40, eval_every=1, threads=1)
    (tmp_path / "run.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp_path / "run.json"


def invoke(arguments):
    """The command's own app on ``arguments``; its output on one line, and the warnings it gave."""
    command, *rest = arguments
    apps = {"pretrain": (pretrain.app, rest), "builtin_text": (builtin_text.app, rest)}
    which, given = apps.get(command, (app, arguments))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = CliRunner().invoke(which, given)
    said = " ".join([*result.output.split(), *(str(warning.message) for warning in seen)])
    return result, " ".join(said.split())


@pytest.mark.parametrize("extra, command", CASES, ids=[f"{command}-without-{extra}" for extra, command in CASES])
def test_a_command_without_an_extra_it_uses_names_the_extra_before_its_work(filled, monkeypatch, extra, command):
    for module in own_modules(extra):
        monkeypatch.setitem(sys.modules, module, None)
    result, said = invoke(filled(USES[extra][command]))
    assert f'pip install ".[{extra}]" in a clone of spacy-elmo' in said, said
    if (extra, command) in WARNS:
        assert result.exit_code == 0 and "Done: 1 steps" in said, said
    else:
        assert result.exit_code != 0 and isinstance(result.exception, SystemExit), said
        assert "Traceback" not in said and "Wrote" not in said and "Saved" not in said, said
