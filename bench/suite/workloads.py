"""The sentences and weights the benchmarks measure, and ``nlp.pipe`` timed over them.

Workloads: "1 sentence" (20 words) and "16 sentences" are the fixture's sentences, as in the peer's
own benchmark; "64 sentences", "1,000 sentences" and "10,000 sentences" are real text
(shared/data/corpus, held-out text first, spaCy's tokenizer and sentencizer): the fixture has fewer
than 64 distinct sentences, and repeats would flatter a char encoder that runs once per distinct
token of a call.
"""

from __future__ import annotations

import json
import random
import resource
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from suite.report import OUT, SHARED
from suite.timing import timed

FIXTURE = SHARED / "fixtures" / "elmo-allennlp"
CORPUS = SHARED / "data" / "corpus"
WORKLOADS = ("1 sentence", "16 sentences", "64 sentences", "1,000 sentences", "10,000 sentences")


def workload_named(count: str) -> str:
    """A workload's name from its sentence count as a command line gives it ("1000" -> "1,000 sentences")."""
    by_count = {name.split()[0].replace(",", ""): name for name in WORKLOADS}
    if count not in by_count:
        raise SystemExit(f"Unknown workload {count!r}; choose sentence counts from {sorted(by_count, key=int)}.")
    return by_count[count]


def load_sentences(count: int, seed: int = 0) -> Tuple[List[List[str]], List[str]]:
    """``count`` real sentences (1 to 100 words) drawn from the corpus, held-out text first; and the
    sorted distinct words of the first 2,000 training lines (to warm a token cache with)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    sentences: List[List[str]] = []
    for name in ("valid.txt", "test.txt", "train.txt"):  # more text only where asked
        lines = corpus_lines(name)
        cut = [[t.text for t in sent if not t.is_space] for doc in nlp.pipe(lines) for sent in doc.sents]
        sentences += [s for s in cut if 0 < len(s) <= 100]
        if len(sentences) >= count:
            break
    chosen = random.Random(seed).sample(sentences, min(count, len(sentences)))
    warm_lines = corpus_lines("train.txt")[:2000]
    warm_words = sorted({t.text for doc in nlp.tokenizer.pipe(warm_lines) for t in doc if not t.is_space})
    return chosen, warm_words


def corpus_lines(name: str, count: Optional[int] = None) -> List[str]:
    """The non-empty lines of shared/data/corpus/``name`` (the first ``count``)."""
    lines = [line for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:count] if count is not None else lines


def workload_sentences(name: str) -> List[List[str]]:
    """The token lists of a workload (see the module's docstring)."""
    if name not in WORKLOADS:
        raise SystemExit(f"Unknown workload {name!r}; one of {', '.join(WORKLOADS)}.")
    if name.endswith("0 sentences") or name == "64 sentences":
        return load_sentences(int(name.split()[0].replace(",", "")))[0]
    streams = json.loads((FIXTURE / "sentences.json").read_text())
    flat = [line.split() for line in streams[0] + streams[1] + streams[2]]
    return {"1 sentence": [streams[0][9].split()], "16 sentences": flat[:16]}[name]


def converted_weights(peer: Path) -> Path:
    """The peer's full-size random weights (93.6M parameters, original clipping) in our format,
    converted once into bench/out."""
    from spacy_elmo import import_original, save_bilm

    target = OUT / "peer-full-bilm"
    if not (target / "model.safetensors").is_file():
        save_bilm(import_original(peer / "full" / "options.json", peer / "full" / "lm_weights.hdf5"), target)
    return target


def random_weights(preset: str, seed: int = 14) -> Path:
    """Random weights of a preset (seeded), written once into bench/out."""
    target = OUT / f"{preset}-random-bilm"
    if not (target / "config.json").is_file():
        import torch

        from spacy_elmo import BiLM, BiLMConfig, save_bilm

        torch.manual_seed(seed)
        save_bilm(BiLM(BiLMConfig.preset(preset)), target)
    return target


def peak_rss_mb() -> float:
    """This process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_pipe(nlp, sentences: List[List[str]], repeats: int, sync: Optional[Callable[[], None]] = None) -> Dict:
    """``nlp.pipe`` over docs of ``sentences`` (fresh docs each run, made outside the clock): the
    figures of ``Timing.summary`` with words/s at the median of ``repeats`` runs after a warm-up
    (which fills the token cache where it is on)."""
    from spacy.tokens import Doc

    def run(docs) -> None:
        for _ in nlp.pipe(docs, batch_size=1000):
            pass

    def fresh_docs():
        return [Doc(nlp.vocab, words=s) for s in sentences]

    timing = timed(run, repeats, prepare=fresh_docs, sync=sync)
    return timing.summary(sum(len(s) for s in sentences))


def error_against_fp32(runner, sentences, precision: str, max_batch_tokens: int = 4096) -> list:
    """Per layer, ``precision``'s layers against exact fp32's on ``sentences`` (``layer_errors``), each
    through a runner of its own over the weights of ``runner`` (a ``BiLMRunner``: the component's)."""
    from spacy_elmo import embed_sentences

    exact = embed_sentences(runner.with_settings(precision="fp32"), sentences, max_batch_tokens=max_batch_tokens)
    reduced = embed_sentences(runner.with_settings(precision=precision), sentences, max_batch_tokens=max_batch_tokens)
    return layer_errors(exact, reduced)


def layer_errors(exact: list, reduced: list) -> list:
    """exact, reduced: one (L+1, T, 2P) array per sentence -> per layer, over every token: max
    |reduced - exact| (and max |exact|), the lowest and the mean cosine of a token's two vectors."""
    import numpy as np

    exact, reduced = np.concatenate(exact, axis=1), np.concatenate(reduced, axis=1)
    cosine = (exact * reduced).sum(-1) / (np.linalg.norm(exact, axis=-1) * np.linalg.norm(reduced, axis=-1))
    return [
        {
            "max_abs": float(np.abs(exact[j] - reduced[j]).max()),
            "max_abs_fp32": float(np.abs(exact[j]).max()),
            "min_cosine": float(cosine[j].min()),
            "mean_cosine": float(cosine[j].mean()),
        }
        for j in range(exact.shape[0])
    ]
