"""`spacy package` builds a wheel that installs into a new virtual environment and loads. The default
run's environment borrows this one's dependencies (seconds); a truly empty one, which installs torch
and every dependency (half a minute), is in the matrix (`nox -s matrix`)."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import SHARED, make_nlp
from fork_host import ForkHost

ROOT = Path(__file__).resolve().parents[1]


def run(*command, **kwargs):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def in_venv(host: ForkHost, *command, cwd) -> str:
    """``python COMMAND`` of ``host``'s venv in ``cwd``, in a child forked from the host; what it printed."""
    done = host.run([str(word) for word in command], os.environ, timeout=300, cwd=str(cwd))
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def install_and_run(host: ForkHost, package_folder, check, cwd):
    """Install the one wheel of ``package_folder`` into ``host``'s venv; the JSON ``check`` prints."""
    import json

    (wheel,) = (package_folder / "dist").glob("*.whl")
    pip_into(host.python, "install", "-q", wheel)
    return json.loads(in_venv(host, "-c", check, cwd=cwd))


def new_venv(tmp_path_factory, with_pip: bool = True) -> Path:
    """A new virtual environment; its python."""
    environment = tmp_path_factory.mktemp("venv") / "venv"
    venv.create(environment, with_pip=with_pip)
    return environment / "bin" / "python"


def pip_into(python, *arguments):
    """This environment's pip, acting on ``python``'s venv (``pip --python``): the venv needs no pip of
    its own (its setuptools, 65 on Python 3.11, would shadow the borrowed one torch requires)."""
    return run(sys.executable, "-m", "pip", "--python", python, *arguments)


def site_packages(python) -> Path:
    return Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())


SHIPPED_CONFIGS = ["ner-baseline", "ner-elmo", "upos-baseline", "upos-elmo"]  # `python -m spacy_elmo config NAME`
# What the borrowed packages leave out: this checkout's own install, and the optional lemma tables.
NOT_BORROWED = ("spacy_elmo", "__editable__", "spacy_lookups_data")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """A new virtual environment with spacy-elmo installed from a wheel of this checkout, and this
    environment's packages (torch, spaCy...) but spacy-lookups-data on its path after its own: what
    a pipeline's wheel resolves its requirements against. Its commands run in children of a host
    started under its python (tests/fork_host.py): a pipeline installed later loads by its name
    (``spacy.load`` imports it), not by the entry points spaCy's registries read as the host started."""
    python = new_venv(tmp_path_factory, with_pip=False)
    borrowed = tmp_path_factory.mktemp("borrowed")
    for entry in site_packages(sys.executable).iterdir():
        if not entry.name.startswith(NOT_BORROWED):
            (borrowed / entry.name).symlink_to(entry)
    (site_packages(python) / "borrowed.pth").write_text(f"{borrowed}\n")
    wheels = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT)
    pip_into(python, "install", "-q", "--no-deps", *wheels.glob("spacy_elmo-*.whl"))
    check = "import importlib.util, spacy_elmo, spacy_elmo.training\n"
    check += "from spacy_elmo.tasks.shipped_configs import config_names\n"
    check += "print(spacy_elmo.__file__); print(spacy_elmo.training.__file__)\n"
    check += "print(importlib.util.find_spec('training')); print(config_names())"
    host = ForkHost(python)
    try:
        where, training, top_level, shipped = in_venv(host, "-c", check, cwd=python.parent).strip().splitlines()
        assert where.startswith(str(python.parents[1])), "the installed copy, not the checkout's"
        assert training.startswith(str(python.parents[1])), "the wheel's spacy_elmo.training"
        assert top_level == "None", "no top-level `training` installed"
        assert shipped == str(SHIPPED_CONFIGS), "the wheel ships the configs"
        yield host
    finally:
        host.close()


@pytest.mark.matrix
def test_spacy_elmo_installs_with_its_dependencies_into_an_empty_venv(tmp_path_factory, tiny_weights):
    """torch first (as the README says), then spacy-elmo from this checkout with everything it needs."""
    python = new_venv(tmp_path_factory)
    with_index = {name: value for name, value in os.environ.items() if name != "PIP_NO_INDEX"}  # see conftest
    run(python, "-m", "pip", "install", "-q", "torch==2.13.0", env=with_index)
    run(python, "-m", "pip", "install", "-q", ROOT, env=with_index)
    check = (
        "import spacy\n"
        "nlp = spacy.blank('en'); nlp.add_pipe('sentencizer')\n"
        f"nlp.add_pipe('elmo', config={{'weights': {str(tiny_weights)!r}}}); nlp.initialize()\n"
        "print(nlp('An empty venv runs it. Two sentences.')._.elmo_data.shape)\n"
    )
    assert run(python, "-c", check, cwd=tmp_path_factory.getbasetemp()).strip() == "(3, 9, 32)"


