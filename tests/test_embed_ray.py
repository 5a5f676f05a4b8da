"""embed on Ray: the same files as in this process, with 1 and 2 workers, on a two-node cluster
started on 127.0.0.1, and after the driver is killed."""

import os
import signal
import subprocess
import sys
import time

import pytest
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


@pytest.mark.parametrize("workers", [1, 2])
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


def test_killing_the_driver_loses_no_finished_block(tmp_path, pipeline):  # noqa: F811
    """500 blocks of 4 lines: the driver (and the local Ray it started) is killed once some are written."""
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(CORPUS * 80) + "\n", encoding="utf-8")
    settings = EmbedSettings(str(pipeline), block_lines=4)
    embed_corpus(source, tmp_path / "reference", settings, progress=False)
    command = [sys.executable, "-m", "spacy_elmo", "embed", str(source), str(tmp_path / "out"), "-p", str(pipeline)]
    command += ["--block-lines", "4", "--ray", "--workers", "1"]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    blocks = tmp_path / "out" / "blocks"
    deadline = time.time() + 120
    while len(list(blocks.glob("block-*.hdf5"))) < 5 and time.time() < deadline and driver.poll() is None:
        time.sleep(0.02)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    kept = {int(p.stem.split("-")[1]) for p in blocks.glob("block-*.hdf5")}
    assert 5 <= len(kept) < 500, len(kept)
    report = embed_corpus(source, tmp_path / "out", settings, Workers(ray=True), progress=False)
    recomputed = sorted(figures["block"] for figures in report.computed)
    assert recomputed == sorted(set(range(500)) - kept), "only the missing blocks"
    assert_same_output(tmp_path / "reference", tmp_path / "out")
