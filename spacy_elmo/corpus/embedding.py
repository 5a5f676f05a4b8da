"""A corpus at scale: embed a text file in shards, in several processes, resumable after a kill.

    python -m spacy_elmo embed corpus.txt vectors.hdf5 -p PIPELINE --processes 2 --shard-lines 5000
    python -m spacy_elmo embed corpus.txt vectors.hdf5 --weights BILM_DIR_OR_NAME --gpu-id 0
    python -m spacy_elmo embed corpus.txt vectors.hdf5 -p PIPELINE --gpu-id 0,1,2,3   # one worker per GPU

The vectors come from a spaCy pipeline with an ``elmo`` component, or from biLM weights alone (a
native biLM directory, a catalogue name or a URL), around which the pipeline a packaged model has
is assembled: blank(lang) + sentencizer + elmo. Either way every layer is written in float32,
whatever the component's ``store`` settings. ``gpu_ids`` runs the biLM on GPUs: one, or several
with one worker process on each (empty: the CPU).

Lines are cut into shards of ``shard_lines`` consecutive lines. Each shard is embedded by one
worker (a process that loads the pipeline once and runs torch on its share of the cores) and
written atomically to ``OUTPUT.shards/shard-00000.hdf5``: a shard file that exists is finished, so
after a kill the same command computes only the missing ones. ``OUTPUT.shards/manifest.json``
records what the shards are made from (the input's size and sha256, the pipeline, the settings);
another run into the same folder is refused. When every shard exists they are merged into OUTPUT
(one dataset per line, named by its line number from "0", and ``sentence_to_index``, as the
original ``allennlp elmo`` command wrote), atomically, and the shards folder is removed. A
sentence's vectors do not depend on its batch, so the result equals a single-process run bitwise.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple

from tqdm import tqdm

from ..choices import choose
from ..files import atomic_write, atomic_write_json
from ..hub.download import sha256_of
from ..progress import progress_bar
from .hdf5_output import LAYER_SELECTIONS, read_lines, write_embeddings, write_sentence_index

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from spacy.language import Language

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class EmbedSettings:
    """What a run's shards depend on; recorded in the manifest. ``pipeline`` or ``weights``:
    exactly one; ``lang`` (default "en") goes with ``weights``."""

    pipeline: Optional[str] = None
    layers: str = "all"
    tokenized: bool = False
    batch_size: int = 64
    precision: Optional[str] = None
    shard_lines: int = 10000
    weights: Optional[str] = None
    lang: Optional[str] = None
    gpu_ids: Tuple[int, ...] = ()


def embed_corpus(source: Path, target: Path, settings: EmbedSettings, processes: int = 1, progress: bool = True) -> int:
    """Embed every line of ``source`` into ``target`` (HDF5) with ``processes`` workers. Returns
    the number of lines. With several ``settings.gpu_ids`` there is one worker per GPU: leave
    ``processes`` at 1 or give their number."""
    _check(settings, processes)
    processes = max(processes, len(settings.gpu_ids))
    for gpu_id in settings.gpu_ids:
        check_gpu(gpu_id)
    lines = read_lines(source)
    runtime = _with_local_weights(settings)  # downloaded once, here, not by every worker
    shards_dir = target.with_name(target.name + ".shards")
    fresh = not shards_dir.exists()
    _prepare(shards_dir, _manifest(source, len(lines), settings))
    try:
        _embed_missing_shards(lines, shards_dir, runtime, processes, progress)
    except BaseException:
        if fresh and not list(shards_dir.glob("shard-*.hdf5")):
            shutil.rmtree(shards_dir, ignore_errors=True)  # nothing done: leave nothing behind
        raise
    _merge(lines, shards_dir, target, settings.shard_lines)
    shutil.rmtree(shards_dir)
    return len(lines)


def _embed_missing_shards(
    lines: List[str], shards_dir: Path, settings: EmbedSettings, processes: int, progress: bool
) -> None:
    todo = [
        k for k in range(_shard_count(len(lines), settings.shard_lines)) if not _shard_path(shards_dir, k).is_file()
    ]
    done_lines = len(lines) - sum(len(_shard_lines(lines, k, settings.shard_lines)) for k in todo)
    with progress_bar(total=len(lines), initial=done_lines, unit="line", desc="Embedding", disable=not progress) as bar:
        if processes == 1:
            _run_here(lines, todo, shards_dir, settings, bar)
        else:
            _run_in_processes(lines, todo, shards_dir, settings, processes, bar)


def _check(settings: EmbedSettings, processes: int) -> None:
    choose(LAYER_SELECTIONS, "layers", settings.layers)  # before any work: the same table the writer uses
    if (settings.pipeline is None) == (settings.weights is None):
        given = "both" if settings.pipeline else "neither"
        raise ValueError(
            "Give either a pipeline (--pipeline: a spaCy pipeline with an elmo component) or biLM weights "
            f"(--weights: a native biLM directory, a catalogue name or a URL), not {given}."
        )
    if settings.lang is not None and settings.weights is None:
        raise ValueError(f"lang ({settings.lang!r}) goes with --weights; a pipeline has its own language.")
    if len(settings.gpu_ids) > 1 and processes not in (1, len(settings.gpu_ids)):
        raise ValueError(
            f"{len(settings.gpu_ids)} GPUs ({', '.join(map(str, settings.gpu_ids))}) run one worker process each: "
            f"leave --processes out or give {len(settings.gpu_ids)}, not {processes}."
        )
    if len(set(settings.gpu_ids)) != len(settings.gpu_ids) or any(gpu_id < 0 for gpu_id in settings.gpu_ids):
        raise ValueError(f"GPU ids must be distinct and >= 0, got {list(settings.gpu_ids)}.")
    if processes < 1 or settings.shard_lines < 1 or settings.batch_size < 1:
        raise ValueError(
            f"processes, shard_lines and batch_size must be positive, got {processes}, "
            f"{settings.shard_lines} and {settings.batch_size}."
        )


def _manifest(source: Path, n_lines: int, settings: EmbedSettings) -> dict:
    manifest = {
        "input": str(source),
        "bytes": source.stat().st_size,
        "sha256": sha256_of(source),
        "lines": n_lines,
        **asdict(settings),
    }
    return json.loads(json.dumps(manifest))  # as read back from the file: tuples become lists


def _prepare(shards_dir: Path, manifest: dict) -> None:
    """Create the shards folder, or check that the one there belongs to this very run."""
    path = shards_dir / MANIFEST
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(key for key in set(manifest) | set(previous) if manifest.get(key) != previous.get(key))
        if changed:
            raise ValueError(
                f"{shards_dir} holds the shards of another run (different {', '.join(changed)}): rerun with the "
                "same input and settings to resume it, or remove the folder to start afresh."
            )
        return
    shards_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, manifest)


def _shard_count(n_lines: int, shard_lines: int) -> int:
    return max(1, -(-n_lines // shard_lines))


def _shard_lines(lines: List[str], shard: int, shard_lines: int) -> List[str]:
    return lines[shard * shard_lines : (shard + 1) * shard_lines]


def _shard_path(shards_dir: Path, shard: int) -> Path:
    return shards_dir / f"shard-{shard:05d}.hdf5"


def _write_shard(
    nlp: Language, part: List[str], shard: int, shards_dir: Path, settings: EmbedSettings, on_line: Callable[[], None]
) -> int:
    """Shard ``shard``, given its own lines: datasets named by their line numbers in the file."""
    first = shard * settings.shard_lines
    atomic_write(
        _shard_path(shards_dir, shard),
        lambda path: write_embeddings(
            nlp, part, path, first, settings.layers, settings.tokenized, settings.batch_size, on_line
        ),
    )
    return len(part)


def _run_here(lines: List[str], todo: List[int], shards_dir: Path, settings: EmbedSettings, bar: tqdm) -> None:
    nlp = _load(settings, settings.gpu_ids[0] if settings.gpu_ids else -1)
    for shard in todo:
        _write_shard(
            nlp, _shard_lines(lines, shard, settings.shard_lines), shard, shards_dir, settings, lambda: bar.update(1)
        )


def _run_in_processes(
    lines: List[str], todo: List[int], shards_dir: Path, settings: EmbedSettings, processes: int, bar: tqdm
) -> None:
    threads = max(1, (os.cpu_count() or 1) // processes)
    context = multiprocessing.get_context("spawn")  # torch's thread pools do not survive fork
    devices = context.Queue()  # each worker takes the next one
    for device in worker_devices(processes, settings.gpu_ids):
        devices.put(device)
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_start_worker, initargs=(settings, threads, devices)
    ) as pool:
        futures = [
            pool.submit(_worker_shard, _shard_lines(lines, k, settings.shard_lines), k, str(shards_dir)) for k in todo
        ]
        for future in as_completed(futures):
            bar.update(future.result())


def worker_devices(processes: int, gpu_ids: Sequence[int]) -> List[int]:
    """The device of each worker: the GPUs in turn, or the CPU (-1) for all without GPUs."""
    return [gpu_ids[worker % len(gpu_ids)] if gpu_ids else -1 for worker in range(processes)]


_WORKER: dict = {}


def _start_worker(settings: EmbedSettings, threads: int, devices: Queue[int]) -> None:
    """In a new worker: its threads, the device it takes from the ``devices`` queue, its pipeline."""
    import torch

    torch.set_num_threads(threads)
    gpu_id = devices.get()
    _WORKER.update(nlp=_load(settings, gpu_id), settings=settings, gpu_id=gpu_id)


def _worker_shard(part: List[str], shard: int, shards_dir: str) -> int:
    """In a worker: one shard, given its own lines (the others are not sent)."""
    return _write_shard(_WORKER["nlp"], part, shard, Path(shards_dir), _WORKER["settings"], lambda: None)


def parse_gpu_ids(text: str) -> Tuple[int, ...]:
    """``--gpu-id``: "-1" (the CPU), "0", or "0,1,2" (one worker per GPU) -> the GPU ids."""
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--gpu-id takes a GPU id or ids separated by commas (e.g. 0 or 0,1), got {text!r}.") from None
    return () if ids == (-1,) else ids


def check_gpu(gpu_id: int) -> None:
    """Raise a clear error where torch sees no CUDA GPU ``gpu_id``."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpu_id >= count:
        raise _no_such_gpu(gpu_id, f"torch sees {count} CUDA GPU(s)")


