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
from typing import Dict, List

import typer

from .metrics import save_metrics
from .vectors import compared_mixes, cosine, representations, word_layers

SETS = [
    "MEN=word-similarity/EN-MEN-TR-3k.txt",
    "WS-353=word-similarity/EN-WS-353-ALL.txt",
    "SimLex-999=word-similarity/EN-SIMLEX-999.txt",
]


def correlations(nlp, pairs: List[List[str]]) -> Dict[str, float]:
    """(word, word, score) rows -> Spearman's rho of each kind of vector (layers, mixes)."""
    from scipy.stats import spearmanr

    words = sorted({w for a, b, _ in pairs for w in (a, b)})
    layers = dict(zip(words, word_layers(nlp, [[w] for w in words])))
    mixes = compared_mixes(layers[words[0]].shape[0])
    vectors = {w: representations(layers[w][:, 0], mixes) for w in words}
    gold = [float(score) for _, _, score in pairs]
    return {
        kind: float(spearmanr([cosine(vectors[a][kind], vectors[b][kind]) for a, b, _ in pairs], gold).correlation)
        for kind in vectors[words[0]]
    }


def main(
    elmo: Path = typer.Option(..., help="The pipeline from training.downstream.pipeline."),
    data: Path = typer.Option(..., help="The shared data folder."),
    sets: List[str] = typer.Option(SETS, help="NAME=FILE in DATA: the word-pair sets."),
) -> None:
    """Spearman correlation of cosine similarity with human judgements, each word embedded alone."""
    import spacy

    nlp = spacy.load(elmo)
    result = {}
    for name, sep, filename in (item.partition("=") for item in sets):
        if not sep:
            raise typer.BadParameter(f"--sets takes NAME=FILE, got {name!r}.")
        pairs = [
            line.split("\t") for line in (data / filename).read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        result[name] = {"pairs": len(pairs), **correlations(nlp, pairs)}
    save_metrics("similarity", result)
    typer.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
