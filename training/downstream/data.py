"""Downstream data as spaCy DocBins, one sentence per doc.

- UD English-EWT (CoNLL-U): the tagger learns UPOS, stored as ``token.tag_``; training subsets of
  1%, 10% and 100% of the sentences, drawn with a seed and nested (the 1% inside the 10%, the 10% inside all).
- WNUT-17 (``token<TAB>IOB tag``, blank lines between sentences): named entities.
- ``text/``: the tasks' words without labels (EWT + WNUT train / dev / test) as corpus shards, for
  fine-tuning the biLM on the tasks' domain (Peters et al. 2018, Section 3.4). Only the train split
  is trained on; dev picks the checkpoint and test is reported.

    python -m spacy_elmo.training.downstream.data DATA_DIR OUT_DIR
    python -m spacy_elmo.training.downstream.data DATA_DIR OUT_DIR --lang en \
        --upos "ud-english-ewt/en_ewt-ud-{split}.conllu" --ner "wnut17/{split}.conll"

The files are given relative to DATA_DIR, with ``{split}`` for train, dev and test; the language
is the blank pipeline's whose vocabulary the docs use.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple

import spacy
import typer
from spacy.tokens import Doc, DocBin

from spacy_elmo.files import atomic_write_text
from spacy_elmo.tasks.conllu import conllu_docs

from ..corpus import MANIFEST, MAX_SENTENCE_LENGTH, ShardWriter, token_lists

FRACTIONS = (1, 10, 100)
SPLITS = ("train", "dev", "test")
# The files read from the data folder by default, {split} for each of SPLITS.
UPOS_FILES = "ud-english-ewt/en_ewt-ud-{split}.conllu"
NER_FILES = "wnut17/{split}.conll"


def wnut_docs(path: Path, vocab) -> List[Doc]:
    docs = []
    for sentence in _blocks(path):
        words = [line.split("\t")[0] for line in sentence]
        tags = [line.split("\t")[-1] for line in sentence]
        docs.append(Doc(vocab, words=words, ents=tags, sent_starts=[True] + [False] * (len(words) - 1)))
    return docs


def _blocks(path: Path) -> Iterator[List[str]]:
    block: List[str] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def nested_subsets(docs: Sequence[Doc], fractions: Sequence[int], seed: int) -> Dict[int, List[Doc]]:
    """For each percentage, the first that many percent of one seeded shuffle (so they nest)."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    return {f: [docs[i] for i in sorted(order[: max(1, round(len(docs) * f / 100))])] for f in fractions}


def save_task_text(docs_by_split: Dict[str, Sequence[Doc]], output: Path) -> Dict:
    """Unlabeled token lists of each split as corpus shards plus a manifest (spacy_elmo.training.corpus's layout)."""
    manifest: Dict = {
        "pipeline": "gold tokens of UD English-EWT and WNUT-17",
        "max_sentence_length": MAX_SENTENCE_LENGTH,
        "splits": {},
    }
    for split, docs in docs_by_split.items():
        writer = ShardWriter(output / split, shard_size=10000)
        for doc in docs:
            for tokens in token_lists(doc, MAX_SENTENCE_LENGTH):
                writer.add(tokens)
        writer.flush()
        manifest["splits"][split] = {"shards": writer.shards, "sentences": writer.sentences, "tokens": writer.tokens}
    atomic_write_text(output / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def save(docs: Sequence[Doc], path: Path) -> Tuple[int, int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=False).to_disk(path)
    return len(docs), sum(len(d) for d in docs)


def main(
    data: Path = typer.Argument(..., help="The shared data folder (ud-english-ewt/, wnut17/)."),
    output: Path = typer.Argument(..., help="Where the .spacy files go."),
    seed: int = typer.Option(0, help="Seed of the training subsets."),
    lang: str = typer.Option("en", help="Language of the blank pipeline whose vocabulary the docs use."),
    upos: str = typer.Option(UPOS_FILES, help="The UPOS CoNLL-U files in DATA, {split}: train, dev, test."),
    ner: str = typer.Option(NER_FILES, help="The NER files (token<TAB>IOB tag) in DATA, {split}: train, dev, test."),
) -> None:
    vocab = spacy.blank(lang).vocab
    upos_docs = {split: conllu_docs(data / upos.format(split=split), vocab) for split in SPLITS}
    for fraction, docs in nested_subsets(upos_docs["train"], FRACTIONS, seed).items():
        typer.echo(f"upos train {fraction}%: {save(docs, output / f'upos-train-{fraction}.spacy')}")
    for split in ("dev", "test"):
        typer.echo(f"upos {split}: {save(upos_docs[split], output / f'upos-{split}.spacy')}")
    text = {split: list(docs) for split, docs in upos_docs.items()}
    for split in SPLITS:
        docs = wnut_docs(data / ner.format(split=split), vocab)
        text[split].extend(docs)
        typer.echo(f"ner {split}: {save(docs, output / f'ner-{split}.spacy')}")
    splits = save_task_text(text, output / "text")["splits"]
    sizes = ", ".join(f"{split} {info['tokens']:,} tokens" for split, info in splits.items())
    typer.echo(f"task text (unlabeled): {sizes}")


if __name__ == "__main__":
    typer.run(main)
