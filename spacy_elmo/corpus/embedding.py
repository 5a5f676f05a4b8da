"""A corpus at scale: embed text in blocks, here or on a Ray cluster, resumable after a kill.

    python -m spacy_elmo embed corpus.txt vectors/ -p PIPELINE --block-lines 5000
    python -m spacy_elmo embed texts/ vectors/ --weights BILM_DIR_OR_NAME --gpu-id 0
    python -m spacy_elmo embed corpus.txt vectors/ -p PIPELINE --ray --workers 4 --gpus-per-worker 1
    python -m spacy_elmo embed corpus.txt vectors/ -p PIPELINE --ray-address HEAD:6379 --workers 16

The vectors come from a spaCy pipeline with an ``elmo`` component, or from biLM weights alone (a
native biLM directory, a catalogue name or a URL), around which the pipeline a packaged model has
is assembled: blank(lang) + sentencizer + elmo. Either way every layer is written in float32,
whatever the component's ``store`` settings.

The input is cut into blocks (corpus.blocks); each block is embedded on its own and written as one
file of the output folder (corpus.output_folder), which ends with an index once all are there. The
blocks run in this process, or on Ray (corpus.ray_runner: one actor per worker, each holding the
pipeline). A sentence's vectors depend neither on its batch nor on the worker, so the files are the
same bitwise whichever way they were made.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..choices import choose
from ..progress import progress_bar
from .blocks import Block, CorpusPlan, plan_blocks
from .hdf5_output import LAYER_SELECTIONS
from .output_folder import merge_hdf5, missing_blocks, prepare_folder, write_index
from .settings import EmbedSettings, Workers
from .worker import embed_block, load_pipeline

__all__ = ["EmbedReport", "EmbedSettings", "Workers", "embed_corpus", "load_pipeline"]


@dataclass
class EmbedReport:
    """What a run did: lines and blocks in all, blocks computed now (the others were there), and
    each computed block's figures (lines, tokens, seconds, the worker's peak memory, its host)."""

    lines: int
    blocks: int
    computed: List[Dict[str, Any]]


def embed_corpus(
    source: Path,
    output: Path,
    settings: EmbedSettings,
    workers: Workers = Workers(),
    merge_into: Optional[Path] = None,
    progress: bool = True,
) -> EmbedReport:
    """Embed every line of ``source`` (a file or a folder) into the folder ``output``; blocks already
    there are kept. ``merge_into``: also write everything into that one HDF5 file."""
    _check(settings, workers)
    plan = plan_blocks(source, settings.block_lines, settings.text_column)
    runtime = for_workers(settings)
    fresh = not Path(output).exists()
    prepare_folder(output, _manifest(plan, settings))
    todo = missing_blocks(output, plan)
    done = plan.lines - sum(block.lines for block in todo)
    try:
        with progress_bar(total=plan.lines, initial=done, unit="line", desc="Embedding", disable=not progress) as bar:
            computed = _run(todo, Path(output).resolve(), runtime, workers, bar.update)
    except BaseException:
        if fresh and len(missing_blocks(output, plan)) == len(plan.blocks):
            shutil.rmtree(output, ignore_errors=True)  # nothing done: leave nothing behind
        raise
    write_index(output, plan, settings.layers)
    if merge_into is not None:
        merge_hdf5(output, merge_into)
    return EmbedReport(plan.lines, len(plan.blocks), [figures for figures in computed if figures["written"]])


def _run(
    todo: List[Block],
    output: Path,
    settings: EmbedSettings,
    workers: Workers,
    on_lines: Callable[[int], object],
) -> List[Dict[str, Any]]:
    """Embed the blocks ``todo``, telling ``on_lines(n)`` as lines are done: line by line here, a
    block at a time on Ray (its workers are other processes)."""
    if not todo:
        return []
    if workers.ray:
        from .ray_runner import run_on_ray

        def block_done(figures: Dict[str, Any]) -> None:
            on_lines(figures["lines"])

        return run_on_ray(todo, output, settings, workers, block_done)

    def line_done() -> None:
        on_lines(1)

    nlp = load_pipeline(settings, workers.gpu_id)
    computed = []
    for block in todo:
        computed.append(embed_block(nlp, block, output, settings, line_done))
        if not computed[-1]["written"]:  # found written: its lines were not embedded one by one
            on_lines(block.lines)
    return computed


def _check(settings: EmbedSettings, workers: Workers) -> None:
    choose(LAYER_SELECTIONS, "layers", settings.layers)  # before any work: the same table the writer uses
    if (settings.pipeline is None) == (settings.weights is None):
        given = "both" if settings.pipeline else "neither"
        raise ValueError(
            "Give either a pipeline (--pipeline: a spaCy pipeline with an elmo component) or biLM weights "
            f"(--weights: a native biLM directory, a catalogue name or a URL), not {given}."
        )
    if settings.lang is not None and settings.weights is None:
        raise ValueError(f"lang ({settings.lang!r}) goes with --weights; a pipeline has its own language.")
    if settings.block_lines < 1 or settings.batch_size < 1:
        raise ValueError(
            f"block_lines and batch_size must be positive, got {settings.block_lines} and {settings.batch_size}."
        )
    _check_workers(workers)


def _check_workers(workers: Workers) -> None:
    if workers.workers < 1 or workers.gpus_per_worker < 0:
        raise ValueError(
            f"--workers must be positive and --gpus-per-worker not negative, got {workers.workers} and "
            f"{workers.gpus_per_worker}."
        )
    if not workers.ray and (workers.workers != 1 or workers.gpus_per_worker):
        raise ValueError(
            f"--workers {workers.workers} and --gpus-per-worker {workers.gpus_per_worker} run on Ray: add --ray "
            "(a local Ray on this machine) or --ray-address ADDRESS (a cluster)."
        )
    if workers.ray and workers.gpu_id >= 0:
        raise ValueError(
            f"--gpu-id {workers.gpu_id} picks a GPU of this process; on Ray give --gpus-per-worker instead "
            "(Ray assigns the GPUs)."
        )


def _manifest(plan: CorpusPlan, settings: EmbedSettings) -> Dict[str, Any]:
    manifest = {"input": plan.files, "lines": plan.lines, **asdict(settings)}
    return json.loads(json.dumps(manifest))  # as read back from the file


def for_workers(settings: EmbedSettings) -> EmbedSettings:
    """The settings workers load with: weights given by name or URL downloaded once, here, and a
    pipeline or weights path made absolute (Ray actors do not run in this working directory)."""
    from ..hub.cache import resolve_weights
    from ..pipeline.assembly import lemmas_before_download

    if settings.weights:
        lemmas_before_download(settings.weights, settings.lang)
    weights = settings.weights and str(resolve_weights(settings.weights).resolve())
    pipeline = settings.pipeline
    if pipeline and Path(pipeline).exists():  # else a package name, for spacy.load
        pipeline = str(Path(pipeline).resolve())
    return replace(settings, weights=weights, pipeline=pipeline)
