"""The settings of a mix of biLM layers, typed: ``gamma * sum_j w_j * h_j`` over the L+1 layers
(each h_j standardized per token when ``layer_norm`` is on), and how the mixed token vectors are
pooled into span and doc vectors. ``as_dict`` is the plain form that ``doc._.elmo_mix`` stores
(a doc's user data must stay serializable); ``from_dict`` reads it back. ``mix_layers`` applies a mix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..choices import choose

# pooling name -> (n, 2P) mixed token vectors -> (2P,)
POOLINGS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda vectors: vectors.mean(axis=0),
    "max": lambda vectors: vectors.max(axis=0),
}


@dataclass(frozen=True)
class MixSettings:
    """layer_weights: one per layer (L+1,), any sequence of numbers (kept as a tuple of floats)."""

    layer_weights: Tuple[float, ...]
    gamma: float = 1.0
    layer_norm: bool = True
    pooling: str = "mean"

    def __post_init__(self) -> None:
        check_mix_settings(self.layer_weights, self.gamma, self.pooling)
        object.__setattr__(self, "layer_weights", tuple(float(w) for w in self.layer_weights))
        object.__setattr__(self, "gamma", float(self.gamma))
        object.__setattr__(self, "layer_norm", bool(self.layer_norm))

    @classmethod
    def average(cls, n_layers: int) -> "MixSettings":
        """Equal weights over ``n_layers`` layers."""
        return cls((1.0 / n_layers,) * n_layers)

    @classmethod
    def for_layers(
        cls,
        n_layers: int,
        layer_weights: Optional[Sequence[float]] = None,
        gamma: float = 1.0,
        pooling: str = "mean",
        layer_norm: bool = True,
    ) -> "MixSettings":
        """Settings for a biLM with ``n_layers`` layers; ``layer_weights`` None is the average."""
        check_mix_settings(layer_weights, gamma, pooling)
        if layer_weights is None:
            layer_weights = [1.0 / n_layers] * n_layers
        if len(layer_weights) != n_layers:
            raise ValueError(
                f"layer_weights has {len(layer_weights)} values but the biLM has {n_layers} layers "
                "(the token layer and each LSTM layer); give one weight per layer."
            )
        return cls(tuple(layer_weights), gamma, layer_norm, pooling)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "MixSettings":
        return cls(tuple(spec["layer_weights"]), spec["gamma"], spec.get("layer_norm", True), spec["pooling"])

    def as_dict(self) -> Dict[str, Any]:
        return {
            "layer_weights": list(self.layer_weights),
            "gamma": self.gamma,
            "pooling": self.pooling,
            "layer_norm": self.layer_norm,
        }

    def pool(self, vectors: np.ndarray) -> np.ndarray:
        """(n, 2P) mixed token vectors -> (2P,) by this mix's pooling."""
        return POOLINGS[self.pooling](vectors)


def check_mix_settings(layer_weights: Optional[Sequence[float]], gamma: float, pooling: str) -> None:
    """What can be checked before the number of layers is known."""
    values = [float(w) for w in layer_weights or []] + [float(gamma)]
    if not all(np.isfinite(values)):
        raise ValueError(f"layer_weights and gamma must be finite, got {layer_weights} and {gamma}.")
    choose(POOLINGS, "pooling", pooling)


def mix_layers(layers: np.ndarray, mix: MixSettings) -> np.ndarray:
    """(L+1, n, 2P) -> (n, 2P) float32: gamma * sum_j w_j * norm(layers[j]), where norm standardizes
    each token's vector of each layer (zero mean, unit variance over its 2P features) when
    ``layer_norm`` is on, so that no layer outweighs the others by sheer scale; otherwise identity."""
    if mix.layer_norm:
        mean = layers.mean(axis=-1, keepdims=True, dtype=np.float64)
        std = layers.std(axis=-1, keepdims=True, dtype=np.float64)
        layers = ((layers - mean) / (std + 1e-6)).astype(np.float32)
    weights = np.asarray(mix.layer_weights, dtype=np.float32) * np.float32(mix.gamma)
    return np.tensordot(weights, layers, axes=1).astype(np.float32, copy=False)
