"""What an embedding run's output depends on (recorded in its manifest), and where its blocks run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class EmbedSettings:
    """What a run's output depends on; recorded in the manifest. ``pipeline`` or ``weights``:
    exactly one; ``lang`` (default "en") goes with ``weights``. ``store_tokens``: each line's
    tokens kept beside its vectors (``EmbeddedCorpus.tokens``)."""

    pipeline: Optional[str] = None
    layers: str = "all"
    tokenized: bool = False
    batch_size: int = 64
    precision: Optional[str] = None
    block_lines: int = 10000
    weights: Optional[str] = None
    lang: Optional[str] = None
    text_column: str = "text"
    store_tokens: bool = False


@dataclass(frozen=True)
class Workers:
    """Where the blocks run. ``ray``: False here in this process (on ``gpu_id``, -1 the CPU);
    True on Ray: a local one started for the run when ``address`` is None, else the cluster there;
    ``workers`` actors with ``gpus_per_worker`` GPUs each."""

    ray: bool = False
    address: Optional[str] = None
    workers: int = 1
    gpus_per_worker: float = 0.0
    gpu_id: int = -1
