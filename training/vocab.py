"""The word vocabulary of the LM head: top-K words by count plus <S>, </S> and <UNK>.

Stored as ``vocab.txt``: one ``word<TAB>count`` per line, the three special tokens first, then
words by falling count (the order the log-uniform sampler assumes).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

from spacy_elmo.files import atomic_write_text

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)


@dataclass
class Vocabulary:
    """words[i] is the word of id i; counts[i] its count in the training data (for <UNK>, the
    count of every word left out; for <S> and </S>, the number of sentences)."""

    words: List[str]
    counts: List[int]
    index: Dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if tuple(self.words[:3]) != SPECIALS:
            raise ValueError(f"A vocabulary starts with {SPECIALS}, got {self.words[:3]}.")
        if len(set(self.words)) != len(self.words):
            raise ValueError("The vocabulary lists a word twice.")
        self.index = {word: i for i, word in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    @property
    def unk_id(self) -> int:
        return 2

    def id(self, word: str) -> int:
        return self.index.get(word, 2)

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sequence[str]], max_size: int, min_count: int = 1) -> "Vocabulary":
        """The ``max_size - 3`` most frequent words with at least ``min_count`` occurrences."""
        if max_size < 4:
            raise ValueError(f"max_size must leave room for words besides {SPECIALS}, got {max_size}.")
        counts: Counter = Counter()
        n_sentences = 0
        for sentence in sentences:
            counts.update(sentence)
            n_sentences += 1
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        kept = [(w, c) for w, c in ranked[: max_size - 3] if c >= min_count]
        unk = sum(counts.values()) - sum(c for _, c in kept)
        return cls(
            words=[*SPECIALS, *(w for w, _ in kept)],
            counts=[n_sentences, n_sentences, unk, *(c for _, c in kept)],
        )

    def save(self, path: Path) -> None:
        text = "".join(f"{w}\t{c}\n" for w, c in zip(self.words, self.counts, strict=True))
        atomic_write_text(path, text)

    @classmethod
    def load(cls, path: Path) -> "Vocabulary":
        words, counts = [], []
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise ValueError(f"{path}: vocabulary file not found (run the vocab step first).") from None
        for number, line in enumerate(lines, 1):
            word, sep, count = line.rpartition("\t")
            if not sep or not count.isdigit():
                raise ValueError(f"{path}, line {number}: expected 'word<TAB>count', got {line[:60]!r}.")
            words.append(word)
            counts.append(int(count))
        return cls(words=words, counts=counts)


def main(
    corpus: Path,
    output: Path,
    max_size: int = 50000,
    min_count: int = 1,
) -> None:
    """Count the training shards of CORPUS and write the vocabulary to OUTPUT (vocab.txt)."""
    from .corpus import read_sentences

    vocab = Vocabulary.from_sentences(read_sentences(Path(corpus) / "train"), max_size, min_count)
    vocab.save(Path(output))
    covered = 1 - vocab.counts[2] / max(1, sum(vocab.counts[3:]) + vocab.counts[2])
    print(f"{len(vocab)} entries (3 special); they cover {covered:.2%} of training tokens; wrote {output}")


if __name__ == "__main__":
    import typer

    typer.run(main)
