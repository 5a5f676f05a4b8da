import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
import spacy
import torch
from conftest import make_nlp
from spacy.tokens import Doc

LINES = ["The first line .", "", "A second line, with more tokens in it.", "The first line ."]


@pytest.fixture(scope="module")
def pipeline(tiny_weights, tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline") / "elmo-pipeline"
    make_nlp(tiny_weights, sentencizer=False).to_disk(path)
    return path


def run_embed(*args):
    result = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "embed", *map(str, args)], capture_output=True, text=True
    )
    result.stdout = " ".join(result.stdout.split())  # messages wrap at the terminal width
    return result


@pytest.mark.parametrize("layers", ["all", "top", "average"])
def test_embed_writes_one_dataset_per_line(tmp_path, pipeline, layers):
    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = run_embed(source, tmp_path / "out.hdf5", "--pipeline", pipeline, "--layers", layers)
    assert result.returncode == 0, result.stdout + result.stderr
    nlp = spacy.load(pipeline)
    with h5py.File(tmp_path / "out.hdf5", "r") as output:
        assert sorted(output.keys(), key=lambda k: (len(k), k)) == ["0", "1", "2", "3", "sentence_to_index"]
        index = json.loads(output["sentence_to_index"][()])
        assert index == {"The first line .": "3", "": "1", "A second line, with more tokens in it.": "2"}
        for i, line in enumerate(LINES):
            data = nlp(line)._.elmo_data
            expected = {"all": data, "top": data[-1], "average": data.mean(axis=0)}[layers]
            np.testing.assert_allclose(output[str(i)][...], expected, rtol=0, atol=1e-7)
    assert not list(tmp_path.glob(".out.hdf5.*")), "no temporary file left behind"


def test_embed_pretokenized_lines(tmp_path, pipeline):
    source = tmp_path / "input.txt"
    source.write_text("don't split me\n", encoding="utf-8")
    assert run_embed(source, tmp_path / "out.hdf5", "-p", pipeline, "--tokenized").returncode == 0
    nlp = spacy.load(pipeline)
    with h5py.File(tmp_path / "out.hdf5", "r") as output:
        assert output["0"].shape == (3, 3, 32)
        np.testing.assert_array_equal(output["0"][...], nlp(Doc(nlp.vocab, words=["don't", "split", "me"]))._.elmo_data)


def test_embed_reports_problems(tmp_path, pipeline):
    missing = run_embed(tmp_path / "nothing.txt", tmp_path / "out.hdf5", "-p", pipeline)
    assert missing.returncode == 1 and "nothing.txt: file not found" in missing.stdout
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    bad = run_embed(tmp_path / "latin1.txt", tmp_path / "out.hdf5", "-p", pipeline)
    assert bad.returncode == 1 and "is not valid UTF-8" in bad.stdout
    spacy.blank("en").to_disk(tmp_path / "blank")
    (tmp_path / "ok.txt").write_text("fine\n")
    no_elmo = run_embed(tmp_path / "ok.txt", tmp_path / "out.hdf5", "-p", tmp_path / "blank")
    assert no_elmo.returncode == 1 and "has no 'elmo' component" in no_elmo.stdout
    assert not (tmp_path / "out.hdf5").exists()


def test_embed_from_bilm_weights_equals_the_assembled_pipeline(tmp_path, tiny_weights):
    from spacy_elmo.pipeline.assembly import assemble_pipeline

    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES + ["Two sentences here. And a second one."]) + "\n", encoding="utf-8")
    assemble_pipeline(tiny_weights).to_disk(tmp_path / "assembled")
    from_weights = run_embed(source, tmp_path / "weights.hdf5", "--weights", tiny_weights)
    from_pipeline = run_embed(source, tmp_path / "pipeline.hdf5", "-p", tmp_path / "assembled")
    assert from_weights.returncode == 0 and from_pipeline.returncode == 0, from_weights.stdout + from_pipeline.stdout
    assert_same_file(tmp_path / "weights.hdf5", tmp_path / "pipeline.hdf5")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error where there is no CUDA GPU")
