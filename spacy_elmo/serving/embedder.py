"""The replicas that embed: each loads the pipeline once, on a thread of its own, and runs every
batch there (``batcher.ContinuousBatcher``). The gateway (``gateway``) calls ``Embedder.embed``
directly where the service runs in one process (``process_engine``), or through a Ray Serve handle
(``ray_engine``), where several of them on a cluster share the load.

The thread is the replica's own because Ray Serve runs a replica's constructor and its methods on
different threads, while CUDA's current device and cupy's state are per thread: a GPU pipeline is
called from the thread that set it up (as ``corpus.ray_runner.BlockEmbedder`` does for Ray Data).
"""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any, Tuple, Type

from .api_types import ElmoAbout, PipelineAbout, ReplicaAbout
from .batcher import BatchFigures, ContinuousBatcher
from .requests import EmbedRequest
from .responses import embed_requests
from .settings import ServeSettings


@dataclass(frozen=True)
class Embedded:
    """One request's answer (its JSON body), the batch it ran in, and the replica that ran it."""

    body: bytes
    batch: BatchFigures
    replica: str


class Embedder:
    """One replica: the pipeline, loaded once on its worker thread, and its batcher. It is the
    gateway's ``Replicas`` where both run in one process (no call of it is lost)."""

    lost: Tuple[Type[BaseException], ...] = ()

    def __init__(self, settings: ServeSettings) -> None:
        import torch

        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-serve")
        self.worker.submit(torch.set_num_threads, settings.threads).result()
        self.nlp = self.worker.submit(load_served_pipeline, settings).result()
        self.replica = f"{socket.gethostname()}:{os.getpid()}"
        self.about = describe_replica(self.nlp, self.replica)
        cap = settings.max_batch_tokens  # a request above the budget runs alone
        self.batcher: ContinuousBatcher[EmbedRequest, bytes] = ContinuousBatcher(
            partial(embed_requests, self.nlp),
            self.worker,
            size=lambda request: min(request.size, cap),
            docs=lambda request: request.n_docs,
            max_tokens=cap,
            max_requests=None if settings.batching else 1,
            max_wait_s=settings.max_wait_ms / 1000,
        )

    async def embed(self, request: EmbedRequest) -> Embedded:
        body, batch = await self.batcher.submit(request)
        return Embedded(body, batch, self.replica)

    async def describe(self) -> ReplicaAbout:
        """What ``GET /metadata`` says of the pipeline and this replica."""
        return self.about


def load_served_pipeline(settings: ServeSettings) -> Any:
    """The pipeline ``settings.source`` names, its elmo components set to keep every layer, on
    ``settings.device`` (as ``embed`` loads it: ``corpus.worker.load_pipeline``). On a GPU, thinc's
    cupy arrays take their memory from torch's allocator (as ``spacy train`` sets it), so the biLM's
    tensors and spaCy's arrays share one pool."""
    from ..corpus.settings import EmbedSettings
    from ..corpus.worker import load_pipeline

    if is_pipeline(settings.source):
        embed = EmbedSettings(pipeline=settings.source, precision=settings.precision)
    else:
        embed = EmbedSettings(weights=settings.source, lang=settings.lang, precision=settings.precision)
    return load_pipeline(embed, settings.gpu_id, allocator="pytorch")


def is_pipeline(source: str) -> bool:
    """A spaCy pipeline directory, or the name of an installed package that is not a published
    model's; anything else (a biLM directory, a published name, a URL) is weights."""
    from ..hub.cache import is_url
    from ..hub.catalogue import CATALOGUE

    path = Path(source).expanduser()
    if path.exists():
        return (path / "config.cfg").is_file()
    return source not in CATALOGUE and not is_url(source) and "/" not in source


def describe_replica(nlp: Any, replica: str) -> ReplicaAbout:
    """The pipeline's name and version, its components, the biLM's sizes, precision, device and
    kernels, and ``replica`` (host:pid)."""
    from ..pipeline.component import Elmo

    elmo = next(pipe for _, pipe in nlp.pipeline if isinstance(pipe, Elmo))
    bilm, backend = elmo.bilm, elmo.runner.backend
    return ReplicaAbout(
        pipeline=PipelineAbout(nlp.meta.get("name"), nlp.meta.get("version"), nlp.lang),
        components=list(nlp.pipe_names),
        elmo=ElmoAbout(
            layers=bilm.config.n_output_layers,
            width=bilm.config.output_dim,
            precision=backend.runs,
            device=str(bilm.device),
            kernel=backend.choice.kernel,
            kernels=backend.description(),
        ),
        spacy_elmo=version("spacy-elmo"),
        replica=replica,
    )
