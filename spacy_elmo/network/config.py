"""BiLMConfig: every size of the network, and the presets. The configs of other toolkits' formats
are read where their weights are (``weights``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ..kernels.advice import ModelShapes
from .chars import BYTE_ENCODING, MAX_WORD_LENGTH, N_CHARACTERS, TABLE_ENCODING

_ORIGINAL_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
_EIGHTH_FILTERS = tuple((width, n // 8) for width, n in _ORIGINAL_FILTERS)


class ConfigError(ValueError):
    """A biLM configuration that cannot describe a valid network."""


@dataclass(frozen=True)
class BiLMConfig:
    """Sizes and options of a character-level bidirectional language model.

    Char encoder: one convolution per ``(width, n_filters)``, max over characters, ``n_highway``
    highways, a projection to ``projection_dim`` (P); each direction: ``n_layers`` LSTM layers of
    ``lstm_dim`` cells (H) projected to P. ``vocab_size`` > 0 adds the shared softmax head (pretraining
    only); ``word_dim`` > 0, a word embedding concatenated with the highway output before the projection.
    """

    projection_dim: int
    lstm_dim: int
    filters: Tuple[Tuple[int, int], ...]
    n_highway: int
    char_embedding_dim: int = 16
    n_layers: int = 2
    cell_clip: Optional[float] = None
    proj_clip: Optional[float] = None
    residual: bool = True
    activation: str = "relu"
    n_characters: int = N_CHARACTERS
    max_characters_per_token: int = MAX_WORD_LENGTH
    vocab_size: int = 0
    dropout: float = 0.1
    char_vocabulary: str = BYTE_ENCODING
    word_vocab_size: int = 0
    word_dim: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "filters", tuple((int(w), int(n)) for w, n in self.filters))
        _validate(self)

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every layer the biLM returns: forward and backward concatenated (2P)."""
        return 2 * self.projection_dim

    @property
    def n_output_layers(self) -> int:
        """L + 1: the token layer and each LSTM layer."""
        return self.n_layers + 1

    @property
    def is_clipped(self) -> bool:
        return self.cell_clip is not None or self.proj_clip is not None

    def replace(self, **changes: Any) -> "BiLMConfig":
        return dataclasses.replace(self, **changes)

    def kernel_shapes(self) -> ModelShapes:
        """The sizes that set this model's matmul shapes (what ``info --machine`` times its kernels at)."""
        width, count = max(self.filters, key=lambda pair: (pair[0] * pair[1], pair[0]))
        work = sum(w * n for w, n in self.filters)
        return ModelShapes(
            projection_dim=self.projection_dim,
            lstm_dim=self.lstm_dim,
            n_layers=self.n_layers,
            highway_dim=self.n_filters,
            n_highway=self.n_highway,
            token_inputs=self.n_filters + self.word_dim,
            widest_filters=count,
            widest_inputs=self.char_embedding_dim * width,
            conv_share=work / (width * count),
        )

    @property
    def needs_vocabulary(self) -> bool:
        """Whether the model reads tokens through tables saved beside its weights."""
        return self.char_vocabulary == TABLE_ENCODING or self.word_dim > 0

    def to_dict(self) -> Dict[str, Any]:
        """All fields, the vocabulary fields only when not default: byte-encoded models' files stay the same."""
        data = dataclasses.asdict(self)
        data["filters"] = [list(pair) for pair in self.filters]
        for name in _VOCABULARY_FIELDS:
            if data[name] == _DEFAULTS[name]:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "BiLMConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown biLM config keys {unknown}; known keys are {sorted(known)}.")
        try:
            return cls(**data)
        except TypeError as err:
            raise ConfigError(f"Incomplete biLM config {data}: {err}") from None

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BiLMConfig":
        """One of ``PRESETS`` (``original``, ``medium``, ``small``, ``mini``, ``tiny``), optionally changed."""
        if name not in PRESETS:
            raise ConfigError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        return PRESETS[name].replace(**overrides)


