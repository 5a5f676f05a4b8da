"""Removing the common direction(s) of contextual vectors before they are compared.

ELMo's vectors are anisotropic: they share a large common component, so that the cosine of any two
tokens' mixed vectors is high (about 0.7 for random pairs) and ``.similarity`` says little. The
remedy of Mu and Viswanath (2018, "All-but-the-Top"): subtract the mean vector, then remove the
projections on the top ``D`` principal directions of the centred vectors:

    v' = (v - mean) - sum_d <v - mean, u_d> u_d          (u_d: unit rows of ``directions``)

Both are estimated from the vectors of real text. ``as_doc_value`` is the form a doc keeps (float32
arrays, which ``Doc.to_bytes``/``DocBin`` serialize), ``as_config`` the form the component saves
in its cfg: the float32 bytes in base64, exact (a list of floats goes through the JSON writer's
ten significant digits, and small values came back an ulp off; such lists still load).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Union

import numpy as np

CENTERING_TOKENS = 20000  # tokens of text the estimate reads by default
MIN_CENTERING_TOKENS = 1000  # fewer give a noisy mean: refused


class NotEnoughText(ValueError):
    """Fewer than MIN_CENTERING_TOKENS tokens to estimate from."""


def check_centering_settings(center_vectors: bool, remove_directions: int) -> None:
    if not isinstance(center_vectors, bool):
        raise ValueError(f"elmo: center_vectors must be true or false, got {center_vectors!r}.")
    if isinstance(remove_directions, bool) or not isinstance(remove_directions, int) or remove_directions < 0:
        raise ValueError(
            f"elmo: remove_directions must be an integer >= 0 (principal directions removed after the mean), got "
            f"{remove_directions!r}."
        )
    if remove_directions and not center_vectors:
        raise ValueError(
            f"elmo: remove_directions = {remove_directions} needs center_vectors = true (the directions are those "
            "of the centred vectors)."
        )


def text_lines(path: Union[str, Path]) -> Iterator[str]:
    """The non-empty lines of a .txt file, or of the .txt files of a folder in name order."""
    path = Path(path)
    files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
    if not path.exists() or not files:
        raise ValueError(
            f"elmo: centering_text {str(path)!r} is not a .txt file or a folder with .txt files (one paragraph per "
            "line)."
        )
    return _lines_of(files)


def _lines_of(files: Iterable[Path]) -> Iterator[str]:
    for file in files:
        with open(file, encoding="utf-8") as lines:
            yield from (line.strip() for line in lines if line.strip())


@dataclass(frozen=True, eq=False)
class Centering:
    """mean: (W,) float32; directions: (D, W) float32 with orthonormal rows (D may be 0); tokens:
    how many token vectors they were estimated from."""

    mean: np.ndarray
    directions: np.ndarray
    tokens: int

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1)
        directions = np.asarray(self.directions, dtype=np.float32).reshape(-1, mean.shape[0])
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "directions", directions)

    @classmethod
    def estimate(cls, vectors: np.ndarray, n_directions: int = 0) -> "Centering":
        """(n, W) token vectors -> their mean and the top ``n_directions`` principal directions of
        the centred vectors (computed in float64; their signs do not matter)."""
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[0] < 2:
            raise ValueError(f"Centering needs at least 2 vectors of shape (n, W), got shape {vectors.shape}.")
        if not 0 <= n_directions < min(vectors.shape):
            raise ValueError(
                f"Cannot remove {n_directions} principal directions estimated from {vectors.shape[0]} vectors of "
                f"width {vectors.shape[1]}: use 0 <= remove_directions < {min(vectors.shape)}."
            )
        mean = vectors.mean(axis=0)
        directions = np.zeros((0, vectors.shape[1]))
        if n_directions:
            _, _, right = np.linalg.svd(vectors - mean, full_matrices=False)
            directions = right[:n_directions]
        return cls(mean, directions, int(vectors.shape[0]))

    @property
    def width(self) -> int:
        return int(self.mean.shape[0])

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """(..., W) -> (..., W) float32, the mean and the directions removed."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape[-1] != self.width:
            raise ValueError(
                f"This centering was estimated on {self.width}-dimensional vectors, not "
                f"{vectors.shape[-1]}-dimensional ones (from another biLM?): estimate it again for this biLM."
            )
        centred = vectors - self.mean
        if len(self.directions):
            centred = centred - (centred @ self.directions.T) @ self.directions
        return centred.astype(np.float32, copy=False)

    def as_doc_value(self) -> Dict[str, Any]:
        return {"mean": self.mean, "directions": self.directions, "tokens": self.tokens}

    def as_config(self) -> Dict[str, Any]:
        return {"mean": _float32_text(self.mean), "directions": _float32_text(self.directions), "tokens": self.tokens}

    @classmethod
    def from_value(cls, value: Optional[Mapping[str, Any]]) -> Optional["Centering"]:
        """A doc's or a config's value back (arrays, base64 text or lists); None stays None."""
        if value is None:
            return None
        return cls(_float32_array(value["mean"]), _float32_array(value["directions"]), int(value["tokens"]))


def _float32_text(array: np.ndarray) -> str:
    """float32 values as base64 text of their little-endian bytes (the shape is the caller's)."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def _float32_array(value: Any) -> np.ndarray:
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float32)
    return np.asarray(value, dtype=np.float32)
