"""MkDocs hook: the files the site includes from the repository root work as they do on GitHub.

docs/development.md, docs/changelog.md, docs/results.md and docs/benchmarks.md include
CONTRIBUTING.md, CHANGELOG.md, RESULTS.md and BENCHMARKS.md whole (pymdownx.snippets),
docs/how-it-works.md includes CONTRIBUTING.md's map of the rooms and docs/index.md README.md's
Install section. Those files are written for
GitHub, where links and images are relative to the repository root. This hook

- adds the figures under ``bench/results/`` to the site at that same path, so the images of
  BENCHMARKS.md and RESULTS.md show from pages at the top of docs/ (no copy of them under docs/);
- rewrites links to ``docs/PAGE`` and to the included root files so that they point at the pages
  of the site (``docs/index.md`` -> ``index.md``, ``CHANGELOG.md`` -> ``changelog.md``), after
  snippets has included the text. Any other link outside docs/ is left alone, and
  ``mkdocs build --strict`` names it.

Only pages at the top of docs/ include root files, so the rewritten links are relative to it.
"""

import re
from pathlib import Path

from markdown import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.structure.files import File

FIGURES = "bench/results"
# A root file -> the page of the site that shows it.
PAGES = {
    "README.md": "index.md",
    "CONTRIBUTING.md": "development.md",
    "CHANGELOG.md": "changelog.md",
    "RESULTS.md": "results.md",
    "BENCHMARKS.md": "benchmarks.md",
}
# ](target) and reference definitions "[name]: target", with an optional #anchor.
_LINK = re.compile(r"(\]\(|^\[[^\]]+\]:\s*)(docs/[^)\s#]+|" + "|".join(map(re.escape, PAGES)) + r")(?=[)\s#]|$)")


def _site_target(target: str) -> str:
    return target[len("docs/") :] if target.startswith("docs/") else PAGES[target]


class _RootLinks(Preprocessor):
    def run(self, lines):
        return [_LINK.sub(lambda m: m.group(1) + _site_target(m.group(2)), line) for line in lines]


class _RootLinksExtension(Extension):
    def extendMarkdown(self, md):
        # pymdownx.snippets includes files at priority 32; this runs after it.
        md.preprocessors.register(_RootLinks(md), "spacy_elmo_root_links", 31)


def on_config(config):
    config.markdown_extensions.append(_RootLinksExtension())
    return config


def on_files(files, config):
    root = Path(config.docs_dir).resolve().parent  # the repository root
    for figure in sorted((root / FIGURES).glob("*.png")):
        files.append(File.generated(config, f"{FIGURES}/{figure.name}", abs_src_path=str(figure)))
    return files
