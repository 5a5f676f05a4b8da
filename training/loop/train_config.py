"""The settings of a pretraining run: a JSON file, then ``--set key=value`` overrides, each value
checked against the type of its field (``--set lr=abc`` is an error that names the setting)."""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import typer

from spacy_elmo.choices import choose

from .schedule import BUDGETED, SCHEDULES

DEVICES = {"auto": "a GPU where torch sees CUDA, else the CPU", "cpu": "the CPU", "cuda": "a CUDA GPU"}

# How a setting's type is named in errors: the JSON values it takes.
JSON_NAMES = {
    float: "a number",
    int: "an integer",
    bool: "true or false",
    str: "a string",
    type(None): "null",
    dict: "a JSON object",
}


@dataclass
class TrainConfig:
    corpus: str = ""  # directory with train/ and dev/ shards
    vocab: str = ""  # vocab.txt; default with init_from: the source's vocab.txt
    preset: str = "small"  # BiLMConfig preset ...
    model: Dict[str, Any] = field(default_factory=dict)  # ... and overrides of its sizes
    init_from: Optional[str] = None  # a native biLM, checkpoint or run (its best weights) to continue training
    softmax: str = "full"  # spacy_elmo.training.loop.objective.SOFTMAXES: "full" or "sampled"
    n_samples: int = 8192  # sampled softmax candidates per batch
    optimizer: str = (
        "adagrad"  # spacy_elmo.training.loop.optimizers.OPTIMIZERS: "adagrad" (the original, lr 0.2) or "adam"
    )
    lr: float = 0.2  # the peak learning rate of lr_schedule
    lr_schedule: str = (
        "constant"  # spacy_elmo.training.loop.schedule.SCHEDULES: "constant" or "warmup-cosine" (over the budget)
    )
    warmup: float = 0.05  # warmup-cosine: fraction of the budget (max_minutes or max_steps) spent warming up
    final_lr: float = 0.1  # warmup-cosine: the learning rate at the end of the budget, as a fraction of lr
    clip_norm: float = 10.0  # gradient norm clipping; 0 disables
    dropout: float = 0.1
    batch_tokens: int = 4096  # global batch, <S>/</S> included
    data_streams: int = 0  # 0: one per process
    max_steps: int = 0  # 0: no limit
    max_minutes: float = 0.0  # 0: no limit
    eval_every: int = 200  # steps; 0: by eval_minutes only
    eval_minutes: float = 0.0  # also evaluate at least this often (a pace that holds on any machine); 0: by steps only
    eval_tokens: int = 50000  # dev tokens per evaluation
    patience: int = 0  # stop after this many dev evaluations without a new best (0: never)
    log_every: int = 10  # steps
    checkpoint_every: int = 500  # steps
    checkpoint_minutes: float = 10.0  # also checkpoint at least this often
    keep_checkpoints: int = 3
    seed: int = 0
    bf16: bool = True  # bf16 autocast on GPU
    compile: bool = False  # torch.compile the loss module
    threads: int = 0  # CPU threads per process; 0: cores / processes
    device: str = "auto"  # DEVICES: "auto" (GPU LOCAL_RANK where torch sees CUDA, else the CPU), "cpu" or "cuda"

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for setting in dataclasses.fields(self):
            value = getattr(self, setting.name)
            if not _has_type(value, hints[setting.name]):
                raise ValueError(
                    f"Training setting {setting.name} must be {_type_name(hints[setting.name])}, got {value!r}."
                )
        _check_schedule_and_pace(self)

    @classmethod
    def load(cls, path: Optional[Path], overrides: List[str]) -> "TrainConfig":
        """Settings from ``path`` (a JSON file, or the name of a shipped config: ``SHIPPED``) with
        ``overrides`` (``key=value``, the value JSON where it parses) on top."""
        values: Dict[str, Any] = json.loads(config_file(path).read_text()) if path else {}
        for item in overrides:
            key, sep, raw = item.partition("=")
            if not sep:
                raise typer.BadParameter(f"--set takes key=value, got {item!r}.")
            try:
                values[key] = json.loads(raw)
            except json.JSONDecodeError:
                values[key] = raw
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise typer.BadParameter(f"Unknown training settings {unknown}.")
        try:
            return cls(**values)
        except ValueError as err:
            raise typer.BadParameter(str(err)) from None


# The configs that ship with the package (training/configs/), by name: a clone and a pip install alike
SHIPPED = Path(__file__).resolve().parents[1] / "configs"


def config_file(path: Path) -> Path:
    """``path`` where it is a file, else the shipped config of that name (``pretrain-cpu`` or
    ``pretrain-cpu.json``)."""
    if Path(path).is_file():
        return Path(path)
    shipped = SHIPPED / Path(path).with_suffix(".json").name
    if Path(path).name == str(path) and shipped.is_file():
        return shipped
    names = ", ".join(sorted(config.stem for config in SHIPPED.glob("*.json")))
    raise typer.BadParameter(
        f"No config file {str(path)!r}; give a JSON file or the name of a shipped config: {names}."
    )


def _check_schedule_and_pace(cfg: "TrainConfig") -> None:
    """A known schedule; one over the budget needs a budget, and its fractions must be fractions; an
    evaluation pace, and patience >= 0."""
    choose(SCHEDULES, "lr_schedule", cfg.lr_schedule)
    choose(DEVICES, "device", cfg.device)
    if cfg.lr_schedule in BUDGETED and not (cfg.max_minutes or cfg.max_steps):
        raise ValueError(
            f"lr_schedule {cfg.lr_schedule!r} warms up and decays over the run's budget, but this run has none "
            "(max_minutes=0, max_steps=0); set max_minutes or max_steps, or use lr_schedule 'constant'."
        )
    if not 0.0 <= cfg.warmup < 1.0 or not 0.0 <= cfg.final_lr <= 1.0:
        raise ValueError(
            f"warmup must be in [0, 1) and final_lr in [0, 1] (fractions of the budget and of lr), got "
            f"warmup={cfg.warmup!r}, final_lr={cfg.final_lr!r}."
        )
    if cfg.patience < 0:
        raise ValueError(f"patience must be >= 0 (0: never stop early), got {cfg.patience!r}.")
    if cfg.eval_every < 0 or cfg.eval_minutes < 0 or not (cfg.eval_every or cfg.eval_minutes):
        raise ValueError(
            f"eval_every={cfg.eval_every!r}, eval_minutes={cfg.eval_minutes!r}: both must be >= 0 and one positive "
            "(evaluate every N steps, every M minutes, or both)."
        )


def _has_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` (parsed from JSON) fits the field type ``hint``: an int is a float, a bool
    is neither; Dict[...] is any dict."""
    if hint is Any:
        return True
    if typing.get_origin(hint) is Union:
        return any(_has_type(value, option) for option in typing.get_args(hint))
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, typing.get_origin(hint) or hint)


def _type_name(hint: Any) -> str:
    """How a JSON value of the field type ``hint`` is described in errors."""
    if typing.get_origin(hint) is Union:
        return " or ".join(_type_name(option) for option in typing.get_args(hint))
    return JSON_NAMES.get(typing.get_origin(hint) or hint, str(hint))
