"""Blocks embedded on Ray Data: a dataset of the blocks to compute, mapped by a pool of actors that
each load the pipeline once (``map_batches`` with a callable class, one block per call).

The dataset holds blocks, not lines: Ray Data does not number rows, and a block's file must hold
exactly its lines for the index and for resuming, so each actor reads its block's lines from the
input itself (on a cluster the input and the output folder are on storage every node sees). Ray
schedules the actors (``num_gpus`` each; Ray sets their CUDA_VISIBLE_DEVICES), keeps them busy and
holds back work the writers cannot take.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

from ..extras import install_command
from .blocks import Block
from .settings import EmbedSettings, Workers
from .worker import embed_block, load_pipeline


def import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data is its own part of the package)
    except ImportError:
        raise ImportError(
            f"--ray and --ray-address run on Ray, which is not installed: {install_command('ray')}"
        ) from None
    return ray


LOCAL_ACTOR_START_S = 600  # how long a local Ray may take to start the workers (each loads the pipeline)


def run_on_ray(
    todo: List[Block], output: Path, settings: EmbedSettings, workers: Workers, on_block: Callable[[Dict], None]
) -> List[Dict[str, Any]]:
    """Embed ``todo`` with ``workers.workers`` actors on a local Ray (started and stopped here) or on
    the cluster at ``workers.address``; ``on_block`` gets each finished block's figures. ``output``
    and the paths in ``settings`` are absolute (embedding.for_workers)."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=workers.address, logging_level=logging.WARNING, include_dashboard=False)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # ours counts lines
        if started_here:  # every local worker loads the pipeline before the first block: all share the work
            context.wait_for_min_actors_s = LOCAL_ACTOR_START_S
        cpus = _cpus_per_worker(ray, workers.workers)
        blocks = ray.data.from_items([asdict(block) for block in todo], override_num_blocks=len(todo))
        figures = blocks.map_batches(
            BlockEmbedder,
            fn_constructor_kwargs={"settings": asdict(settings), "output": str(output), "threads": cpus},
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=workers.workers),
            num_cpus=cpus,
            num_gpus=workers.gpus_per_worker or None,
        )
        computed = []
        for row in figures.iter_rows():
            computed.append({key: _plain(value) for key, value in row.items()})
            on_block(computed[-1])
        return computed
    finally:
        if started_here:
            ray.shutdown()


def _cpus_per_worker(ray: Any, workers: int) -> int:
    """An equal share of the cluster's CPUs, at most what its largest node has (else unschedulable)."""
    nodes = [node["Resources"].get("CPU", 0) for node in ray.nodes() if node["Alive"]]
    return int(max(1, min(max(nodes, default=1), sum(nodes) // workers)))


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


class BlockEmbedder:
    """A Ray Data actor: the pipeline, loaded once; each call embeds one block and writes its file.

    Ray Data calls an actor from a thread pool, not from the thread that built it, while CUDA's
    current device and cupy's state are per thread: on an H100 the calls failed inside cupy
    ("invalid device ordinal", "invalid argument"). So the pipeline is loaded, and every block
    embedded, on one thread of the actor's own, as in a process without Ray."""

    def __init__(self, settings: Dict[str, Any], output: str, threads: int):
        import ray
        import torch

        torch.set_num_threads(threads)
        self.settings = EmbedSettings(**settings)
        self.output = Path(output)
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-embed")
        gpu_id = 0 if ray.get_gpu_ids() else -1  # Ray shows the actor its GPUs from 0
        self.nlp = self.thread.submit(load_pipeline, self.settings, gpu_id).result()
        self.node = ray.get_runtime_context().get_node_id()

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self.thread.submit(self._embed, batch).result()

    def _embed(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        figures = []
        for values in zip(*batch.values(), strict=True):
            block = Block(**{key: _plain(value) for key, value in zip(batch, values, strict=True)})
            figures.append({**embed_block(self.nlp, block, self.output, self.settings), "node": self.node})
        return {key: np.array([f[key] for f in figures]) for key in figures[0]}
