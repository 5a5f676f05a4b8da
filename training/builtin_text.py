"""Raw text for the workflow, written as one paragraph per line with a blank line between documents.

- ``gensim``: the real text that ships inside gensim's wheel, so a fresh offline machine has a
  corpus, chosen by language (``--lang``):
  - ``en``: a sample of English Wikipedia articles (MediaWiki XML; redirects skipped, markup
    removed) and the Lee news corpus (``lee_background.cor``, one article per line);
  - ``bg``: the Bulgarian Wikipedia sample (one article, a help page and a long 2005 discussion
    archive; about 28k words), each page section a document (three pages would make three
    documents, too few to split into train/dev/test), signatures and indentation of the
    discussions removed.
  gensim's Russian text (``crime-and-punishment.txt``, about 500 words) is too small to pretrain on.
- ``wikitext``: WikiText-103 (the optional ``wikitext-103`` asset of project.yml), from its raw zip.

    python -m spacy_elmo.training.builtin_text gensim assets/text/en [--lang en] [--max-docs N]
    python -m spacy_elmo.training.builtin_text wikitext assets/wikitext-103-raw-v1.zip assets/wikitext
"""

from __future__ import annotations

import bz2
import itertools
import re
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional

import typer

from spacy_elmo.extras import missing
from spacy_elmo.files import atomic_write_text

WIKIPEDIA_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BULGARIAN_WIKIPEDIA_SAMPLE = "bgwiki-latest-pages-articles-shortened.xml.bz2"
LEE_NEWS = "lee_background.cor"
MIN_PARAGRAPH_WORDS = 5
REDIRECTS = ("#REDIRECT", "#ПРЕНАСОЧВАНЕ")

HEADING_LINE = re.compile(r"^=+[^=\n].*?=+[ \t]*$", re.M)
INDENTATION = re.compile(r"^[:*#]+[ \t]*", re.M)
# <nowiki> holds literal markup: gensim's filter would read a "{{" in it as an unclosed template
# and drop the rest of the page.
NOWIKI = re.compile(r"<nowiki>.*?</nowiki>", re.S)
TIMESTAMP = r"\d{1,2}:\d{2}, \d{1,2} \S+ \d{4}\s*\((?:UTC|УТЦ)\)"
# "--Name 07:40, 1 септември 2005 (UTC)": the name may not hold another dash, so the match starts
# at the last one and never eats the prose before it; a single dash counts only after a space.
SIGNATURE = re.compile(r"\s*(?:--|—|–|(?<!\S)-)(?:(?!--|—|–|\s-\s).){0,120}?" + TIMESTAMP)
UNSIGNED_TIMESTAMP = re.compile(r"\s*" + TIMESTAMP)

Documents = Iterator[List[str]]


class Source(NamedTuple):
    """One built-in text: the file it is written to, what its documents are, and its reader."""

    file: str
    documents_are: str
    read: Callable[[Path], Documents]


def gensim_data_dir() -> Path:
    no_gensim = missing("train", "gensim", "The built-in text (it ships in gensim's wheel)")
    if no_gensim:
        raise SystemExit(no_gensim)
    import gensim

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


def wiki_pages(path: Path) -> Iterator[str]:
    """The markup of every page of a MediaWiki XML dump (.bz2) that is not a redirect. The dump is
    read as bytes so that the XML parser finds its encoding (the Bulgarian sample is UTF-16)."""
    from gensim.corpora.wikicorpus import extract_pages

    with bz2.open(path, "rb") as stream:
        for _, markup, _ in extract_pages(stream):
            if not markup.lstrip().upper().startswith(REDIRECTS):
                yield markup


def wikipedia_sample(data_dir: Path) -> Documents:
    for markup in wiki_pages(data_dir / WIKIPEDIA_SAMPLE):
        paragraphs = clean_wiki_paragraphs(markup)
        if paragraphs:
            yield paragraphs


def wiki_sections(markup: str) -> Documents:
    """The prose of each section of a page, discussion signatures and indentation removed."""
    for section in HEADING_LINE.split(NOWIKI.sub("", markup)):
        paragraphs = [strip_signatures(p) for p in clean_wiki_paragraphs(INDENTATION.sub("", section))]
        paragraphs = [p for p in paragraphs if len(p.split()) >= MIN_PARAGRAPH_WORDS]
        if paragraphs:
            yield paragraphs


def strip_signatures(paragraph: str) -> str:
    return UNSIGNED_TIMESTAMP.sub("", SIGNATURE.sub("", paragraph)).strip()


def bulgarian_wikipedia_sample(data_dir: Path) -> Documents:
    for markup in wiki_pages(data_dir / BULGARIAN_WIKIPEDIA_SAMPLE):
        yield from wiki_sections(markup)


def lee_news(data_dir: Path) -> Documents:
    for line in (data_dir / LEE_NEWS).read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield [line.strip()]


BUILTIN_TEXT: Dict[str, List[Source]] = {
    "en": [
        Source("wikipedia-sample.txt", "Wikipedia articles", wikipedia_sample),
        Source("lee-news.txt", "news articles", lee_news),
    ],
    "bg": [Source("wikipedia-sample.txt", "Wikipedia page sections", bulgarian_wikipedia_sample)],
}


def builtin_sources(lang: str) -> List[Source]:
    if lang not in BUILTIN_TEXT:
        raise ValueError(
            f"No built-in text for language {lang!r} (there is built-in text for: {', '.join(BUILTIN_TEXT)}). Pass "
            "your own text: "
            f"spacy project run all --vars.lang {lang} --vars.text PATH (a .txt file or a folder of them, one "
            "paragraph per line, a blank line between documents)."
        )
    return BUILTIN_TEXT[lang]


def write_documents(path: Path, documents: Iterable[List[str]], max_docs: int = 0) -> int:
    """Write the first ``max_docs`` documents (all where 0) and return how many; the source is read
    no further than that (cleaning a dump's markup is most of this command's work)."""
    chosen = list(itertools.islice(documents, max_docs or None))
    atomic_write_text(path, "\n\n".join("\n".join(doc) for doc in chosen) + "\n")
    return len(chosen)


app = typer.Typer(add_completion=False, no_args_is_help=True)


@app.command()
def gensim(
    output: Path,
    lang: str = typer.Option("en", help="Language of the text: " + ", ".join(BUILTIN_TEXT) + "."),
    max_docs: int = typer.Option(0, min=0, help="Documents per source; 0 for all."),
    corpus_text: Optional[Path] = typer.Option(
        None, help="The text the workflow reads (${vars.text}): nothing is extracted unless it is OUTPUT."
    ),
) -> None:
    """Extract the built-in text of a language from gensim's wheel."""
    if corpus_text is not None and corpus_text.resolve() != output.resolve():
        typer.echo(f"The workflow reads {corpus_text} (--vars.text): no built-in text needed.")
        return
    try:
        sources = builtin_sources(lang)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    data = gensim_data_dir()
    counts = [f"{write_documents(output / s.file, s.read(data), max_docs)} {s.documents_are}" for s in sources]
    typer.echo(f"Wrote {' and '.join(counts)} to {output}")


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