def _validate(config: BiLMConfig) -> None:
    positive = ["projection_dim", "lstm_dim", "char_embedding_dim", "n_layers", "n_characters"]
    for name in positive:
        value = getattr(config, name)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"BiLMConfig.{name} must be a positive integer, got {value!r}.")
    if config.n_highway < 0 or config.vocab_size < 0:
        raise ConfigError(f"n_highway and vocab_size must be >= 0, got {config.n_highway} and {config.vocab_size}.")
    if not config.filters:
        raise ConfigError("BiLMConfig.filters is empty; give at least one (width, n_filters) pair.")
    for width, count in config.filters:
        if width < 1 or count < 1 or width > config.max_characters_per_token:
            raise ConfigError(
                f"Filter (width={width}, n={count}) is invalid: need 1 <= width <= "
                f"{config.max_characters_per_token} and n >= 1."
            )
    if config.projection_dim >= config.lstm_dim:
        raise ConfigError(
            f"projection_dim ({config.projection_dim}) must be smaller than lstm_dim "
            f"({config.lstm_dim}): the LSTM projects its cells down to the projection."
        )
    if config.activation not in ("relu", "tanh"):
        raise ConfigError(f"activation must be 'relu' or 'tanh', got {config.activation!r}.")
    for name in ("cell_clip", "proj_clip"):
        value = getattr(config, name)
        if value is not None and not value > 0:
            raise ConfigError(f"{name} must be positive or None (no clipping), got {value!r}.")
    if not 0.0 <= config.dropout < 1.0:
        raise ConfigError(f"dropout must be in [0, 1), got {config.dropout!r}.")
    _validate_vocabulary(config)


def _validate_vocabulary(config: BiLMConfig) -> None:
    if config.char_vocabulary not in (BYTE_ENCODING, TABLE_ENCODING):
        raise ConfigError(
            f"char_vocabulary must be {BYTE_ENCODING!r} or {TABLE_ENCODING!r}, got {config.char_vocabulary!r}."
        )
    byte_sizes = (N_CHARACTERS, MAX_WORD_LENGTH)
    if config.char_vocabulary == BYTE_ENCODING and (config.n_characters, config.max_characters_per_token) != byte_sizes:
        raise ConfigError(
            f"n_characters={config.n_characters}, max_characters_per_token={config.max_characters_per_token} "
            f"do not fit char_vocabulary={BYTE_ENCODING!r}, which always has {byte_sizes[0]} / {byte_sizes[1]}; "
            f"use char_vocabulary={TABLE_ENCODING!r} for a model's own character vocabulary."
        )
    if config.char_vocabulary == TABLE_ENCODING and config.max_characters_per_token < 3:
        raise ConfigError(
            "max_characters_per_token must be >= 3 (begin mark, a character, end mark), got "
            f"{config.max_characters_per_token}."
        )
    sizes = (config.word_vocab_size, config.word_dim)
    if not all(isinstance(v, int) and v >= 0 for v in sizes) or (sizes[0] == 0) != (sizes[1] == 0):
        raise ConfigError(
            f"word_vocab_size={sizes[0]!r} and word_dim={sizes[1]!r}: both must be 0 (no word embedding) "
            "or both positive integers."
        )


_VOCABULARY_FIELDS = ("char_vocabulary", "word_vocab_size", "word_dim")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BiLMConfig)}

PRESETS: Dict[str, BiLMConfig] = {
    # The published architecture of Peters et al. (2018), with its clipping: 93.6M parameters.
    "original": BiLMConfig(
        projection_dim=512,
        lstm_dim=4096,
        filters=_ORIGINAL_FILTERS,
        n_highway=2,
        cell_clip=3.0,
        proj_clip=3.0,
    ),
    # Sizes of the published medium (28.0M) and small (13.6M) models, unclipped to run on the fused LSTM kernels.
    "medium": BiLMConfig(projection_dim=256, lstm_dim=2048, filters=_ORIGINAL_FILTERS, n_highway=1),
    "small": BiLMConfig(projection_dim=128, lstm_dim=1024, filters=_ORIGINAL_FILTERS, n_highway=1),
    # The workflow's default: the paper's structure with the lowest held-out perplexity after 9 minutes
    # on 2 cores in `bench/pretrain.py sweep` (0.77M parameters).
    "mini": BiLMConfig(projection_dim=64, lstm_dim=256, filters=_EIGHTH_FILTERS, n_highway=1),
    # For tests and smoke runs.
    "tiny": BiLMConfig(
        projection_dim=16,
        lstm_dim=48,
        filters=((1, 8), (2, 8), (3, 16)),
        n_highway=1,
        char_embedding_dim=8,
    ),
}
