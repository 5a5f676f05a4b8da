"""embed on Ray: the same files as in this process, with 1 and 2 workers, on a two-node cluster
started on 127.0.0.1, and after the driver is killed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_embed_cli import (  # noqa: F401  (fixtures)
    CORPUS,
    assert_same_output,
    corpus_file,  # noqa: F401
    datasets,
    in_process,
    pipeline,
)

from spacy_elmo.corpus.embedding import EmbedSettings, Workers, embed_corpus

ray = pytest.importorskip("ray", reason="the ray extra (pip install spacy-elmo[ray]) is not installed")


# one worker: the driver's kill test below reruns on one and compares its output; `nox -s matrix` runs it here too
@pytest.mark.parametrize("workers", [pytest.param(1, marks=pytest.mark.matrix), 2])
def test_ray_workers_write_what_one_process_writes(tmp_path, pipeline, corpus_file, in_process, workers):  # noqa: F811
    settings = EmbedSettings(str(pipeline), block_lines=4)
    report = embed_corpus(corpus_file, tmp_path / "out", settings, Workers(ray=True, workers=workers), progress=False)
    assert len(report.computed) == 7 and len({figures["pid"] for figures in report.computed}) == workers
    assert_same_output(in_process, tmp_path / "out")
    assert not ray.is_initialized(), "the local Ray is stopped at the end"


def test_a_two_node_cluster_writes_what_one_process_writes(tmp_path, pipeline, corpus_file, in_process):  # noqa: F811
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        settings = EmbedSettings(str(pipeline), block_lines=4)
        report = embed_corpus(
            corpus_file,
            tmp_path / "out",
            settings,
            Workers(ray=True, address=cluster.address, workers=2),
            progress=False,
        )
    finally:
        cluster.shutdown()
    assert len({figures["node"] for figures in report.computed}) == 2, "one actor on each node"
    assert_same_output(in_process, tmp_path / "out")


BLOCKS = 50  # of 4 lines: time enough to kill a run midway (the driver is killed at its 5th)


def embed_on_ray_until_5_blocks(tmp_path, pipeline_path):
    """A reference made here, then `embed --ray` in a subprocess, returned once 5 blocks are written:
    (the subprocess, its blocks folder, the input, the settings)."""
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(CORPUS * (4 * BLOCKS // len(CORPUS))) + "\n", encoding="utf-8")
    settings = EmbedSettings(str(pipeline_path), block_lines=4)
    embed_corpus(source, tmp_path / "reference", settings, progress=False)
    command = [sys.executable, "-m", "spacy_elmo", "embed", str(source), str(tmp_path / "out")]
    command += ["-p", str(pipeline_path), "--block-lines", "4", "--ray", "--workers", "1"]
    # its output to a file, not a pipe: nothing reads a pipe while it runs, and Ray's processes
    # outside its process group would keep a pipe open after it is killed
    with open(driver_output(tmp_path), "w") as output:
        driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=output, start_new_session=True)
    blocks = tmp_path / "out" / "blocks"
    deadline = time.monotonic() + 120  # a hang guard: 5 blocks of 4 lines take seconds
    while len(list(blocks.glob("block-*.hdf5"))) < 5:
        if driver.poll() is not None or time.monotonic() > deadline:
            status = driver.poll()
            try:
                os.killpg(driver.pid, signal.SIGKILL)
            except ProcessLookupError:  # the driver and its group have exited
                pass
            driver.wait()
            written = len(list(blocks.glob("block-*.hdf5")))
            end = f"it exited with status {status}" if status is not None else "it was still running after 120 s"
            output = driver_output(tmp_path).read_text(errors="replace")[-3000:]
            raise AssertionError(f"embed --ray wrote {written} of 5 blocks and {end}: {output}")
        time.sleep(0.02)
    return driver, blocks, source, settings


def driver_output(tmp_path) -> Path:
    """The file ``embed --ray``'s driver writes its stderr to."""
    return tmp_path / "driver-stderr.txt"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="waits for the orphaned worker through /proc")
def test_killing_the_driver_loses_no_finished_block(tmp_path, pipeline):  # noqa: F811
    """The driver and the local Ray it started are killed; the rerun computes only the missing blocks.
    The actor is not in the driver's process group and may finish the block in hand after the kill
    (seen on an AMD EPYC Zen 3): such a block is kept too. Blocks finished before the kill are
    neither lost nor rewritten, and the output equals a reference made in one go. The rerun runs in
    this process: which blocks are missing is the output folder's to say, whatever computes them
    (the tests above hold Ray's blocks to this process's)."""
    driver, blocks, source, settings = embed_on_ray_until_5_blocks(tmp_path, pipeline)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    at_kill = {p.name: p.stat().st_ino for p in blocks.glob("block-*.hdf5")}
    assert 5 <= len(at_kill) < BLOCKS, len(at_kill)
    deadline = time.monotonic() + 60  # the orphaned actor exits once its Ray is gone
    while ray_workers_embedding() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ray_workers_embedding(), f"the orphaned actor is still running 60 s on: {ray_workers_embedding()}"
    before_rerun = {int(p.stem.split("-")[1]) for p in blocks.glob("block-*.hdf5")}
    report = embed_corpus(source, tmp_path / "out", settings, progress=False)
    recomputed = sorted(figures["block"] for figures in report.computed)
    assert recomputed == sorted(set(range(BLOCKS)) - before_rerun), "only the missing blocks"
    assert all(blocks.joinpath(name).stat().st_ino == inode for name, inode in at_kill.items()), "not rewritten"
    assert_same_output(tmp_path / "reference", tmp_path / "out")


def ray_workers_embedding() -> list:
    """The pids of Ray Data actors running BlockEmbedder (their process title names the class)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            title = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # not a process, or gone
            continue
        if entry.name.isdigit() and title.startswith("ray::") and "BlockEmbedder" in title:
            pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker process through /proc")
@pytest.mark.matrix  # 22 s: the default run keeps the driver's kill; `nox -s matrix` runs this one
def test_killing_a_worker_loses_no_finished_block(tmp_path, pipeline):  # noqa: F811
    """Ray restarts the killed actor and retries its block; blocks finished before are not rewritten."""
    driver, blocks, _, _ = embed_on_ray_until_5_blocks(tmp_path, pipeline)
    workers = ray_workers_embedding()
    finished = {p.name: p.stat().st_ino for p in blocks.glob("block-*.hdf5")}
    assert len(workers) == 1 and 5 <= len(finished) < BLOCKS, (workers, len(finished))
    os.kill(workers[0], signal.SIGKILL)
    assert driver.wait(timeout=300) == 0, driver_output(tmp_path).read_text(errors="replace")[-3000:]
    assert all(blocks.joinpath(name).stat().st_ino == inode for name, inode in finished.items()), "not rewritten"
    assert_same_output(tmp_path / "reference", tmp_path / "out")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_actor_per_gpu_writes_what_one_process_on_a_gpu_writes(tmp_path, pipeline, corpus_file):  # noqa: F811
    settings = EmbedSettings(str(pipeline), block_lines=4)
    embed_corpus(corpus_file, tmp_path / "one-gpu", settings, Workers(gpu_id=0), progress=False)
    gpus = torch.cuda.device_count()
    embed_corpus(corpus_file, tmp_path / "on-ray", settings, Workers(ray=True, workers=gpus, gpus_per_worker=1))
    assert_same_output(tmp_path / "one-gpu", tmp_path / "on-ray")
