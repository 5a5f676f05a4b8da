"""Word similarity: Spearman's correlation of the cosine of two words' vectors with human
judgements, each word embedded alone between <S> and </S>; layer 0 against the mixes. Writes
metrics/downstream/similarity.json.

    python -m training.downstream.similarity --elmo pipelines/elmo-downstream --data ../shared/data
    python -m training.downstream.similarity ... --sets MEN=word-similarity/EN-MEN-TR-3k.txt --sets ...

Each set is ``NAME=FILE``, the file relative to --data with one ``word<TAB>word<TAB>score`` per line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import typer

from .metrics import save_metrics
from .vectors import compared_mixes, kind_vectors, row_cosines, word_layers

SETS = [
    "MEN=word-similarity/EN-MEN-TR-3k.txt",
    "WS-353=word-similarity/EN-WS-353-ALL.txt",
    "SimLex-999=word-similarity/EN-SIMLEX-999.txt",
]


Pair = List[str]  # word, word, score


def read_pairs(path: Path) -> List[Pair]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pair_layers(nlp, pairs: List[Pair]) -> Tuple[np.ndarray, np.ndarray]:
    """Each pair's two words, each embedded alone: their layers (L+1, N, 2P) each."""
    words = sorted({w for a, b, _ in pairs for w in (a, b)})
    layers = dict(zip(words, word_layers(nlp, [[w] for w in words])))
    return (
        np.stack([layers[a][:, 0] for a, _, _ in pairs], axis=1),
        np.stack([layers[b][:, 0] for _, b, _ in pairs], axis=1),
    )


def spearman(scores: np.ndarray, pairs: List[Pair]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(scores, [float(score) for _, _, score in pairs]).correlation)


def correlations(nlp, pairs: List[Pair]) -> Dict[str, float]:
    """(word, word, score) rows -> Spearman's rho of each kind of vector (layers, mixes)."""
    firsts, seconds = pair_layers(nlp, pairs)
    mixes = compared_mixes(firsts.shape[0])
    first, second = kind_vectors(firsts, mixes), kind_vectors(seconds, mixes)
    return {kind: spearman(row_cosines(first[kind], second[kind]), pairs) for kind in first}


def parse_sets(sets: List[str], data: Path) -> Dict[str, Path]:
    """NAME=FILE items -> name: path in ``data``."""
    parsed = {}
    for name, sep, filename in (item.partition("=") for item in sets):
        if not sep:
            raise typer.BadParameter(f"--sets takes NAME=FILE, got {name!r}.")
        parsed[name] = data / filename
    return parsed


def main(
    elmo: Path = typer.Option(..., help="The pipeline from training.downstream.pipeline."),
    data: Path = typer.Option(..., help="The shared data folder."),
    sets: List[str] = typer.Option(SETS, help="NAME=FILE in DATA: the word-pair sets."),
) -> None:
    """Spearman correlation of cosine similarity with human judgements, each word embedded alone."""
    import spacy

    nlp = spacy.load(elmo)
    result = {}
    for name, path in parse_sets(sets, data).items():
        pairs = read_pairs(path)
        result[name] = {"pairs": len(pairs), **correlations(nlp, pairs)}
    save_metrics("similarity", result)
    typer.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