@pytest.mark.slow
@pytest.mark.matrix  # 20 s: the default run packages, installs and loads one in docs/training.md's walk (test_docs.py)
def test_packaged_pipeline_installs_and_loads(tiny_weights, tmp_path, fresh_venv):
    nlp = make_nlp(tiny_weights)
    nlp.meta["name"] = "elmo_tiny_test"
    nlp.meta["version"] = "0.0.1"
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "packages").mkdir()
    run(
        sys.executable,
        "-m",
        "spacy",
        "package",
        tmp_path / "pipeline",
        tmp_path / "packages",
        "--build",
        "wheel",
        "--force",
    )
    (wheel,) = (tmp_path / "packages").glob("*/dist/*.whl")
    pip_into(fresh_venv.python, "install", "-q", wheel)
    check = (
        "import spacy\n"
        "nlp = spacy.load('en_elmo_tiny_test')\n"
        "doc = nlp('The packaged pipeline runs. It has sentences.')\n"
        "print(doc._.elmo_data.shape, len(list(doc.sents)), doc[1].vector.shape)\n"
        "from spacy_elmo.pipeline.assembly import elmo_component_names\n"
        "print(elmo_component_names('en_elmo_tiny_test'), elmo_component_names('no_such_pipeline'))\n"
    )
    printed = in_venv(fresh_venv, "-c", check, cwd=tmp_path)
    assert printed.strip().splitlines() == ["(3, 9, 32) 2 (32,)", "['elmo'] []"]


@pytest.mark.slow
def test_pipeline_packaged_from_a_catalogue_name_loads_in_a_fresh_venv(
    fixture_dir, fixture_bilm, tmp_path, monkeypatch, fresh_venv
):
    """`python -m spacy_elmo package NAME OUT`, with NAME served by a local server."""
    from file_server import FileServer
    from typer.testing import CliRunner

    from spacy_elmo import embed_sentences
    from spacy_elmo.cli.app import app
    from spacy_elmo.hub.catalogue import BILM_TF, CATALOGUE, PublishedModel
    from spacy_elmo.hub.download import RemoteFile

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    files = {
        "/options.json": (fixture_dir / "options.json").read_bytes(),
        "/weights.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
    }
    with FileServer(files) as server:
        entry = PublishedModel(
            name="fixture-elmo",
            language="en",
            format=BILM_TF,
            files=(
                RemoteFile(server.url("/options.json"), "options.json"),
                RemoteFile(server.url("/weights.hdf5"), "weights.hdf5"),
            ),
            trained_on="test data",
            licence="Apache-2.0",
            citation="Peters et al. (2018)",
            source="https://allennlp.org/elmo",
        )
        monkeypatch.setitem(CATALOGUE, entry.name, entry)
        text = tmp_path / "text.txt"
        text.write_text("\n".join((SHARED / "data" / "corpus" / "valid.txt").read_text().splitlines()[:80]))
        arguments = ["package", "fixture-elmo", str(tmp_path / "packages"), "--centering-text", str(text)]
        result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    check = (
        "import json, spacy\n"
        "nlp = spacy.load('en_elmo_fixture_elmo')\n"
        "doc = nlp('The bank raised rates . We sat by the river .')\n"
        "print(json.dumps([nlp.pipe_names, nlp.meta['license'], len(list(doc.sents)), doc._.elmo_data[:, "
        ":5].tolist(), nlp.get_pipe('elmo').centering.tokens]))\n"
    )
    import numpy as np

    package = tmp_path / "packages" / "en_elmo_fixture_elmo-0.0.1"
    pipes, licence, n_sentences, layers, centred_on = install_and_run(fresh_venv, package, check, tmp_path)
    assert pipes == ["sentencizer", "elmo"] and licence == "Apache-2.0" and n_sentences == 2
    assert centred_on >= 1000, "the package's vectors are centred on the text given"
    expected = embed_sentences(fixture_bilm, [["The", "bank", "raised", "rates", "."]])[0]
    np.testing.assert_allclose(np.array(layers), expected, atol=1e-6)


