"""The docs run: every Python and ini block of README.md and docs/*.md is executed here, in order
and in one namespace per page, as a user pasting them would run them (Sybil parses the Markdown).

Each page runs in a scratch folder of its own, with a cache (``SPACY_ELMO_CACHE``) that already
holds the published models the blocks name, converted from the fixture (../shared/fixtures): a
block that loads "original" gets the fixture's biLM instead of a download. The files a page's blocks
read are made there first (``PAGE_FILES``). An ini block is merged over the shipped config it
describes and checked by spaCy's ``debug config``. A block that cannot run here is marked in the page
with ``<!-- skip: next "why" -->``, and the reasons are printed with the count of blocks run.

Shell blocks run command by command in the page's folder. ``mkdir``, ``python -m spacy_elmo`` and
``python -m spacy`` run in this process (as ``python -m`` would: a fresh interpreter per command would cost the
suite seconds each); any other command makes the test fail until the block is marked. What the
tests change, and why (``SHELL_RULES``): ``spacy train`` gets a budget of 20 steps (the config's
3,000 take an hour); ``pip install`` of spacy-elmo from its clone (``.``, ``".[EXTRAS]"``) is what
the tests' environment already is, and each extra's packages must be installed in it;
``pip install`` of a local package installs it offline, without its dependencies (the environment
has them), into a folder of the page's that goes on ``sys.path``; pip is told not to reach any index
(spaCy's ``package`` then builds with setuptools in this environment). docs/training.md's walk then
checks that the installed pipeline gives the source pipeline's vectors (``test_the_walk_...``).
"""

import importlib.metadata
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List
from unittest import SkipTest

import pytest
from conftest import SHARED

sybil = pytest.importorskip("sybil")

from sybil import Document  # noqa: E402
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402

from spacy_elmo.tasks.shipped_configs import config_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PUBLISHED = ("original", "medium", "small")  # the catalogue names the blocks load
SHIPPED_CONFIG = config_path("upos-elmo")  # what docs/training.md's snippet describes
IN_PROCESS = ("spacy_elmo", "spacy")  # the modules whose `python -m` commands the shell blocks run
TRAIN_BUDGET = ["--training.max_steps", "20", "--training.eval_frequency", "10"]
INSTALLED = "installed"  # a page's folder for what its blocks pip-install
CLONE = re.compile(r"\.(?:\[([\w,-]+)\])?")  # `pip install .` or `".[serve,h5]"` in the clone, quotes gone
SHELL_RULES = (
    "spacy train: + " + " ".join(TRAIN_BUDGET),
    'pip install ".[EXTRAS]": already installed, each extra\'s packages checked',
    f"pip install LOCAL_PATH: --no-deps --no-build-isolation --target {INSTALLED}, offline",
)


class ConfigBlockParser(CodeBlockParser):
    """An ini block: a snippet of a spaCy training config, merged over the shipped one and checked."""

    language = "ini"

    def evaluate(self, example):
        check_config_snippet(example.parsed, Path.cwd())


def check_config_snippet(snippet: str, scratch: Path) -> None:
    from spacy.cli.debug_config import debug_config
    from thinc.api import Config

    merged = Config().from_disk(SHIPPED_CONFIG, interpolate=False).merge(Config().from_str(snippet, interpolate=False))
    path = scratch / "snippet.cfg"
    merged.to_disk(path)
    overrides = {"paths.train": "train.spacy", "paths.dev": "train.spacy", "paths.elmo": "pipelines/elmo-downstream"}
    debug_config(path, overrides=overrides)  # spaCy's own check: raises on a config it refuses


class ShellBlockParser(CodeBlockParser):
    """A bash block: each command run in the page's folder (see the module docstring)."""

    language = "bash"

    def __init__(self, monkeypatch) -> None:
        super().__init__()
        self.monkeypatch = monkeypatch
        self.timings: List[str] = []  # each command run, with its seconds, for the test's report

    def evaluate(self, example):
        for command in shell_commands(example.parsed):
            started = time.perf_counter()
            run_command(command, self.monkeypatch)
            self.timings.append(f"{time.perf_counter() - started:6.1f} s  {shlex.join(command)}")


