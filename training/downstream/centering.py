"""Raw against centred vectors, from the same biLM: does removing the common direction(s) make
cosine similarity mean more? (spacy_elmo.pipeline.centering; the elmo component's ``center_vectors`` and
``remove_directions``.) Writes metrics/downstream/centering.json and the plot
bench/results/downstream-centering.png.

    python -m spacy_elmo.training.downstream.centering --elmo pipelines/elmo-downstream --data ../shared/data \
        --text corpus/downstream/text/train

For each kind of vector (each layer, each mix) the mean and the principal directions are estimated
from the first ``--tokens`` tokens of ``--text`` (corpus shards, each sentence read alone), as the
component estimates its own, and compared:

- anisotropy: the mean cosine of random pairs of tokens of that text (0 for isotropic vectors);
- WiC accuracy (threshold tuned on dev) and word similarity (Spearman), as in ``wic`` and
  ``similarity``, for the raw vectors, the mean removed, and the mean and the top D directions
  removed for each D of ``--directions``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import typer

from spacy_elmo.pipeline.centering import CENTERING_TOKENS, Centering

from ..corpus import read_sentences
from ..loop.curve import plots_here
from .metrics import pyplot, save_metrics, save_plot
from .similarity import SETS, pair_layers, parse_sets, read_pairs, spearman
from .vectors import compared_mixes, kind_vectors, row_cosines, word_layers
from .wic import EXAMPLES, GOLD, accuracies, read_splits, target_layers

RAW = "raw"
RANDOM_PAIRS = 5000
# correction name -> kind -> the Centering to apply (None: the raw vectors)
Corrections = Dict[str, Dict[str, Optional[Centering]]]


def correction_name(directions: int) -> str:
    return "mean removed" if not directions else f"mean and top {directions} removed"


def reference_vectors(nlp, text: Path, max_tokens: int) -> Dict[str, np.ndarray]:
    """Each kind's vectors (n, 2P) of the first ``max_tokens`` tokens of the text's sentences."""
    sentences, tokens = [], 0
    for sentence in read_sentences(text):
        if tokens >= max_tokens:
            break
        sentences.append(sentence)
        tokens += len(sentence)
    layers = np.concatenate(word_layers(nlp, sentences), axis=1)
    return kind_vectors(layers, compared_mixes(layers.shape[0]))


def estimate_corrections(reference: Dict[str, np.ndarray], directions: List[int]) -> Corrections:
    """raw, the mean removed, and the mean and the top D directions removed for each D (one
    principal-direction estimate per kind, its first D rows taken for each D)."""
    widest = {kind: Centering.estimate(vectors, max(directions, default=0)) for kind, vectors in reference.items()}
    corrections: Corrections = {RAW: {kind: None for kind in reference}}
    for count in [0, *directions]:
        corrections[correction_name(count)] = {
            kind: Centering(full.mean, full.directions[:count], full.tokens) for kind, full in widest.items()
        }
    return corrections


def apply(centering: Optional[Centering], vectors: np.ndarray) -> np.ndarray:
    return vectors if centering is None else centering.apply(vectors)


def anisotropy(reference: Dict[str, np.ndarray], corrections: Corrections, seed: int = 0) -> Dict[str, Dict]:
    """Mean cosine of RANDOM_PAIRS random pairs of distinct tokens, per correction and kind."""
    n = len(next(iter(reference.values())))
    rng = np.random.default_rng(seed)
    first, second = rng.integers(0, n, RANDOM_PAIRS), rng.integers(0, n, RANDOM_PAIRS)
    keep = first != second
    first, second = first[keep], second[keep]
    return {
        name: {
            kind: float(row_cosines(apply(c, reference[kind][first]), apply(c, reference[kind][second])).mean())
            for kind, c in per_kind.items()
        }
        for name, per_kind in corrections.items()
    }


def wic(nlp, data: Path, corrections: Corrections) -> Dict[str, Dict]:
    """WiC dev and test accuracy per correction and kind."""
    splits = read_splits(data, EXAMPLES, GOLD)
    vectors = {}
    for split, (examples, _) in splits.items():
        firsts, seconds = target_layers(nlp, examples)
        mixes = compared_mixes(firsts.shape[0])
        vectors[split] = (kind_vectors(firsts, mixes), kind_vectors(seconds, mixes))

    def scores(split: str, kind: str, c: Optional[Centering]) -> np.ndarray:
        first, second = vectors[split]
        return row_cosines(apply(c, first[kind]), apply(c, second[kind]))

    return {
        name: {
            kind: accuracies(scores("dev", kind, c), splits["dev"][1], scores("test", kind, c), splits["test"][1])
            for kind, c in per_kind.items()
        }
        for name, per_kind in corrections.items()
    }


def similarity(nlp, sets: Dict[str, Path], corrections: Corrections) -> Dict[str, Dict]:
    """Spearman's rho per word-pair set, correction and kind."""
    result = {}
    for set_name, path in sets.items():
        pairs = read_pairs(path)
        firsts, seconds = pair_layers(nlp, pairs)
        mixes = compared_mixes(firsts.shape[0])
        first, second = kind_vectors(firsts, mixes), kind_vectors(seconds, mixes)
        result[set_name] = {"pairs": len(pairs)}
        for name, per_kind in corrections.items():
            result[set_name][name] = {
                kind: spearman(row_cosines(apply(c, first[kind]), apply(c, second[kind])), pairs)
                for kind, c in per_kind.items()
            }
    return result


