"""What a newcomer wants to see from a freshly packaged ELMo pipeline.

1. The packaged wheel installs (into a private directory) and ``spacy.load(name)`` works.
2. A polysemous word in different contexts: the nearest neighbours of each occurrence among all
   the tokens of held-out sentences, by ELMo vector, next to the context-free neighbours of layer 0
   (as in Table 4 of the paper). A small held-out split is topped up with training sentences.
3. Sentence similarities: the cosine of sentence vectors for pairs that share a word in different
   senses, and pairs that share a sense.

The words and sentence pairs come from a table per language (the pipeline's ``lang``); for a
language without one, the most frequent content words of the reference text stand in and there
are no sentence pairs.

    python -m training.packaging.demo packages/ --name en_elmo_sample --corpus corpus/test \
        --top-up corpus/train --output metrics/demo.txt
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import typer
from spacy.tokens import Doc

from spacy_elmo.files import atomic_write_text

from ..corpus import read_sentences
from ..downstream.vectors import row_cosines


class DemoText(NamedTuple):
    """What the demo shows for one language: polysemous words (the first ones that occur in two
    reference sentences are shown) and sentence pairs sharing a word in the same or another sense."""

    polysemous: Sequence[str]
    pairs: Sequence[Tuple[str, str]]


DEMO_TEXT: Dict[str, DemoText] = {
    "en": DemoText(
        [
            "play",
            "bank",
            "state",
            "party",
            "power",
            "right",
            "field",
            "light",
            "court",
            "order",
            "record",
            "plant",
            "interest",
            "match",
            "lead",
            "fire",
            "case",
            "spring",
        ],
        [
            ("The bank raised its interest rates.", "The central bank cut rates again."),
            ("We walked along the bank of the river.", "The bank raised its interest rates."),
            ("She plays the violin in an orchestra.", "He plays the guitar in a band."),
            ("She plays the violin in an orchestra.", "The team plays its last match on Sunday."),
            ("The court ruled against the government.", "The judge adjourned the court."),
            ("The court ruled against the government.", "They played tennis on a clay court."),
        ],
    ),
    # The built-in Bulgarian text (a calendar article and Wikipedia discussions) has the first words
    # in both senses: страна country / side, ред order / line, стил calendar / writing style. The
    # last four are classic homonyms for other Bulgarian text: hair / scythe, key / spring, bank /
    # jar, onion / bow. spaCy's Bulgarian tokenizer keeps "стил." and "текст." whole (abbreviations),
    # so no pair ends with them.
    "bg": DemoText(
        [
            "страна",
            "ред",
            "стил",
            "право",
            "страни",
            "време",
            "език",
            "връзка",
            "точка",
            "свят",
            "карти",
            "глава",
            "коса",
            "ключ",
            "банка",
            "лук",
        ],
        [
            ("България е малка страна в Европа.", "Гърция е малка страна на Балканите."),
            ("България е малка страна в Европа.", "От друга страна, статията е твърде кратка."),
            ("Имената са подредени по азбучен ред.", "Статиите в категорията са по азбучен ред."),
            ("Имената са подредени по азбучен ред.", "Под картинката има само един ред текст и таблица."),
            (
                "Статиите трябва да са написани в енциклопедичен стил и на български език.",
                "Авторът пише в лек и приятен стил, без чуждици.",
            ),
            (
                "Статиите трябва да са написани в енциклопедичен стил и на български език.",
                "В България календарът по нов стил е въведен през 1916 година.",
            ),
        ],
    ),
}
MIN_REFERENCE_TOKENS = 10000


def load_packaged(packages: Path, name: str):
    """pip-install the wheel into a temporary directory (not the environment) and load it by name."""
    import spacy

    wheels = sorted(Path(packages).glob(f"{name}*/dist/*.whl")) or sorted(Path(packages).glob("**/*.whl"))
    if not wheels:
        raise SystemExit(f"No wheel for {name} under {packages}: run the package step first.")
    target = tempfile.mkdtemp(prefix="elmo-demo-")
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
    sentences = [s for _, s in zip(range(max_sentences), read_sentences(corpus)) if 3 <= len(s) <= 60]
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


def reference_tokens(nlp, sentences: List[List[str]]) -> Tuple[np.ndarray, np.ndarray, List[Tuple[str, str]]]:
    """Unit-length ELMo vectors (``token.vector``: the mix, centred as the pipeline's elmo component
    says) and layer-0 vectors (centred on their own mean over these tokens) of every token of
    ``sentences``, and (word, sentence) for each."""
    docs = nlp.pipe(Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)) for words in sentences)
    mixed, static, labels = [], [], []
    for doc in docs:
        text = doc.text
        for token in doc:
            mixed.append(token.vector)
            static.append(token._.elmo_layers[0])
            labels.append((token.text, text))
    static = np.array(static)
    return _unit(np.array(mixed)), _unit(static - static.mean(axis=0)), labels


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


def frequent_content_words(labels: List[Tuple[str, str]], stop_words, n: int) -> List[str]:
    """The ``n`` most frequent lowercased alphabetic tokens that are not stop words."""
    counts = Counter(word.lower() for word, _ in labels if word.isalpha() and word.lower() not in stop_words)
    return [word for word, _ in counts.most_common(n)]


def polysemy_report(
    mixed, static, labels, k: int, n_words: int, candidates: Sequence[str], reference: str
) -> List[str]:
    lines = []
    occurrences = {}
    for position, (word, sentence) in enumerate(labels):
        if word.lower() in candidates:
            occurrences.setdefault(word.lower(), {}).setdefault(sentence, position)
    chosen = [w for w in candidates if len(occurrences.get(w, {})) >= 2][:n_words]
    for word in chosen:
        contexts = list(occurrences[word].items())[:2]
        lines.append(f"== '{word}': nearest tokens of {reference}, by cosine of their vectors ==")
        static_neighbours = neighbours(static[contexts[0][1]], static, labels, contexts[0][0], k, distinct=True)
        lines.append(
            "  layer 0 (context-free; the same in every context; centred): "
            + ", ".join(f"{w} ({s:.3f})" for s, w, _ in static_neighbours)
        )
        for sentence, position in contexts:
            lines.append(f'  ELMo in: "{snippet(sentence, word)}"')
            for score, neighbour, other in neighbours(mixed[position], mixed, labels, sentence, k):
                lines.append(f'      {score:.3f}  {neighbour:<14} "{snippet(other, neighbour)}"')
        lines.append("")
    if not chosen:
        lines.append("(no polysemous word from the list occurs twice in the reference sentences)")
    return lines


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


def word_and_sentence_report(nlp, mixed, static, labels, k: int, n_words: int, reference: str) -> List[str]:
    """Polysemous words and sentence pairs from the language's table; without one, frequent words."""
    table = DEMO_TEXT.get(nlp.lang)
    if table is not None:
        return polysemy_report(mixed, static, labels, k, n_words, table.polysemous, reference) + similarity_report(
            nlp, table.pairs
        )
    words = frequent_content_words(labels, nlp.Defaults.stop_words, 50)
    return [
        f"(no word list for language '{nlp.lang}' in training/packaging/demo.py DEMO_TEXT: showing the most frequent "
        "content words of the reference text)",
        "",
        *polysemy_report(mixed, static, labels, k, n_words, words, reference),
        f"(no sentence pairs for language '{nlp.lang}': add them to DEMO_TEXT in training/packaging/demo.py)",
    ]


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
    words: int = typer.Option(2, help="How many polysemous words to show."),
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
    mixed, static, labels = reference_tokens(nlp, sentences)
    report += [reference_summary(sentences, held_out, min_tokens), centering_summary(nlp), ""]
    reference = "held-out text" if held_out == len(sentences) else "reference text"
    report += word_and_sentence_report(nlp, mixed, static, labels, neighbours_k, words, reference)
    text = "\n".join(report) + "\n"
    if output:
        atomic_write_text(output, text)
    typer.echo(text)


if __name__ == "__main__":
    typer.run(main)
