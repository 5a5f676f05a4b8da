"""The ELMo vectors that WiC and word similarity compare: every layer of a word, read in its
sentence or alone between <S> and </S>, and mixes of the layers (the average, and the mix each
task learned in spacy_elmo.training.downstream.tasks)."""

from __future__ import annotations

import json
from typing import Dict, List

import numpy as np
from spacy.tokens import Doc

from spacy_elmo.pipeline.mix_settings import MixSettings, mix_layers

from .metrics import METRICS


def word_layers(nlp, sentences: List[List[str]]) -> List[np.ndarray]:
    """(L+1, T, 2P) per sentence, each read as one sentence."""
    docs = nlp.pipe(Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)) for words in sentences)
    return [doc._.elmo_data for doc in docs]


def compared_mixes(n_layers: int) -> Dict[str, MixSettings]:
    """The average of the layers, and the mix learned by each task trained on all its data."""
    mixes = {"mix: average": MixSettings.average(n_layers)}
    for path in sorted(METRICS.glob("*-elmo.json")):
        result = json.loads(path.read_text())
        if result["size"] == 100 and "layer_weights" in result:
            mixes[f"mix learned by {result['task']}"] = MixSettings(result["layer_weights"])
    return mixes


def kind_vectors(layers: np.ndarray, mixes: Dict[str, MixSettings]) -> Dict[str, np.ndarray]:
    """Many tokens' layers (L+1, n, 2P) -> the vectors compared (n, 2P) of each kind: each layer
    alone ("layer j") and each mix (by its name)."""
    out = {f"layer {j}": layers[j] for j in range(layers.shape[0])}
    for name, mix in mixes.items():
        out[name] = mix_layers(layers, mix)
    return out


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, W), (n, W) -> (n,) cosine of each pair of rows; 0.0 where either row is all zeros."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
