"""What a newcomer wants to see from a freshly packaged ELMo pipeline.

1. The packaged wheel installs (into a private directory) and ``spacy.load(name)`` works.
2. Words in two senses, side by side: for each sense, the word's nearest neighbours among the
   tokens of held-out sentences by ELMo vector (as in Table 4 of the paper), next to the
   context-free neighbours of layer 0; and whether the two uses of one sense are closer to each
   other than to the other sense's. Neighbours are content words with words on both sides: at a
   sentence's edge the context is a full stop, and every sentence-final word looks alike. A small
   held-out split is topped up with training sentences.
3. Sentence similarities: the cosine of sentence vectors for pairs that share a word in different
   senses, and pairs that share a sense.

The words, their sense sentences and the sentence pairs come from a table per language
(spacy_elmo.training.packaging.demo_text); for a language without one, the most frequent content words of the
reference text are shown in two of their contexts, and there are no sentence pairs.

    python -m spacy_elmo.training.packaging.demo packages/ --name en_elmo_sample --corpus corpus/test \
        --top-up corpus/train --output metrics/demo.txt
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import typer
from spacy.tokens import Doc

from spacy_elmo.files import atomic_write_text

from ..corpus import read_sentences
from ..downstream.vectors import row_cosines
from .demo_text import DEMO_TEXT

MIN_REFERENCE_TOKENS = 10000


def load_packaged(packages: Path, name: str):
    """pip-install the wheel into a temporary directory (not the environment) and load it by name."""
    import spacy

    wheels = sorted(Path(packages).glob(f"{name}*/dist/*.whl")) or sorted(Path(packages).glob("**/*.whl"))
    if not wheels:
        raise SystemExit(f"No wheel for {name} under {packages}: run the package step first.")
    target = tempfile.mkdtemp(prefix="elmo-demo-")
    atexit.register(shutil.rmtree, target, True)  # imported from there until the process ends
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, str(wheels[-1])], check=True
    )
    sys.path.insert(0, target)
    return spacy.load(name), wheels[-1]


def reference_sentences(
    corpus: Path, top_up: Optional[Path], max_sentences: int, min_tokens: int
) -> Tuple[List[List[str]], int]:
    """The sentences of 3 to 60 tokens among the first ``max_sentences`` held-out ones, then, while
    they hold fewer than ``min_tokens`` tokens, sentences from ``top_up``; and how many are held out."""
    sentences = [s for s in islice(read_sentences(corpus), max_sentences) if 3 <= len(s) <= 60]
    held_out, tokens = len(sentences), sum(map(len, sentences))
    if top_up is None or tokens >= min_tokens:
        return sentences, held_out
    for sentence in read_sentences(top_up):
        if tokens >= min_tokens or len(sentences) >= max_sentences:
            break
        if 3 <= len(sentence) <= 60:
            sentences.append(sentence)
            tokens += len(sentence)
    return sentences, held_out


class Reference(NamedTuple):
    """The tokens neighbours are searched among: unit-length ELMo vectors (``token.vector``: the mix,
    centred as the pipeline's elmo component says) (N, D), unit-length layer-0 vectors centred on
    ``static_mean`` (N, D'), and (word, sentence) for each of the N tokens."""

    mixed: np.ndarray
    static: np.ndarray
    static_mean: np.ndarray
    labels: List[Tuple[str, str]]


def meaningful_positions(doc) -> List[int]:
    """Content words (alphabetic, not stop words) with a word on either side in their sentence."""
    words = [token.i for token in doc if token.is_alpha]
    inner = set(words[1:-1])
    return [token.i for token in doc if token.i in inner and not token.is_stop]


def reference_tokens(nlp, sentences: List[List[str]]) -> Reference:
    """The meaningful positions (``meaningful_positions``) of ``sentences``."""
    docs = nlp.pipe(Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)) for words in sentences)
    mixed, static, labels = [], [], []
    for doc in docs:
        for i in meaningful_positions(doc):
            mixed.append(doc[i].vector)
            static.append(doc[i]._.elmo_layers[0])
            labels.append((doc[i].text, doc.text))
    static_array = np.array(static)
    mean = static_array.mean(axis=0)
    return Reference(_unit(np.array(mixed)), _unit(static_array - mean), mean, labels)


def word_vectors(nlp, sentence: str, word: str, reference: Reference) -> Tuple[np.ndarray, np.ndarray]:
    """The unit ELMo vector and the unit centred layer-0 vector of ``word``'s first occurrence in
    ``sentence``, as the reference's vectors are made."""
    doc = nlp(sentence)
    found = [token for token in doc if token.lower_ == word.lower()]
    if not found:
        raise ValueError(f"The demo sentence {sentence!r} has no token {word!r}; fix its table in demo_text.py.")
    token = found[0]
    static = token._.elmo_layers[0] - reference.static_mean
    return _unit(token.vector[None])[0], _unit(static[None])[0]


