"""WiC (Word-in-Context) accuracy from ELMo alone: two sentences use the target word in the same
sense when the cosine of its vectors reaches a threshold tuned on dev; per layer and per mix.
Writes metrics/downstream/wic.json.

    python -m spacy_elmo.training.downstream.wic --elmo pipelines/elmo-downstream --data ../shared/data

The files are given relative to --data, with ``{split}`` for dev and test: examples
(``word<TAB>pos<TAB>i-j<TAB>first sentence<TAB>second sentence``, tokens split on spaces) and gold
labels (T or F per line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import typer

from .metrics import save_metrics
from .vectors import compared_mixes, kind_vectors, row_cosines, word_layers

SPLITS = ("dev", "test")  # dev tunes the threshold, test is reported
EXAMPLES = "wic/{split}.data.txt"
GOLD = "wic/{split}.gold.txt"

# (first sentence's tokens, target position in it, second sentence's tokens, target position in it)
Example = Tuple[List[str], int, List[str], int]


def read_wic(examples_path: Path, gold_path: Path) -> Tuple[List[Example], List[bool]]:
    examples = []
    for line in examples_path.read_text(encoding="utf-8").splitlines():
        _, _, positions, first, second = line.split("\t")
        i, j = (int(p) for p in positions.split("-"))
        examples.append((first.split(" "), i, second.split(" "), j))
    gold = [label.strip() == "T" for label in gold_path.read_text().splitlines()]
    return examples, gold


def target_layers(nlp, examples: List[Example]) -> Tuple[np.ndarray, np.ndarray]:
    """The layers of the target word in each example's first and second sentence: (L+1, N, 2P) each."""
    firsts = word_layers(nlp, [e[0] for e in examples])
    seconds = word_layers(nlp, [e[2] for e in examples])
    return (
        np.stack([layers[:, e[1]] for e, layers in zip(examples, firsts, strict=True)], axis=1),
        np.stack([layers[:, e[3]] for e, layers in zip(examples, seconds, strict=True)], axis=1),
    )


def similarities(nlp, examples: List[Example]) -> Dict[str, np.ndarray]:
    """The cosine of the target's two vectors in each example (N,), per layer and per mix."""
    firsts, seconds = target_layers(nlp, examples)
    mixes = compared_mixes(firsts.shape[0])
    first, second = kind_vectors(firsts, mixes), kind_vectors(seconds, mixes)
    return {name: row_cosines(first[name], second[name]) for name in first}


def accuracies(dev_scores: np.ndarray, dev_gold: np.ndarray, test_scores: np.ndarray, test_gold: np.ndarray):
    """Same sense when the score reaches the threshold that is best on dev: the threshold, dev and
    test accuracy."""
    threshold = _best_threshold(dev_scores, dev_gold)
    return {
        "threshold": threshold,
        "dev_accuracy": float(((dev_scores >= threshold) == dev_gold).mean()),
        "test_accuracy": float(((test_scores >= threshold) == test_gold).mean()),
    }


def read_splits(data: Path, examples: str, gold: str) -> Dict[str, Tuple[List[Example], np.ndarray]]:
    """dev and test: (examples, gold labels as a bool array)."""
    splits = {}
    for split in SPLITS:
        split_examples, labels = read_wic(data / examples.format(split=split), data / gold.format(split=split))
        splits[split] = (split_examples, np.array(labels))
    return splits


def main(
    elmo: Path = typer.Option(..., help="The pipeline from `python -m spacy_elmo pipeline`."),
    data: Path = typer.Option(..., help="The shared data folder."),
    examples: str = typer.Option(EXAMPLES, help="The WiC examples in DATA, {split}: dev, test."),
    gold: str = typer.Option(GOLD, help="Their gold labels in DATA."),
) -> None:
    """WiC accuracy from ELMo alone: same sense when the target's vectors are more similar than a
    threshold tuned on dev; per layer and per mix."""
    import spacy

    nlp = spacy.load(elmo)
    splits = read_splits(data, examples, gold)
    scores = {split: similarities(nlp, split_examples) for split, (split_examples, _) in splits.items()}
    result = {
        name: accuracies(dev_scores, splits["dev"][1], scores["test"][name], splits["test"][1])
        for name, dev_scores in scores["dev"].items()
    }
    save_metrics("wic", result)
    for name, accuracy in result.items():
        typer.echo(f"WiC {name}: test accuracy {accuracy['test_accuracy']:.3f}")


def _best_threshold(scores: np.ndarray, gold: np.ndarray) -> float:
    candidates = np.unique(scores)
    accuracy = [((scores >= c) == gold).mean() for c in candidates]
    return float(candidates[int(np.argmax(accuracy))])


if __name__ == "__main__":
    typer.run(main)
