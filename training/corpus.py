"""Raw text -> sentences -> tokens, cut by the target pipeline's own tokenizer and sentence
splitter (so pretraining sees the tokens the ``elmo`` component will see), written as shards.

Input: UTF-8 text files (or folders of .txt), one paragraph per line; blank lines separate
documents. Lines that are not valid UTF-8 are skipped and counted. Whitespace tokens are dropped
(the component never shows them to the biLM) and sentences longer than ``max_sentence_length``
tokens are cut into pieces, as at inference.

Output: ``OUT/<split>/shard-00000.jsonl`` (a JSON list of tokens per line) and
``OUT/manifest.json`` (written last: its presence means the corpus is complete).

    python -m spacy_elmo.training.corpus OUT --train a.txt --dev b.txt --test c.txt [--pipeline en]
    python -m spacy_elmo.training.corpus OUT --source texts/ --split 0.98,0.01,0.01
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import typer

from spacy_elmo.files import atomic_write_text
from spacy_elmo.progress import progress_bar

SPLITS = ("train", "dev", "test")
MANIFEST = "manifest.json"
MAX_SENTENCE_LENGTH = 256  # the component's default max_sentence_length


def load_splitter(pipeline: str = "en"):
    """A spaCy pipeline that tokenizes and sets sentence boundaries: a language code gives a blank
    pipeline with a sentencizer; a pipeline name or path keeps only its sentence-setting
    components (adding a sentencizer if it has none)."""
    import spacy

    if len(pipeline) <= 3 and pipeline.isalpha():
        nlp = spacy.blank(pipeline)
        nlp.add_pipe("sentencizer")
        return nlp
    nlp = spacy.load(pipeline)
    setters = [name for name in nlp.pipe_names if _sets_sentences(nlp, name)]
    nlp.select_pipes(enable=setters)
    if not setters:
        nlp.add_pipe("sentencizer")
    return nlp


def _sets_sentences(nlp, name: str) -> bool:
    assigns = nlp.get_pipe_meta(name).assigns
    return any(a in assigns for a in ("token.is_sent_start", "token.sent_start", "token.dep"))


def read_paragraphs(path: Path, stats: Dict[str, int]) -> Iterator[Optional[str]]:
    """Lines of a UTF-8 text file; None at a document break (a blank line). Lines that are not
    valid UTF-8 are skipped and counted in ``stats["invalid_lines"]``."""
    with open(path, "rb") as stream:
        for raw in stream:
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                stats["invalid_lines"] = stats.get("invalid_lines", 0) + 1
                continue
            yield line or None


def text_files(sources: Sequence[Path]) -> List[Path]:
    files: List[Path] = []
    for source in map(Path, sources):
        if source.is_dir():
            files.extend(sorted(p for p in source.rglob("*.txt") if p.is_file()))
        elif source.is_file():
            files.append(source)
        else:
            raise ValueError(f"{source}: no such file or directory.")
    if not files:
        raise ValueError(f"No .txt files found in {[str(s) for s in sources]}.")
    return files


def documents(files: Sequence[Path], stats: Dict[str, int]) -> Iterator[List[str]]:
    """Each document as its list of paragraphs."""
    for path in files:
        paragraphs: List[str] = []
        for line in read_paragraphs(path, stats):
            if line is None:
                if paragraphs:
                    yield paragraphs
                paragraphs = []
            else:
                paragraphs.append(line)
        if paragraphs:
            yield paragraphs


def token_lists(tokens: Iterable, max_sentence_length: int) -> Iterator[List[str]]:
    """The texts of a sentence's spaCy tokens, whitespace tokens left out, cut into pieces of at most
    ``max_sentence_length`` (as the component shows them to the biLM)."""
    texts = [token.text for token in tokens if not token.is_space]
    for start in range(0, len(texts), max_sentence_length):
        yield texts[start : start + max_sentence_length]


def sentences(nlp, paragraphs: Iterable[str], max_sentence_length: int, batch_size: int = 256) -> Iterator[List[str]]:
    """Token lists of the sentences in ``paragraphs``, whitespace tokens left out, long ones cut."""
    for doc in nlp.pipe(paragraphs, batch_size=batch_size):
        for sentence in doc.sents:
            yield from token_lists(sentence, max_sentence_length)


class ShardWriter:
    """Writes ``shard-00000.jsonl``... of ``shard_size`` sentences each, every file atomically."""

    def __init__(self, directory: Path, shard_size: int) -> None:
        self.directory, self.shard_size = directory, shard_size
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("shard-*.jsonl"):
            old.unlink()
        self.buffer: List[str] = []
        self.shards = self.sentences = self.tokens = 0

    def add(self, tokens: List[str]) -> None:
        self.buffer.append(json.dumps(tokens, ensure_ascii=False))
        self.sentences += 1
        self.tokens += len(tokens)
        if len(self.buffer) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            atomic_write_text(self.directory / f"shard-{self.shards:05d}.jsonl", "\n".join(self.buffer) + "\n")
            self.shards += 1
            self.buffer = []


def prepare_corpus(
    output: Path,
    splits: Dict[str, List[Path]],
    pipeline: str = "en",
    shard_size: int = 10000,
    max_sentence_length: int = MAX_SENTENCE_LENGTH,
) -> Dict:
    """Tokenize and shard each split's files. Returns the manifest."""
    output = Path(output)
    (output / MANIFEST).unlink(missing_ok=True)
    nlp = load_splitter(pipeline)
    manifest: Dict = {"pipeline": pipeline, "max_sentence_length": max_sentence_length, "splits": {}}
    for split, sources in splits.items():
        files = text_files(sources)
        stats: Dict[str, int] = {"invalid_lines": 0}
        writer = ShardWriter(output / split, shard_size)
        paragraphs = (p for document in documents(files, stats) for p in document)
        progress = progress_bar(
            sentences(nlp, paragraphs, max_sentence_length), desc=f"{split} sentences", unit=" sent"
        )
        for tokens in progress:
            if tokens:
                writer.add(tokens)
        writer.flush()
        manifest["splits"][split] = {
            "sources": [str(f) for f in files],
            "shards": writer.shards,
            "sentences": writer.sentences,
            "tokens": writer.tokens,
            "invalid_lines_skipped": stats["invalid_lines"],
        }
    atomic_write_text(output / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def split_by_document(
    sources: Sequence[Path], output: Path, fractions: Tuple[float, float, float], seed: int = 13
) -> Dict[str, List[Path]]:
    """Assign whole documents of ``sources`` to train/dev/test at random (seeded), writing one
    text file per split under ``output/raw``; returns the files per split."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"--split needs three non-negative fractions summing to 1, got {fractions}.")
    stats: Dict[str, int] = {}
    docs = list(documents(text_files(sources), stats))
    rng = random.Random(seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    sizes = _split_sizes(len(docs), fractions)
    parts = {
        "train": order[: sizes[0]],
        "dev": order[sizes[0] : sizes[0] + sizes[1]],
        "test": order[sizes[0] + sizes[1] :],
    }
    files = {}
    for split, indices in parts.items():
        path = Path(output) / "raw" / f"{split}.txt"
        atomic_write_text(path, "\n\n".join("\n".join(docs[i]) for i in sorted(indices)) + "\n")
        files[split] = [path]
    return files


def _split_sizes(n_docs: int, fractions: Tuple[float, float, float]) -> List[int]:
    """Documents per split: by fraction, but at least one for every split whose fraction is > 0."""
    wanted = sum(1 for f in fractions if f > 0)
    if n_docs < wanted:
        raise ValueError(
            f"{n_docs} documents cannot fill {wanted} splits; give more text (documents are separated by blank lines)."
        )
    sizes = [max(1, round(n_docs * f)) if f > 0 else 0 for f in fractions[1:]]
    return [n_docs - sum(sizes), *sizes]


def read_sentences(directory: Path) -> Iterator[List[str]]:
    """All sentences of a split directory, shard after shard."""
    for shard in shard_paths(directory):
        yield from read_shard(shard)


def shard_paths(directory: Path) -> List[Path]:
    paths = sorted(Path(directory).glob("shard-*.jsonl"))
    if not paths:
        raise ValueError(f"{directory}: no shard-*.jsonl files (run the corpus step first).")
    return paths


def read_shard(path: Path) -> Iterator[List[str]]:
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            try:
                tokens = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {number}: not a JSON list of tokens ({err}).") from None
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError(f"{path}, line {number}: expected a JSON list of token strings.")
            yield tokens


app = typer.Typer(add_completion=False)


@app.command()
def main(
    output: Path = typer.Argument(..., help="Directory for the shards and manifest.json."),
    train: List[Path] = typer.Option([], help="Training text files or folders."),
    dev: List[Path] = typer.Option([], help="Development text."),
    test: List[Path] = typer.Option([], help="Test text."),
    source: List[Path] = typer.Option(
        [], help="Text to split into train/dev/test by document (instead of --train/--dev/--test)."
    ),
    split: str = typer.Option("0.98,0.01,0.01", help="Fractions of documents for train, dev, test with --source."),
    pipeline: str = typer.Option("en", help="Language code (blank pipeline + sentencizer) or a spaCy pipeline."),
    shard_size: int = typer.Option(10000, help="Sentences per shard."),
    max_sentence_length: int = typer.Option(MAX_SENTENCE_LENGTH, help="Longer sentences are cut into pieces."),
    seed: int = typer.Option(13, help="Seed of the document split."),
) -> None:
    """Prepare a pretraining corpus."""
    if source:
        splits = split_by_document(source, output, tuple(float(f) for f in split.split(",")), seed)
    else:
        splits = {name: files for name, files in zip(SPLITS, (train, dev, test), strict=True) if files}
    if "train" not in splits:
        raise typer.BadParameter("give --train files (and --dev/--test), or --source to split.")
    manifest = prepare_corpus(output, splits, pipeline, shard_size, max_sentence_length)
    for name, info in manifest["splits"].items():
        typer.echo(
            f"{name}: {info['sentences']} sentences, {info['tokens']} tokens, {info['shards']} shards, "
            f"{info['invalid_lines_skipped']} invalid lines skipped"
        )


if __name__ == "__main__":
    app()
