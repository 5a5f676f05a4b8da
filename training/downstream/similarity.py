"""Word similarity: Spearman's correlation of the cosine of two words' vectors with human
judgements, each word embedded alone between <S> and </S>; layer 0 against the mixes. Writes
metrics/downstream/similarity.json.

    python -m spacy_elmo.training.downstream.similarity --elmo pipelines/elmo-downstream --data ../shared/data
    python -m spacy_elmo.training.downstream.similarity ... --sets MEN=word-similarity/EN-MEN-TR-3k.txt --sets ...

Each set is ``NAME=FILE``, the file relative to --data with one ``word<TAB>word<TAB>score`` per line
(``\n`` or ``\r\n``). The default sets: MEN, WordSim-353, SimLex-999, SimVerb-3500 and the Stanford Rare
Words, as the files of the word-similarity collection (mfaruqui/eval-word-vectors) name them.
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
    "SimVerb-3500=word-similarity/EN-SimVerb-3500.txt",
    "RW=word-similarity/EN-RW-STANFORD.txt",
]


Pair = List[str]  # word, word, score


def read_pairs(path: Path) -> List[Pair]:
    """The (word, word, score) rows of a word-pair file; blank lines are skipped."""
    pairs = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = line.split("\t")
        if len(row) != 3 or not _is_number(row[2]):
            raise ValueError(f"{path}, line {number}: expected word<TAB>word<TAB>score, got {line!r}.")
        pairs.append(row)
    return pairs


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def pair_layers(nlp, pairs: List[Pair]) -> Tuple[np.ndarray, np.ndarray]:
    """Each pair's two words, each embedded alone: their layers (L+1, N, 2P) each."""
    words = sorted({w for a, b, _ in pairs for w in (a, b)})
    layers = dict(zip(words, word_layers(nlp, [[w] for w in words]), strict=True))
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
    elmo: Path = typer.Option(..., help="The pipeline from `python -m spacy_elmo pipeline`."),
    data: Path = typer.Option(..., help="The shared data folder."),
    sets: List[str] = typer.Option(SETS, help="NAME=FILE in DATA: the word-pair sets."),
) -> None:
    """Spearman correlation of cosine similarity with human judgements, each word embedded alone."""
    import spacy

    nlp = spacy.load(elmo)
    result = {}
    for name, path in parse_sets(sets, data).items():
        try:
            pairs = read_pairs(path)
        except ValueError as err:
            raise SystemExit(str(err)) from None
        result[name] = {"pairs": len(pairs), **correlations(nlp, pairs)}
    save_metrics("similarity", result)
    typer.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