def shell_commands(block: str) -> List[List[str]]:
    """A block's commands as argument lists: continued lines joined, comments dropped."""
    commands, pending = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words = shlex.split(pending + line, comments=True)
        pending = ""
        if words:
            commands.append(words)
    return commands


def run_command(words: List[str], monkeypatch) -> None:
    if words[:1] == ["mkdir"]:
        for folder in (word for word in words[1:] if word != "-p"):
            Path(folder).mkdir(parents=True, exist_ok=True)
        return None
    pip = 3 if words[:3] == ["python", "-m", "pip"] else 1 if words[:1] == ["pip"] else 0
    if pip and words[pip : pip + 1] == ["install"]:
        return install(words[pip + 1 :], monkeypatch)
    if words[:2] != ["python", "-m"] or words[2] not in IN_PROCESS:
        raise AssertionError(
            f'The docs test cannot run {" ".join(words)!r}: mark its block with <!-- skip: next "why" -->.'
        )
    module, arguments = words[2], words[3:]
    if module == "spacy" and arguments[:1] == ["train"]:
        arguments += TRAIN_BUDGET
    monkeypatch.setattr(sys, "argv", [module, *arguments])
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        assert done.code in (0, None), f"{' '.join(words)} exited with {done.code}"


def install(arguments: List[str], monkeypatch) -> None:
    """``pip install``: spacy-elmo from its clone is installed already (each extra a page names is
    checked: its packages installed here); a local path goes into INSTALLED."""
    clone = [CLONE.fullmatch(argument) for argument in arguments]
    if all(clone):
        for extra in (name for found in clone if found[1] for name in found[1].split(",")):
            assert_extra_installed(extra)
        return
    assert all(Path(argument).exists() for argument in arguments), f"not a local package: {arguments}"
    target = Path.cwd() / INSTALLED
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*pip, "--target", str(target), *arguments], check=True)
    monkeypatch.syspath_prepend(str(target))


def assert_extra_installed(extra: str) -> None:
    """Every package ``extra`` brings (setup.py, read through the installed metadata) is installed."""
    from packaging.requirements import Requirement

    from spacy_elmo.extras import requirements

    packages = requirements(extra)
    assert packages, f"the pages name an extra setup.py lacks: [{extra}]"
    for package in packages:
        name = Requirement(package).name
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f'a page installs ".[{extra}]", and its {name} is not installed here')


@pytest.fixture(scope="module")
def fixture_pipeline(session_fixture_bilm, tmp_path_factory):
    """The fixture's biLM as a native directory and as a pipeline (blank en + sentencizer + elmo)."""
    from spacy_elmo.pipeline.assembly import assemble_pipeline
    from spacy_elmo.weights.native import save_bilm

    folder = tmp_path_factory.mktemp("docs-fixture")
    save_bilm(session_fixture_bilm, folder / "bilm")
    assemble_pipeline(folder / "bilm", "en").to_disk(folder / "pipeline")
    return folder


@pytest.fixture(scope="module")
def scratch_template(fixture_pipeline, tmp_path_factory):
    """The scratch folder the pages' blocks run in, made once: each page runs in a copy of its own."""
    folder = tmp_path_factory.mktemp("docs-scratch")
    prepare_scratch(folder, fixture_pipeline)
    return folder


