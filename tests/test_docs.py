"""The docs run: every Python and ini block of README.md and docs/*.md is executed here, in order
and in one namespace per page, as a user pasting them would run them (Sybil parses the Markdown).

Each page runs in a scratch folder of its own, with a cache (``SPACY_ELMO_CACHE``) that already
holds the published models the blocks name, converted from the fixture (../shared/fixtures): a
block that loads "original" gets the fixture's biLM instead of a download. The files a page's blocks
read are made there first (``PAGE_FILES``). An ini block is merged over the shipped config it
describes and checked by spaCy's ``debug config``. A block that cannot run here is marked in the page
with ``<!-- skip: next "why" -->``, and the reasons are printed with the count of blocks run.
Shell blocks are not collected yet (their commands are covered by the CLI's own tests).
"""

import shutil
from pathlib import Path
from unittest import SkipTest

import pytest
from conftest import SHARED

sybil = pytest.importorskip("sybil")

from sybil import Document  # noqa: E402
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PUBLISHED = ("original", "medium", "small")  # the catalogue names the blocks load
SHIPPED_CONFIG = ROOT / "training" / "configs" / "upos-elmo.cfg"  # what docs/training.md's snippet describes


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


@pytest.fixture(scope="module")
def fixture_pipeline(session_fixture_bilm, tmp_path_factory):
    """The fixture's biLM as a native directory and as a pipeline (blank en + sentencizer + elmo)."""
    from spacy_elmo.pipeline.assembly import assemble_pipeline
    from spacy_elmo.weights.native import save_bilm

    folder = tmp_path_factory.mktemp("docs-fixture")
    save_bilm(session_fixture_bilm, folder / "bilm")
    assemble_pipeline(folder / "bilm", "en").to_disk(folder / "pipeline")
    return folder


def prepare_scratch(scratch: Path, fixture: Path) -> None:
    """What the pages' blocks read: the published names in the cache, a biLM and a pipeline where
    the blocks name them, docs saved with their layers, real text, a training DocBin."""
    import spacy
    from spacy.tokens import DocBin

    for name in PUBLISHED:
        shutil.copytree(fixture / "bilm", scratch / "cache" / "models" / name)
    shutil.copytree(fixture / "bilm", scratch / "path" / "to" / "bilm")
    shutil.copytree(fixture / "pipeline", scratch / "pipelines" / "elmo-downstream")
    nlp = spacy.load(fixture / "pipeline")
    texts = ["The bank raised its rates.", "We sat on the bank of the river."]
    DocBin(store_user_data=True, docs=nlp.pipe(texts)).to_disk(scratch / "docs.spacy")
    real_text = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()[:100]
    (scratch / "my_text.txt").write_text("\n".join(real_text) + "\n", encoding="utf-8")
    training = [spacy.blank("en")(text) for text in texts]
    for doc in training:
        for token in doc:
            token.tag_ = "NOUN"
    DocBin(docs=training).to_disk(scratch / "train.spacy")


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_every_block_of_the_page_runs(page, fixture_pipeline, tmp_path, monkeypatch, capsys):
    document = Document.parse(str(page), PythonCodeBlockParser(), ConfigBlockParser(), SkipParser())
    if any(True for _ in document):  # a page with blocks gets its scratch folder
        prepare_scratch(tmp_path, fixture_pipeline)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    ran, marked = 0, []
    for example in document:
        try:
            example.evaluate()
        except SkipTest as reason:
            marked.append(f"{page.name}:{example.line}: {reason}")
            continue
        ran += example.region.lexemes.get("arguments") in ("python", "ini")
    with capsys.disabled():
        reasons = "".join(f"\n  marked {m}" for m in marked)
        print(f"\n{page.relative_to(ROOT)}: {ran} blocks ran, {len(marked)} marked{reasons}")