def test_a_gpu_where_there_is_none_is_a_clear_error(tmp_path, tiny_weights):
    (tmp_path / "input.txt").write_text("one line\n", encoding="utf-8")
    result = run_embed(tmp_path / "input.txt", tmp_path / "out.hdf5", "-w", tiny_weights, "--gpu-id", 0)
    assert result.returncode == 1, result.stdout
    assert "gpu_id 0: no such CUDA GPU" in result.stdout and "leave --gpu-id at -1" in result.stdout
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out.hdf5").exists() and not (tmp_path / "out.hdf5.shards").exists()


def test_gpu_ids_one_worker_per_gpu(monkeypatch):
    import queue

    from spacy_elmo.corpus import embedding
    from spacy_elmo.corpus.embedding import EmbedSettings, parse_gpu_ids, worker_devices

    assert parse_gpu_ids("-1") == () and parse_gpu_ids("0") == (0,) and parse_gpu_ids("0,2") == (0, 2)
    with pytest.raises(ValueError, match="ids separated by commas .* got 'gpu0'"):
        parse_gpu_ids("gpu0")
    assert (
        worker_devices(2, (0, 2)) == [0, 2] and worker_devices(2, (1,)) == [1, 1] and worker_devices(2, ()) == [-1, -1]
    )
    for gpu_ids, processes, problem in (
        ((0, 1), 3, "one worker process each: .* give 2, not 3"),
        ((0, 0), 1, "distinct"),
    ):
        with pytest.raises(ValueError, match=problem):
            embedding._check(EmbedSettings(weights="w", gpu_ids=gpu_ids), processes)
    loaded = []
    monkeypatch.setattr(embedding, "_load", lambda settings, gpu_id: loaded.append(gpu_id) or f"nlp on {gpu_id}")
    devices = queue.Queue()
    for device in worker_devices(2, (0, 2)):
        devices.put(device)
    for _ in range(2):  # what each new worker process does first
        embedding._start_worker(EmbedSettings(weights="w", gpu_ids=(0, 2)), 1, devices)
    assert loaded == [0, 2] and embedding._WORKER["nlp"] == "nlp on 2"


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_one_worker_per_gpu_writes_what_one_gpu_writes(tmp_path, tiny_weights):
    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES * 4) + "\n", encoding="utf-8")
    one = run_embed(source, tmp_path / "one.hdf5", "-w", tiny_weights, "--gpu-id", 0, "--shard-lines", 3)
    two = run_embed(source, tmp_path / "two.hdf5", "-w", tiny_weights, "--gpu-id", "0,1", "--shard-lines", 3)
    assert one.returncode == 0 and two.returncode == 0, one.stdout + two.stdout
    assert_same_file(tmp_path / "one.hdf5", tmp_path / "two.hdf5")


def test_a_pipeline_or_weights(tmp_path, pipeline, tiny_weights):
    from spacy_elmo.corpus.embedding import EmbedSettings, embed_corpus

    (tmp_path / "input.txt").write_text("one line\n", encoding="utf-8")
    for settings, problem in (
        (EmbedSettings(), "not neither"),
        (EmbedSettings(str(pipeline), weights=str(tiny_weights)), "not both"),
        (EmbedSettings(str(tiny_weights)), "is a biLM directory, not a spaCy pipeline: pass it as --weights"),
        (EmbedSettings(str(pipeline), lang="de"), "lang \\('de'\\) goes with --weights"),
    ):
        with pytest.raises(ValueError, match=problem):
            embed_corpus(tmp_path / "input.txt", tmp_path / "out.hdf5", settings, progress=False)