def prepare_scratch(scratch: Path, fixture: Path) -> None:
    """What the pages' blocks read: the published names in the cache, a biLM and a pipeline where
    the blocks name them, an original release's two files, docs saved with their layers, real
    text, corpora to embed, 140 sentences of UD English-EWT, a training DocBin."""
    import spacy
    from spacy.tokens import DocBin

    for name in PUBLISHED:
        shutil.copytree(fixture / "bilm", scratch / "cache" / "models" / name)
    shutil.copytree(fixture / "bilm", scratch / "path" / "to" / "bilm")
    shutil.copytree(fixture / "pipeline", scratch / "elmo-pipeline")
    original = SHARED / "fixtures" / "elmo-allennlp"
    shutil.copy(original / "options.json", scratch / "elmo_options.json")
    shutil.copy(original / "lm_weights.hdf5", scratch / "elmo_weights.hdf5")
    nlp = spacy.load(fixture / "pipeline")
    texts = ["The bank raised its rates.", "We sat on the bank of the river."]
    DocBin(store_user_data=True, docs=nlp.pipe(texts)).to_disk(scratch / "docs.spacy")
    real_text = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()[:100]
    (scratch / "my_text.txt").write_text("\n".join(real_text) + "\n", encoding="utf-8")
    write_corpora(scratch, real_text[:8])
    ewt = scratch / "UD_English-EWT"
    ewt.mkdir()
    for split, sentences in (("train", 100), ("dev", 40)):
        name = f"en_ewt-ud-{split}.conllu"
        text = (SHARED / "data" / "ud-english-ewt" / name).read_text(encoding="utf-8")
        (ewt / name).write_text("\n\n".join(text.split("\n\n")[:sentences]) + "\n\n", encoding="utf-8")
    blank = spacy.blank("en")
    training = [blank(text) for text in texts]
    for doc in training:
        for token in doc:
            token.tag_ = "NOUN"
    DocBin(docs=training).to_disk(scratch / "train.spacy")


def write_corpora(scratch: Path, lines: List[str]) -> None:
    """The inputs docs/embedding.md's commands read: a text file twice, a folder of text files
    and a folder of Parquet files with a "body" column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in ("sentences.txt", "corpus.txt"):
        (scratch / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (scratch / "texts").mkdir()
    (scratch / "parquet").mkdir()
    for part in (0, 1):
        chosen = lines[part::2]
        (scratch / "texts" / f"part-{part}.txt").write_text("\n".join(chosen) + "\n", encoding="utf-8")
        pq.write_table(pa.table({"body": chosen}), scratch / "parquet" / f"part-{part}.parquet")


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_every_block_of_the_page_runs(page, scratch_template, tmp_path, monkeypatch, capsys):
    shell = ShellBlockParser(monkeypatch)
    document = Document.parse(str(page), PythonCodeBlockParser(), ConfigBlockParser(), shell, SkipParser())
    if any(True for _ in document):  # a page with blocks gets a scratch folder of its own
        shutil.copytree(scratch_template, tmp_path, dirs_exist_ok=True)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    ran, marked = 0, []
    for example in document:
        try:
            example.evaluate()
        except SkipTest as reason:
            marked.append(f"{page.name}:{example.line}: {reason}")
            continue
        ran += example.region.lexemes.get("arguments") in ("python", "ini", "bash")
    if page.name in AFTER_THE_WALK:
        AFTER_THE_WALK[page.name](tmp_path)
    with capsys.disabled():
        reasons = "".join(f"\n  marked {m}" for m in marked)
        commands = "".join(f"\n  ran {timing}" for timing in shell.timings)
        print(f"\n{page.relative_to(ROOT)}: {ran} blocks ran, {len(marked)} marked{reasons}{commands}")


def installed_gives_the_source_vectors(scratch: Path) -> None:
    """docs/training.md's walk: the pipeline it installed gives the source pipeline's layers and
    vectors, bit for bit, and tags."""
    import numpy as np
    import spacy

    from spacy_elmo.pipeline.assembly import elmo_component_names

    text = "We sat on the bank of the river. The bank raised its rates."
    installed = spacy.load("en_upos_elmo")
    source = spacy.load(scratch / "pipelines" / "elmo-downstream")
    ours, theirs = installed(text), source(text)
    assert Path(installed.path).is_relative_to(scratch / INSTALLED)
    assert np.array_equal(ours._.elmo_data, theirs._.elmo_data)
    assert all(np.array_equal(a.vector, b.vector) for a, b in zip(ours, theirs, strict=True))
    assert all(token.tag_ for token in ours), "the trained tagger tags"
    assert elmo_component_names("en_upos_elmo") == ["elmo"], "found by the installed package's name"


AFTER_THE_WALK = {"training.md": installed_gives_the_source_vectors}
