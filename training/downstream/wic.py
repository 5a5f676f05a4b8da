"""WiC (Word-in-Context) accuracy from ELMo alone: two sentences use the target word in the same
sense when the cosine of its vectors reaches a threshold tuned on dev; per layer and per mix.
Writes metrics/downstream/wic.json.

    python -m training.downstream.wic --elmo pipelines/elmo-downstream --data ../shared/data

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
from .vectors import compared_mixes, cosine, representations, word_layers

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


def similarities(nlp, examples: List[Example]) -> Dict[str, List[float]]:
    """The cosine of the target's two vectors in each example, per layer and per mix."""
    firsts = word_layers(nlp, [e[0] for e in examples])
    seconds = word_layers(nlp, [e[2] for e in examples])
    mixes = compared_mixes(firsts[0].shape[0])
    per_name: Dict[str, List[float]] = {}
    for (_, i, _, j), a, b in zip(examples, firsts, seconds):
        first, second = representations(a[:, i], mixes), representations(b[:, j], mixes)
        for name in first:
            per_name.setdefault(name, []).append(cosine(first[name], second[name]))
    return per_name


def main(
    elmo: Path = typer.Option(..., help="The pipeline from training.downstream.pipeline."),
    data: Path = typer.Option(..., help="The shared data folder."),
    examples: str = typer.Option(EXAMPLES, help="The WiC examples in DATA, {split}: dev, test."),
    gold: str = typer.Option(GOLD, help="Their gold labels in DATA."),
) -> None:
    """WiC accuracy from ELMo alone: same sense when the target's vectors are more similar than a
    threshold tuned on dev; per layer and per mix."""
    import spacy

    nlp = spacy.load(elmo)
    scores, golds = {}, {}
    for split in SPLITS:
        split_examples, golds[split] = read_wic(data / examples.format(split=split), data / gold.format(split=split))
        scores[split] = similarities(nlp, split_examples)
    result = {}
    for name, dev_scores in scores["dev"].items():
        threshold = _best_threshold(np.array(dev_scores), np.array(golds["dev"]))
        test = np.array(scores["test"][name]) >= threshold
        result[name] = {
            "threshold": threshold,
            "dev_accuracy": float(((np.array(dev_scores) >= threshold) == np.array(golds["dev"])).mean()),
            "test_accuracy": float((test == np.array(golds["test"])).mean()),
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
