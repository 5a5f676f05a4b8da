"""What a newcomer wants to see from a freshly packaged ELMo pipeline.

1. The packaged wheel installs (into a private directory) and ``spacy.load(name)`` works.
2. A polysemous word in different contexts: the nearest neighbours of each occurrence among all
   the tokens of held-out sentences, by ELMo vector, next to the context-free neighbours of layer 0
   (as in Table 4 of the paper).
3. Sentence similarities: the cosine of sentence vectors for pairs that share a word in different
   senses, and pairs that share a sense.

    python -m training.demo packages/ --name en_elmo_sample --corpus corpus/test --output metrics/demo.txt
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import typer
from spacy.tokens import Doc

from .corpus import read_sentences
from .vocab import write_text_atomically

POLYSEMOUS = ["play", "bank", "state", "party", "power", "right", "field", "light", "court", "order", "record", "plant", "interest", "match", "lead", "fire", "case", "spring"]
PAIRS = [
    ("The bank raised its interest rates.", "The central bank cut rates again."),
    ("We walked along the bank of the river.", "The bank raised its interest rates."),
    ("She plays the violin in an orchestra.", "He plays the guitar in a band."),
    ("She plays the violin in an orchestra.", "The team plays its last match on Sunday."),
    ("The court ruled against the government.", "The judge adjourned the court."),
    ("The court ruled against the government.", "They played tennis on a clay court."),
]


def load_packaged(packages: Path, name: str):
    """pip-install the wheel into a temporary directory (not the environment) and load it by name."""
    import spacy

    wheels = sorted(Path(packages).glob(f"{name}*/dist/*.whl")) or sorted(Path(packages).glob("**/*.whl"))
    if not wheels:
        raise SystemExit(f"No wheel for {name} under {packages}: run the package step first.")
    target = tempfile.mkdtemp(prefix="elmo-demo-")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, str(wheels[-1])], check=True)
    sys.path.insert(0, target)
    return spacy.load(name), wheels[-1]


def reference_tokens(nlp, corpus: Path, max_sentences: int) -> Tuple[np.ndarray, np.ndarray, List[Tuple[str, str]]]:
    """Mixed and layer-0 vectors (unit length) of every token of up to ``max_sentences`` sentences,
    and (word, sentence) for each."""
    sentences = [s for _, s in zip(range(max_sentences), read_sentences(corpus)) if 3 <= len(s) <= 60]
    docs = nlp.pipe(Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)) for words in sentences)
    mixed, static, labels = [], [], []
    for doc in docs:
        text = doc.text
        for token in doc:
            mixed.append(token._.elmo)
            static.append(token._.elmo_layers[0])
            labels.append((token.text, text))
    return _unit(np.array(mixed)), _unit(np.array(static)), labels


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def neighbours(query: np.ndarray, index: np.ndarray, labels, exclude: str, k: int) -> List[Tuple[float, str, str]]:
    scores = index @ query
    found = []
    for position in np.argsort(-scores):
        word, sentence = labels[position]
        if sentence != exclude:
            found.append((float(scores[position]), word, sentence))
        if len(found) == k:
            break
    return found


def snippet(sentence: str, word: str, width: int = 70) -> str:
    at = max(0, sentence.lower().find(word.lower()) - width // 3)
    text = sentence[at : at + width]
    return ("..." if at else "") + text + ("..." if at + width < len(sentence) else "")


def polysemy_report(mixed, static, labels, k: int, n_words: int) -> List[str]:
    lines = []
    occurrences = {}
    for position, (word, sentence) in enumerate(labels):
        if word.lower() in POLYSEMOUS:
            occurrences.setdefault(word.lower(), {}).setdefault(sentence, position)
    chosen = [w for w in POLYSEMOUS if len(occurrences.get(w, {})) >= 2][:n_words]
    for word in chosen:
        contexts = list(occurrences[word].items())[:2]
        lines.append(f"== '{word}': nearest tokens of held-out text, by vector ==")
        first_position = contexts[0][1]
        lines.append("  layer 0 (context-free; the same in every context): " + ", ".join(
            f"{w} ({s:.3f})" for s, w, _ in neighbours(static[first_position], static, labels, contexts[0][0], k)))
        for sentence, position in contexts:
            lines.append(f"  ELMo in: \"{snippet(sentence, word)}\"")
            for score, neighbour, other in neighbours(mixed[position], mixed, labels, sentence, k):
                lines.append(f"      {score:.3f}  {neighbour:<14} \"{snippet(other, neighbour)}\"")
        lines.append("")
    if not chosen:
        lines.append("(no polysemous word from the list occurs twice in the reference sentences)")
    return lines


def similarity_report(nlp) -> List[str]:
    lines = ["== sentence similarities (Doc.similarity: cosine of ELMo sentence vectors) =="]
    for first, second in PAIRS:
        lines.append(f"  {nlp(first).similarity(nlp(second)):.3f}  \"{first}\" ~ \"{second}\"")
    return lines


def main(
    packages: Path = typer.Argument(..., help="The package step's output directory."),
    name: str = typer.Option(..., help="The package name, e.g. en_elmo_sample."),
    corpus: Path = typer.Option(..., help="Held-out shards for the neighbour search (corpus/test)."),
    max_sentences: int = typer.Option(2000),
    neighbours_k: int = typer.Option(5, "--neighbours"),
    words: int = typer.Option(2, help="How many polysemous words to show."),
    output: Optional[Path] = typer.Option(None, help="Also write the report here."),
    perplexity: Optional[Path] = typer.Option(None, help="The evaluate step's JSON, to say how trained the biLM is."),
) -> None:
    nlp, wheel = load_packaged(packages, name)
    report = [f"Loaded {name} from {wheel.name}: pipeline {nlp.pipe_names}"]
    if perplexity and perplexity.is_file():
        scores = json.loads(perplexity.read_text())
        report.append(
            f"Its biLM: test perplexity {scores['perplexity']:.1f} (a unigram model: {scores['unigram_perplexity']:.1f}). "
            "Neighbours grow sharper with training: the `full` workflow, or more text."
        )
    report.append("")
    mixed, static, labels = reference_tokens(nlp, corpus, max_sentences)
    report += [f"Reference: {len(labels):,} tokens of held-out sentences.", ""]
    report += polysemy_report(mixed, static, labels, neighbours_k, words)
    report += similarity_report(nlp)
    text = "\n".join(report) + "\n"
    if output:
        write_text_atomically(output, text)
    typer.echo(text)


if __name__ == "__main__":
    typer.run(main)