def test_embed_writes_every_layer_whatever_the_store(tmp_path, tiny_weights):
    from spacy_elmo.corpus.embedding import EmbedSettings, _load

    make_nlp(tiny_weights, store="mix", store_dtype="float16").to_disk(tmp_path / "mixed")
    doc = _load(EmbedSettings(str(tmp_path / "mixed")))("A line to embed.")
    assert doc._.elmo_data.dtype == np.float32
    np.testing.assert_array_equal(doc._.elmo_data, make_nlp(tiny_weights)("A line to embed.")._.elmo_data)


def read_all(path):
    with h5py.File(path, "r") as handle:
        return {name: handle[name][()] for name in handle}


def assert_same_file(a, b):
    left, right = read_all(a), read_all(b)
    assert left.keys() == right.keys()
    for name in left:
        np.testing.assert_array_equal(left[name], right[name])


CORPUS = [f"Line {i} of the corpus , with {'many ' * (i % 7)}words ." for i in range(23)] + [
    "",
    "Line 3 of the corpus , with words .",
]


@pytest.mark.slow
def test_two_processes_in_shards_equal_one_process(tmp_path, pipeline):
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n")
    single = run_embed(tmp_path / "corpus.txt", tmp_path / "single.hdf5", "-p", pipeline)
    sharded = run_embed(
        tmp_path / "corpus.txt", tmp_path / "sharded.hdf5", "-p", pipeline, "--processes", 2, "--shard-lines", 4
    )
    assert single.returncode == 0 and sharded.returncode == 0, sharded.stdout
    assert_same_file(tmp_path / "single.hdf5", tmp_path / "sharded.hdf5")
    assert len(read_all(tmp_path / "sharded.hdf5")) == len(CORPUS) + 1
    assert not (tmp_path / "sharded.hdf5.shards").exists()


def test_a_killed_run_resumes_without_recomputing_finished_shards(tmp_path, pipeline, monkeypatch):
    from spacy_elmo.corpus import embedding
    from spacy_elmo.corpus.embedding import EmbedSettings, embed_corpus

    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n")
    settings = EmbedSettings(str(pipeline), shard_lines=5)
    embed_corpus(tmp_path / "corpus.txt", tmp_path / "reference.hdf5", settings, progress=False)
    computed = []
    real_write = embedding.write_embeddings

    def write_then_die(nlp, lines, path, first, *args):
        if len(computed) == 2:
            raise KeyboardInterrupt  # the kill, in the middle of the third shard
        computed.append(first)
        real_write(nlp, lines, path, first, *args)

    monkeypatch.setattr(embedding, "write_embeddings", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(tmp_path / "corpus.txt", tmp_path / "out.hdf5", settings, progress=False)
    shards = tmp_path / "out.hdf5.shards"
    assert sorted(p.name for p in shards.glob("shard-*")) == ["shard-00000.hdf5", "shard-00001.hdf5"]
    assert not (tmp_path / "out.hdf5").exists()
    computed.clear()
    monkeypatch.setattr(embedding, "write_embeddings", lambda *a: (computed.append(a[3]), real_write(*a))[1])
    embed_corpus(tmp_path / "corpus.txt", tmp_path / "out.hdf5", settings, progress=False)
    assert computed == [10, 15, 20]  # only the missing shards, by their first line
    assert_same_file(tmp_path / "reference.hdf5", tmp_path / "out.hdf5")


def test_shards_of_another_run_are_not_mixed_in(tmp_path, pipeline):
    from spacy_elmo.corpus.embedding import EmbedSettings, embed_corpus

    (tmp_path / "corpus.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "out.hdf5.shards").mkdir()
    (tmp_path / "out.hdf5.shards" / "manifest.json").write_text(json.dumps({"input": "other.txt", "lines": 99}))
    with pytest.raises(ValueError, match="holds the shards of another run .*remove the folder"):
        embed_corpus(tmp_path / "corpus.txt", tmp_path / "out.hdf5", EmbedSettings(str(pipeline)), progress=False)
    assert not (tmp_path / "out.hdf5").exists()
