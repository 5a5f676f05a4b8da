"""Raw text for the workflow, written as one paragraph per line with a blank line between documents.

- ``gensim``: the real text that ships inside gensim's wheel, so a fresh offline machine has a
  corpus: a sample of English Wikipedia articles (MediaWiki XML; redirects skipped, markup removed)
  and the Lee news corpus (``lee_background.cor``, one article per line).
- ``wikitext``: WikiText-103 (the optional ``wikitext-103`` asset of project.yml), from its raw zip.

    python -m training.builtin_text gensim assets/text [--max-docs N]
    python -m training.builtin_text wikitext assets/wikitext-103-raw-v1.zip assets/wikitext
"""
from __future__ import annotations

import bz2
import re
import zipfile
from pathlib import Path
from typing import Iterable, Iterator, List

import typer

from .vocab import write_text_atomically

WIKIPEDIA_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_NEWS = "lee_background.cor"
MIN_PARAGRAPH_WORDS = 5

app = typer.Typer(add_completion=False, no_args_is_help=True)


def gensim_data_dir() -> Path:
    try:
        import gensim
    except ImportError:
        raise SystemExit("The built-in corpus comes with gensim: pip install gensim (or pip install -e '.[train]').") from None
    return Path(gensim.__file__).parent / "test" / "test_data"


def clean_wiki_paragraphs(markup: str) -> List[str]:
    """An article's prose paragraphs, from MediaWiki markup."""
    from gensim.corpora.wikicorpus import filter_wiki

    text = filter_wiki(markup)
    text = re.sub(r"'{2,}", "", text)  # bold / italic quotes
    text = re.sub(r"\(\s*[;,\s]*\)", "", text)  # parentheses emptied by the filter
    paragraphs = []
    for line in text.splitlines():
        line = re.sub(r"\s+", " ", line).strip()
        if line.startswith("=") or len(line.split()) < MIN_PARAGRAPH_WORDS:
            continue  # headings, captions, list debris
        paragraphs.append(line)
    return paragraphs


def wikipedia_sample(data_dir: Path) -> Iterator[List[str]]:
    from gensim.corpora.wikicorpus import extract_pages

    with bz2.open(data_dir / WIKIPEDIA_SAMPLE, "rt", encoding="utf-8") as stream:
        for _, markup, _ in extract_pages(stream):
            if markup.lstrip().upper().startswith("#REDIRECT"):
                continue
            paragraphs = clean_wiki_paragraphs(markup)
            if paragraphs:
                yield paragraphs


def lee_news(data_dir: Path) -> Iterator[List[str]]:
    for line in (data_dir / LEE_NEWS).read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield [line.strip()]


def write_documents(path: Path, documents: Iterable[List[str]], max_docs: int = 0) -> int:
    chosen = [doc for i, doc in enumerate(documents) if not max_docs or i < max_docs]
    write_text_atomically(path, "\n\n".join("\n".join(doc) for doc in chosen) + "\n")
    return len(chosen)


@app.command()
def gensim(output: Path, max_docs: int = typer.Option(0, help="Documents per source; 0 for all.")) -> None:
    """Extract the Wikipedia sample and the Lee news text from gensim's wheel."""
    data = gensim_data_dir()
    wiki = write_documents(output / "wikipedia-sample.txt", wikipedia_sample(data), max_docs)
    news = write_documents(output / "lee-news.txt", lee_news(data), max_docs)
    typer.echo(f"Wrote {wiki} Wikipedia articles and {news} news articles to {output}")


@app.command()
def wikitext(archive: Path, output: Path) -> None:
    """Convert the WikiText-103 raw zip: articles start at ' = Title = ' lines."""
    with zipfile.ZipFile(archive) as bundle:
        for member in bundle.namelist():
            if not member.endswith(".raw"):
                continue
            documents: List[List[str]] = []
            for line in bundle.read(member).decode("utf-8").splitlines():
                line = line.strip()
                if re.fullmatch(r"= [^=].* =", line):
                    documents.append([])
                elif line and not line.startswith("=") and documents:
                    documents[-1].append(line)
            count = write_documents(output / (Path(member).stem + ".txt"), (d for d in documents if d))
            typer.echo(f"{member}: {count} articles")


if __name__ == "__main__":
    app()