def use_gpu(gpu_id: int) -> None:
    """``spacy.require_gpu(gpu_id)`` for gpu_id >= 0 (-1: the CPU), with an error that says what to
    do where there is no such CUDA GPU."""
    if gpu_id < 0:
        return
    import spacy

    check_gpu(gpu_id)
    try:
        spacy.require_gpu(gpu_id)
    except ValueError as err:
        raise _no_such_gpu(gpu_id, str(err)) from None


def _no_such_gpu(gpu_id: int, problem: str) -> ValueError:
    return ValueError(
        f"gpu_id {gpu_id}: no such CUDA GPU ({problem}). Run on a machine with an NVIDIA GPU and CUDA "
        'support (pip install "spacy-elmo[cuda12x]"), or leave --gpu-id at -1 to run on the CPU.'
    )


def _with_local_weights(settings: EmbedSettings) -> EmbedSettings:
    if settings.weights is None:
        return settings
    from ..hub.cache import resolve_weights

    return replace(settings, weights=str(resolve_weights(settings.weights)))


def _load(settings: EmbedSettings, gpu_id: int = -1) -> Language:
    """The pipeline, on GPU ``gpu_id`` (-1: the CPU), writing every layer in float32."""
    from ..pipeline.component import Elmo

    use_gpu(gpu_id)
    nlp = _pipeline(settings)
    elmo = [pipe for _, pipe in nlp.pipeline if isinstance(pipe, Elmo)]
    if not elmo:
        raise ValueError(f"The pipeline has no 'elmo' component (it has {nlp.pipe_names}).")
    for pipe in elmo:
        pipe.cfg.update(store="layers", store_dtype="float32")  # the files hold every layer, exact
        if settings.precision is not None:
            pipe.cfg["precision"] = settings.precision
    return nlp


def _pipeline(settings: EmbedSettings) -> Language:
    import spacy

    from ..pipeline.assembly import assemble_pipeline
    from ..weights.native import CONFIG_FILE

    if settings.weights is not None:
        return assemble_pipeline(settings.weights, settings.lang)
    assert settings.pipeline is not None  # _check: a pipeline where no weights are given
    path = Path(settings.pipeline)
    if (path / CONFIG_FILE).is_file() and not (path / "config.cfg").is_file():
        raise ValueError(f"{path} is a biLM directory, not a spaCy pipeline: pass it as --weights {path}.")
    return spacy.load(settings.pipeline)


def _merge(lines: List[str], shards_dir: Path, target: Path, shard_lines: int) -> None:
    import h5py

    def write(path: Path) -> None:
        with h5py.File(path, "w") as output:
            for shard in range(_shard_count(len(lines), shard_lines)):
                with h5py.File(_shard_path(shards_dir, shard), "r") as part:
                    for name in part:
                        part.copy(part[name], output, name=name)
            write_sentence_index(output, lines)

    atomic_write(target, write)