def centering_summary(nlp) -> str:
    """What token.vector and .similarity compare, in a sentence."""
    centering = nlp.get_pipe("elmo").centering
    if centering is None:
        return "Vectors: raw ELMo mixes (the pipeline's elmo component does not centre them)."
    removed = f" and the top {len(centering.directions)} principal directions" if len(centering.directions) else ""
    return (
        f"Vectors: ELMo mixes with their mean{removed} removed (estimated on {centering.tokens:,} tokens of "
        "training text), as token.vector and .similarity give them."
    )


def reference_summary(sentences: List[List[str]], held_out: int, min_tokens: int) -> str:
    total = sum(map(len, sentences))
    if held_out == len(sentences):
        return f"Reference: {total:,} tokens of held-out sentences."
    kept = sum(map(len, sentences[:held_out]))
    return (
        f"Reference: {total:,} tokens: {kept:,} of held-out sentences (fewer than {min_tokens:,}), "
        f"topped up with {total - kept:,} of training sentences."
    )


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def neighbours(
    query: np.ndarray, index: np.ndarray, labels, exclude: str, k: int, distinct: bool = False
) -> List[Tuple[float, str, str]]:
    """The ``k`` tokens of ``index`` (unit rows) nearest to ``query``, none from the sentence
    ``exclude``; ``distinct``: each word once (for context-free vectors, the same for every
    occurrence of a word)."""
    scores = index @ query
    found, seen = [], set()
    for position in np.argsort(-scores):
        word, sentence = labels[position]
        if sentence != exclude and not (distinct and word in seen):
            found.append((float(scores[position]), word, sentence))
            seen.add(word)
        if len(found) == k:
            break
    return found


