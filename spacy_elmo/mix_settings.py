"""The settings of a mix of biLM layers, typed: ``gamma * sum_j w_j * h_j`` over the L+1 layers
(each h_j standardized per token when ``layer_norm`` is on), and how the mixed token vectors are
pooled into span and doc vectors. ``as_dict`` is the plain form that ``attributes.mix_layers``
reads and ``doc._.elmo_mix`` stores (a doc's user data must stay serializable)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

from .attributes import check_mix_settings


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

    @classmethod
    def average(cls, n_layers: int) -> "MixSettings":
        """Equal weights over ``n_layers`` layers."""
        return cls((1.0 / n_layers,) * n_layers)

    def as_dict(self) -> Dict[str, Any]:
        return {"layer_weights": list(self.layer_weights), "gamma": self.gamma, "pooling": self.pooling, "layer_norm": self.layer_norm}