@pytest.mark.slow
def test_a_lemma_model_packaged_by_name_lemmatizes_without_the_data_package(
    fixture_dir, fixture_bilm, tmp_path, monkeypatch, fresh_venv
):
    """`package NAME` for a model trained on lemmas: spaCy's lookup lemmatizer goes in with its
    table, so the fresh venv (no spacy-lookups-data) lemmatizes and the biLM reads the lemmas."""

    import numpy as np
    from file_server import FileServer
    from test_served_models import SURFACE, entry, nlpl_zip
    from typer.testing import CliRunner

    from spacy_elmo import embed_sentences
    from spacy_elmo.cli.app import app
    from spacy_elmo.hub.catalogue import BILM_TF, CATALOGUE

    pytest.importorskip("spacy_lookups_data")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    with FileServer({"/repository/20/999.zip": nlpl_zip(fixture_dir)}) as server:
        model = entry(server, "nlpl-lemmas", "/repository/20/999.zip", BILM_TF, input_attr="LEMMA")
        monkeypatch.setitem(CATALOGUE, model.name, model)
        result = CliRunner().invoke(app, ["package", "nlpl-lemmas", str(tmp_path / "packages")])
    assert result.exit_code == 0, result.output
    check = (
        "import importlib.util, json, spacy\n"
        "nlp = spacy.load('en_elmo_nlpl_lemmas')\n"
        f"doc = nlp(spacy.tokens.Doc(nlp.vocab, words={SURFACE!r}))\n"
        "print(json.dumps([importlib.util.find_spec('spacy_lookups_data') is None, nlp.pipe_names, "
        "[t.lemma_ for t in doc], doc._.elmo_data.tolist()]))\n"
    )
    package = tmp_path / "packages" / "en_elmo_nlpl_lemmas-0.0.1"
    no_data_package, pipes, lemmas, layers = install_and_run(fresh_venv, package, check, tmp_path)
    assert no_data_package and pipes == ["sentencizer", "lemmatizer", "elmo"]
    assert lemmas[1:4] == ["cat", "be", "sit"]
    np.testing.assert_allclose(np.array(layers), embed_sentences(fixture_bilm, [lemmas])[0], atol=1e-5)


def test_a_bilm_of_your_own_and_an_original_release_folder_are_packaged_as_a_name_is(
    fixture_dir, tiny_weights, tmp_path, fresh_venv
):
    """`package` takes what `weights` takes: a native biLM folder (named after it, or --name) and an
    original release folder (options.json and weights.hdf5), into an output folder it makes."""
    from typer.testing import CliRunner

    from spacy_elmo.cli.app import app

    output = tmp_path / "not" / "there" / "yet"
    for weights, extra in ((tiny_weights, []), (fixture_dir, ["--name", "fixture", "--lang", "de"])):
        result = CliRunner().invoke(app, ["package", str(weights), str(output), *extra])
        assert result.exit_code == 0, result.output
    check = (
        "import json, spacy\n"
        "nlp = spacy.load('de_elmo_fixture')\n"
        "doc = nlp('Die Bank hob ihre Zinsen an .')\n"
        "print(json.dumps([nlp.lang, nlp.pipe_names, list(doc._.elmo_data.shape)]))\n"
    )
    lang, pipes, shape = install_and_run(fresh_venv, output / "de_elmo_fixture-0.0.1", check, tmp_path)
    assert lang == "de" and pipes == ["sentencizer", "elmo"] and shape == [3, 7, 32]
    assert list((output / f"en_elmo_{tiny_weights.name}-0.0.1" / "dist").glob("*.whl")), "named after its folder"


def test_the_installed_wheel_pretrains_from_an_empty_folder(fresh_venv, tmp_path):
    """What `pip install "spacy-elmo[train]"` gives runs docs/pretraining.md's steps from a folder with
    nothing but text in it: corpus, vocabulary, a few steps of a shipped config (by name), the
    perplexity; the code is the wheel's `spacy_elmo.training`, and no top-level `training` is installed
    (``fresh_venv`` checks both)."""
    import json

    corpus_text = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()
    folder = tmp_path / "empty"
    folder.mkdir()
    for name, lines in (
        ("train.txt", corpus_text[:400]),
        ("dev.txt", corpus_text[400:440]),
        ("test.txt", corpus_text[440:480]),
    ):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def step(*arguments):
        return in_venv(fresh_venv, "-m", *arguments, cwd=folder)

    step("spacy_elmo.training.corpus", "corpus", "--train", "train.txt", "--dev", "dev.txt", "--test", "test.txt")
    step("spacy_elmo.training.vocab", "corpus", "vocab.txt", "--max-size", "2000")
    settings = {"preset": "tiny", "max_steps": 3, "batch_tokens": 200, "threads": 1}
    overrides = [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]
    done = step(
        "spacy_elmo.training.pretrain",
        "pretrain-cpu",
        "-o",
        "run",
        "--set",
        "corpus=corpus",
        "--set",
        "vocab=vocab.txt",
        *overrides,
    )
    assert "Done: 3 steps" in done and (folder / "run" / "bilm").is_dir(), done
    scores = json.loads(step("spacy_elmo.training.evaluate", "run", "--shards", "corpus/test"))
    assert scores["perplexity"] > 1.0 and scores["unigram_perplexity"] > 1.0, scores
