"""The elmo component's settings, in one typed place: their defaults (the factory's config, the
model aside) and their checks, made when a component is built, so that a wrong value fails at
``add_pipe`` or ``spacy.load`` and not inside ``nlp.pipe``. Settings do not change after that: to
run a saved pipeline with another one, override it at load
(``spacy.load(path, config={"components": {"elmo": {"precision": "int8"}}})``); the pipeline's
config.cfg then records it.

Adding a setting: a field here (default, type, check in ``__post_init__``) and its row and section in
docs/component.md; the factory (``component.make_elmo``) takes it as it is (``settings_as_parameters``),
and tests/test_settings.py fails until the docs describe it.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar

from ..kernels.precision import check_precision
from .centering import check_centering_settings
from .mix_settings import check_mix_settings
from .storage import Storage
from .token_input import check_input_attr


@dataclass(frozen=True)
class ElmoSettings:
    """The ``elmo`` factory's settings; docs/component.md describes each one."""

    weights: Optional[str] = None
    input_attr: Optional[str] = None
    layer_weights: Optional[Sequence[float]] = None
    gamma: float = 1.0
    layer_norm: bool = True
    pooling: str = "mean"
    set_vector_hooks: bool = True
    max_sentence_length: int = 256
    max_batch_tokens: int = 4096
    sentence_cache_tokens: int = 0
    sentence_cache_mb: float = 256.0
    token_cache_mb: float = 64.0
    precision: str = "fp32"
    store: str = "layers"
    store_dtype: str = "float32"
    center_vectors: bool = False
    remove_directions: int = 0
    storage: Storage = field(init=False, repr=False, compare=False)  # store and store_dtype, checked

    def __post_init__(self) -> None:
        for name in ("max_sentence_length", "max_batch_tokens"):
            _check_count(name, getattr(self, name), least=1)
        _check_count("sentence_cache_tokens", self.sentence_cache_tokens, least=0)
        for name in ("sentence_cache_mb", "token_cache_mb"):
            _check_megabytes(name, getattr(self, name))
        check_mix_settings(self.layer_weights, self.gamma, self.pooling)
        check_precision(self.precision)
        check_centering_settings(self.center_vectors, self.remove_directions)
        check_input_attr(self.input_attr)
        object.__setattr__(self, "storage", Storage(self.store, self.store_dtype))
        object.__setattr__(self, "weights", str(self.weights) if self.weights else None)
        if self.layer_weights is not None:
            object.__setattr__(self, "layer_weights", tuple(self.layer_weights))

    def to_config(self) -> Dict[str, Any]:
        """The settings as the factory's config takes them (lists, not tuples)."""
        config = {setting.name: getattr(self, setting.name) for setting in dataclasses.fields(self) if setting.init}
        if config["layer_weights"] is not None:
            config["layer_weights"] = list(config["layer_weights"])
        return config

    @property
    def token_cache_bytes(self) -> int:
        return megabytes(self.token_cache_mb)

    @property
    def sentence_cache_bytes(self) -> int:
        return megabytes(self.sentence_cache_mb)


Factory = TypeVar("Factory", bound=Callable[..., Any])


def settings_as_parameters(factory: Factory) -> Factory:
    """``factory(nlp, name, model, **settings)`` with the signature spaCy reads to check a config and
    fill in its defaults: its own parameters, then each setting as a keyword parameter, with its
    type (a list where the settings keep a tuple: configs give lists) and its default."""
    own = [
        parameter
        for parameter in inspect.signature(factory).parameters.values()
        if parameter.kind != parameter.VAR_KEYWORD
    ]
    types = typing.get_type_hints(ElmoSettings)
    types["layer_weights"] = Optional[List[float]]
    settings = [
        inspect.Parameter(
            setting.name, inspect.Parameter.KEYWORD_ONLY, default=setting.default, annotation=types[setting.name]
        )
        for setting in dataclasses.fields(ElmoSettings)
        if setting.init
    ]
    factory.__signature__ = inspect.signature(factory).replace(parameters=own + settings)  # type: ignore[attr-defined]
    factory.__annotations__ = {**factory.__annotations__, **{p.name: p.annotation for p in settings}}
    return factory


def _check_count(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise ValueError(f"elmo: {name} must be {kind}, got {value!r}.")


def _check_megabytes(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"elmo: {name} must be a number of megabytes >= 0, got {value!r}.")


def megabytes(value: float) -> int:
    """A setting in MB (2**20 bytes) as a count of bytes."""
    return int(value * 2**20)
