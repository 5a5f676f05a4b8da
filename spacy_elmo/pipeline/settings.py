"""The elmo component's settings: their defaults (the factory's config, the model aside) and the
checks a component makes of them when it is built, so that a wrong value fails at ``add_pipe`` or
``spacy.load`` and not inside ``nlp.pipe``."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..kernels.precision import check_precision
from .centering import check_centering_settings
from .mix_settings import check_mix_settings
from .storage import Storage
from .token_input import check_input_attr

DEFAULTS: Dict[str, Any] = {
    "weights": None,
    "input_attr": None,
    "layer_weights": None,
    "gamma": 1.0,
    "layer_norm": True,
    "pooling": "mean",
    "set_vector_hooks": True,
    "max_sentence_length": 256,
    "max_batch_tokens": 4096,
    "sentence_cache_tokens": 0,
    "sentence_cache_mb": 256.0,
    "token_cache_mb": 64.0,
    "precision": "fp32",
    "store": "layers",
    "store_dtype": "float32",
    "center_vectors": False,
    "remove_directions": 0,
}


def checked_settings(settings: Dict[str, Any]) -> Dict[str, Any]:
    """``DEFAULTS`` updated with ``settings``, after checking every value; ``weights`` as a string."""
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"elmo: unknown settings {unknown}; the settings are {sorted(DEFAULTS)}.")
    values = {**DEFAULTS, **settings}
    for setting in ("max_sentence_length", "max_batch_tokens"):
        if not isinstance(values[setting], int) or values[setting] < 1:
            raise ValueError(f"elmo: {setting} must be a positive integer, got {values[setting]!r}.")
    if not isinstance(values["sentence_cache_tokens"], int) or values["sentence_cache_tokens"] < 0:
        raise ValueError(
            f"elmo: sentence_cache_tokens must be an integer >= 0, got {values['sentence_cache_tokens']!r}."
        )
    for setting in ("sentence_cache_mb", "token_cache_mb"):
        value = values[setting]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise ValueError(f"elmo: {setting} must be a number of megabytes >= 0, got {value!r}.")
    check_mix_settings(values["layer_weights"], values["gamma"], values["pooling"])
    check_precision(values["precision"])
    Storage(values["store"], values["store_dtype"])
    check_centering_settings(values["center_vectors"], values["remove_directions"])
    check_input_attr(values["input_attr"])
    values["weights"] = str(values["weights"]) if values["weights"] else None
    return values


def megabytes(value: Optional[float]) -> Optional[int]:
    """A setting in MB (2**20 bytes) as a count of bytes; None stays None."""
    return None if value is None else int(value * 2**20)