def snippet(sentence: str, word: str, width: int = 70) -> str:
    at = max(0, sentence.lower().find(word.lower()) - width // 3)
    text = sentence[at : at + width]
    return ("..." if at else "") + text + ("..." if at + width < len(sentence) else "")


def frequent_words(labels: List[Tuple[str, str]], n: int) -> List[str]:
    """The ``n`` most frequent lowercased words of the reference (content words already: ``reference_tokens``)."""
    return [word for word, _ in Counter(word.lower() for word, _ in labels).most_common(n)]


def side_by_side(left: List[str], right: List[str]) -> List[str]:
    """Two columns of lines, the left one padded to its longest line."""
    rows, width = max(len(left), len(right)), max(map(len, left))
    left, right = left + [""] * (rows - len(left)), right + [""] * (rows - len(right))
    return [f"  {a:<{width}} | {b}".rstrip() for a, b in zip(left, right, strict=True)]


def neighbour_lines(query: np.ndarray, reference: Reference, k: int, exclude: str = "") -> List[str]:
    """The ``k`` nearest tokens of the reference (none from the sentence ``exclude``), a row each."""
    return [
        f"  {score:.3f} {word:<12} {snippet(sentence, word, 30)}"
        for score, word, sentence in neighbours(query, reference.mixed, reference.labels, exclude, k)
    ]


def sense_agreement(vectors: Sequence[Sequence[np.ndarray]]) -> Tuple[List[float], float]:
    """Cosines of the two uses within each sense, and the mean cosine across the senses (of 4 pairs)."""
    within = [float(a @ b) for a, b in vectors]
    across = float(np.mean([a @ b for a in vectors[0] for b in vectors[1]]))
    return within, across


def senses_report(nlp, word: str, senses, reference: Reference, k: int) -> Tuple[List[str], bool]:
    """A word in its two senses, side by side; and whether each sense's two uses are closer to each
    other than the senses are on average."""
    vectors = [[word_vectors(nlp, sentence, word, reference) for sentence in sense.sentences] for sense in senses]
    within, across = sense_agreement([[mixed for mixed, _ in sense] for sense in vectors])
    told_apart = min(within) > across
    static_neighbours = neighbours(vectors[0][0][1], reference.static, reference.labels, "", k, distinct=True)
    lines = [
        f"== '{word}' in two senses ==",
        "  the same sense in two sentences: "
        + ", ".join(f"{sense.gloss} {cosine:.3f}" for sense, cosine in zip(senses, within, strict=True))
        + f"; across the senses: {across:.3f} (mean of 4) -> "
        + ("told apart" if told_apart else "NOT told apart"),
        "  layer 0 (context-free, the same in both senses): "
        + ", ".join(f"{w} ({s:.3f})" for s, w, _ in static_neighbours),
    ]
    columns = [
        [f'{sense.gloss}: "{sense.sentences[0]}"', *neighbour_lines(vecs[0][0], reference, k)]
        for sense, vecs in zip(senses, vectors, strict=True)
    ]
    return lines + side_by_side(*columns) + [""], told_apart


def contexts_report(word: str, reference: Reference, k: int) -> List[str]:
    """A word of the reference text in two of its sentences, side by side (no sense table)."""
    positions: Dict[str, int] = {}
    for position, (token, sentence) in enumerate(reference.labels):
        if token.lower() == word:
            positions.setdefault(sentence, position)
    if len(positions) < 2:
        return []
    columns = []
    for sentence, position in list(positions.items())[:2]:
        rows = neighbour_lines(reference.mixed[position], reference, k, exclude=sentence)
        columns.append([f'"{snippet(sentence, word, 50)}"', *rows])
    return [f"== '{word}' in two sentences of the reference text ==", *side_by_side(*columns), ""]


def similarity_report(nlp, pairs: Sequence[Tuple[str, str]]) -> List[str]:
    """Doc.similarity of each pair, and the cosine of the raw sentence vectors (doc._.elmo) beside
    it when the pipeline centres its vectors."""
    centred = nlp.get_pipe("elmo").centering is not None
    lines = [
        "== sentence similarities (Doc.similarity: cosine of ELMo sentence vectors"
        + ("; in brackets, of the raw vectors before centring) ==" if centred else ") ==")
    ]
    for first, second in pairs:
        a, b = nlp(first), nlp(second)
        raw = f" (raw {row_cosines(a._.elmo[None], b._.elmo[None])[0]:.3f})" if centred else ""
        lines.append(f'  {a.similarity(b):.3f}{raw}  "{first}" ~ "{second}"')
    return lines


def word_and_sentence_report(nlp, reference: Reference, k: int, n_words: int, described: str) -> List[str]:
    """Words in two senses and sentence pairs from the language's table; without one, frequent words."""
    table = DEMO_TEXT.get(nlp.lang)
    heading = f"Nearest neighbours: tokens of the {described}, content words with a word on either side, by cosine."
    if table is None:
        words = frequent_words(reference.labels, 50)
        shown = [lines for lines in (contexts_report(w, reference, k) for w in words) if lines][:n_words]
        return [
            f"(no word list for language '{nlp.lang}' in training/packaging/demo_text.py: showing the most frequent "
            "content words of the reference text)",
            heading,
            "",
            *(line for lines in shown for line in lines),
            f"(no sentence pairs for language '{nlp.lang}': add them to training/packaging/demo_text.py)",
        ]
    lines, told_apart = [heading, ""], 0
    for word, senses in list(table.senses.items())[:n_words]:
        word_lines, apart = senses_report(nlp, word, senses, reference, k)
        lines, told_apart = lines + word_lines, told_apart + apart
    shown = min(n_words, len(table.senses))
    lines.append(f"Senses told apart (each sense's two uses closer than across): {told_apart} of {shown} words.")
    return lines + [""] + similarity_report(nlp, table.pairs)


def main(
    packages: Path = typer.Argument(..., help="The package step's output directory."),
    name: str = typer.Option(..., help="The package name, e.g. en_elmo_sample."),
    corpus: Path = typer.Option(..., help="Held-out shards for the neighbour search (corpus/test)."),
    top_up: Optional[Path] = typer.Option(
        None, help="Training shards (corpus/train) to add while the held-out text is smaller than --min-tokens."
    ),
    min_tokens: int = typer.Option(
        MIN_REFERENCE_TOKENS, help="With --top-up: add training sentences until the reference has this many tokens."
    ),
    max_sentences: int = typer.Option(2000),
    neighbours_k: int = typer.Option(5, "--neighbours"),
    words: int = typer.Option(6, help="How many words to show in two senses (or contexts)."),
    output: Optional[Path] = typer.Option(None, help="Also write the report here."),
    perplexity: Optional[Path] = typer.Option(None, help="The evaluate step's JSON, to say how trained the biLM is."),
) -> None:
    nlp, wheel = load_packaged(packages, name)
    report = [f"Loaded {name} from {wheel.name}: pipeline {nlp.pipe_names}"]
    if perplexity and perplexity.is_file():
        scores = json.loads(perplexity.read_text())
        report.append(
            f"Its biLM: test perplexity {scores['perplexity']:.1f} (a unigram model: "
            f"{scores['unigram_perplexity']:.1f}). "
            "Neighbours grow sharper with training: the `full` workflow, or more text."
        )
    report.append("")
    sentences, held_out = reference_sentences(corpus, top_up, max_sentences, min_tokens)
    reference = reference_tokens(nlp, sentences)
    report += [reference_summary(sentences, held_out, min_tokens), centering_summary(nlp), ""]
    described = "held-out text" if held_out == len(sentences) else "reference text"
    report += word_and_sentence_report(nlp, reference, neighbours_k, words, described)
    text = "\n".join(report) + "\n"
    if output:
        atomic_write_text(output, text)
    typer.echo(text)


if __name__ == "__main__":
    typer.run(main)