def plot(result: Dict, kind: str, path: Path) -> Path:
    """WiC test accuracy and each set's Spearman rho per correction, for one kind of vector."""
    names = list(result["wic"])
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 3.8))
    left.bar(range(len(names)), [100 * result["wic"][n][kind]["test_accuracy"] for n in names], color="tab:blue")
    left.axhline(50, color="grey", linestyle=":", label="chance")
    left.set_ylim(45, max(60, left.get_ylim()[1]))
    left.set_title(f"WiC test accuracy ({kind})", fontsize=10)
    width = 0.8 / len(result["similarity"])
    for k, (set_name, scores) in enumerate(result["similarity"].items()):
        right.bar(np.arange(len(names)) + k * width, [scores[n][kind] for n in names], width, label=set_name)
    right.set_title(f"Word similarity, Spearman's rho ({kind})", fontsize=10)
    right.legend(fontsize=7)
    for axis in (left, right):
        axis.set_xticks(np.arange(len(names)) + (0 if axis is left else width * (len(result["similarity"]) - 1) / 2))
        axis.set_xticklabels([_short(name) for name in names], fontsize=8)
        axis.set_xlabel("removed: the mean (-mean), and the top D principal directions (+D)", fontsize=8)
    fig.tight_layout()
    return save_plot(fig, path)


def _short(correction: str) -> str:
    """ "mean and top 3 removed" -> "-mean+3"."""
    if correction == RAW:
        return RAW
    count = correction.split(" top ")[1].split()[0] if " top " in correction else ""
    return "-mean" + (f"+{count}" if count else "")


def main(
    elmo: Path = typer.Option(..., help="The pipeline from `python -m spacy_elmo pipeline`."),
    data: Path = typer.Option(..., help="The shared data folder (WiC, word similarity)."),
    text: Path = typer.Option(..., help="Corpus shards whose tokens the corrections are estimated from."),
    tokens: int = typer.Option(CENTERING_TOKENS, help="How many tokens of --text to estimate from."),
    directions: List[int] = typer.Option([1, 2, 3, 5, 10], help="Numbers of top principal directions to remove."),
    sets: List[str] = typer.Option(SETS, help="NAME=FILE in DATA: the word-pair sets."),
    plot_path: Path = typer.Option(Path("bench/results/downstream-centering.png"), "--plot"),
    note: str = typer.Option("", help="What the report should say about this biLM, if not the report's own."),
) -> None:
    """Raw against centred vectors: anisotropy, WiC and word similarity per correction."""
    import spacy

    drawing = plots_here("downstream.centering writes its results")
    nlp = spacy.load(elmo)
    reference = reference_vectors(nlp, text, tokens)
    corrections = estimate_corrections(reference, sorted(set(directions)))
    result = {
        "pipeline": str(elmo),
        "note": note,
        "text": str(text),
        "tokens": len(next(iter(reference.values()))),
        "anisotropy": anisotropy(reference, corrections),
        "wic": wic(nlp, data, corrections),
        "similarity": similarity(nlp, parse_sets(sets, data), corrections),
    }
    save_metrics("centering", result)
    if drawing:
        plot(result, "mix: average", plot_path)
    for name in corrections:
        typer.echo(f"{name:>26}: " + summary(result, name, "mix: average"))


def summary(result: Dict, correction: str, kind: str) -> str:
    """One line of the figures of one correction and kind."""
    figures = [
        f"random-pair cosine {result['anisotropy'][correction][kind]:.3f}",
        f"WiC test {result['wic'][correction][kind]['test_accuracy']:.3f}",
        *(f"{name} {scores[correction][kind]:.3f}" for name, scores in result["similarity"].items()),
    ]
    return ", ".join(figures)


if __name__ == "__main__":
    typer.run(main)
