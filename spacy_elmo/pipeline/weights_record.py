"""What the elmo component learns about its weights, as opposed to what it is told (``settings``):
where ``initialize`` loaded them from, the token attribute they were trained on (recorded by the
catalogue), and the common direction of their vectors estimated from text (``centering``). It is
the component's ``cfg``, which spaCy saves with it.

Pipelines saved before this record kept every setting in ``cfg`` too; those keys are ignored on
load (the pipeline's config.cfg holds the settings, and always won).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional


@dataclass(frozen=True)
class WeightsRecord:
    """weights: the path, name or URL ``initialize`` loaded; weights_input_attr: what they read
    (``token_input``), None where nothing was recorded; centering: ``Centering.as_config()`` of
    the estimate, None before one is made."""

    weights: Optional[str] = None
    weights_input_attr: Optional[str] = None
    centering: Optional[Dict[str, Any]] = None

    def to_cfg(self) -> Dict[str, Any]:
        """The record as the component's ``cfg`` (JSON: spaCy writes it with the pipeline)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> "WeightsRecord":
        """The record in a saved ``cfg``, of this version or an older one."""
        return cls(**{key: cfg.get(key) for key in ("weights", "weights_input_attr", "centering")})
