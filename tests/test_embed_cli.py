import json
import sys
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
import spacy
import torch
from conftest import make_nlp, run_cli
from spacy.tokens import Doc

from spacy_elmo.corpus.embedding import EmbedSettings, embed_corpus
from spacy_elmo.corpus.output_folder import EmbeddedCorpus

ROOT = Path(__file__).resolve().parents[1]
LINES = ["The first line .", "", "A second line, with more tokens in it.", "The first line ."]
CORPUS = [f"Line {i} of the corpus , with {'many ' * (i % 7)}words ." for i in range(23)] + [
    "",
    "Line 3 of the corpus , with words .",
]


@pytest.fixture(scope="module")
def pipeline(tiny_weights, tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline") / "elmo-pipeline"
    make_nlp(tiny_weights, sentencizer=False).to_disk(path)
    return path


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def in_process(corpus_file, pipeline, tmp_path_factory):
    """The corpus embedded here, in blocks of 4 lines: what every other way must equal."""
    output = tmp_path_factory.mktemp("in-process") / "vectors"
    embed_corpus(corpus_file, output, EmbedSettings(str(pipeline), block_lines=4), progress=False)
    return output


def run_embed(*args):
    return run_cli("embed", *args)


def datasets(folder):
    """Every dataset of every block file, by name, and the index."""
    found = {}
    for path in sorted((folder / "blocks").glob("block-*.hdf5")):
        with h5py.File(path, "r") as handle:
            found.update({f"{path.name}/{name}": handle[name][()] for name in handle})
    return found, json.loads((folder / "index.json").read_text())


def assert_same_output(a, b):
    (left, left_index), (right, right_index) = datasets(a), datasets(b)
    assert left.keys() == right.keys() and left_index == right_index
    for name in left:
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)


@pytest.mark.parametrize("layers", ["all", "top", "average"])
def test_embed_writes_one_dataset_per_line(tmp_path, pipeline, layers):
    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = run_embed(source, tmp_path / "out", "-p", pipeline, "--layers", layers, "--merge-hdf5", tmp_path / "m.h5")
    assert result.returncode == 0, result.stdout + result.crash
    assert "Wrote 4 lines in 1 block to" in result.stdout
    nlp = spacy.load(pipeline)
    with h5py.File(tmp_path / "m.h5", "r") as merged, EmbeddedCorpus(tmp_path / "out") as corpus:
        assert sorted(merged.keys(), key=lambda k: (len(k), k)) == ["0", "1", "2", "3", "sentence_to_index"]
        index = json.loads(merged["sentence_to_index"][()])
        assert index == {"The first line .": "3", "": "1", "A second line, with more tokens in it.": "2"}
        for i, line in enumerate(LINES):
            data = nlp(line)._.elmo_data
            expected = {"all": data, "top": data[-1], "average": data.mean(axis=0)}[layers]
            np.testing.assert_allclose(merged[str(i)][...], expected, rtol=0, atol=1e-7)
            np.testing.assert_array_equal(corpus[i], merged[str(i)][...])
    assert not list(tmp_path.glob(".m.h5.*")) and not list((tmp_path / "out" / "blocks").glob(".*"))


def test_the_index_finds_every_line_in_its_block(in_process):
    with EmbeddedCorpus(in_process) as corpus:
        assert len(corpus) == len(CORPUS)
        assert corpus.location(9) == {"file": "blocks/block-00002.hdf5", "row": 1, "dataset": "9"}
        assert corpus[len(CORPUS) - 2].shape[1] == 0, "an empty line has no tokens"
        with pytest.raises(IndexError, match="line 25 is out of range: the corpus has 25 lines"):
            corpus[25]
    index = json.loads((in_process / "index.json").read_text())
    assert [b["first_line"] for b in index["blocks"]] == [0, 4, 8, 12, 16, 20, 24]
    assert sum(b["tokens"] for b in index["blocks"]) == sum(len(line.split()) for line in CORPUS)


def test_embed_pretokenized_lines(tmp_path, pipeline):
    source = tmp_path / "input.txt"
    source.write_text("don't split me\n", encoding="utf-8")
    assert run_embed(source, tmp_path / "out", "-p", pipeline, "--tokenized").returncode == 0
    nlp = spacy.load(pipeline)
    with EmbeddedCorpus(tmp_path / "out") as corpus:
        assert corpus[0].shape == (3, 3, 32)
        np.testing.assert_array_equal(corpus[0], nlp(Doc(nlp.vocab, words=["don't", "split", "me"]))._.elmo_data)


# 5,000 tokens: 20 windows of the longest sentence the component reads whole (256), over two calls of its
# token budget (4,096); 100,000 (28 s on an AMD EPYC Zen 3) run in `nox -s matrix`
@pytest.mark.parametrize("length", [5_000, pytest.param(100_000, marks=pytest.mark.matrix)])
def test_empty_lines_and_a_line_of_many_tokens(tmp_path, pipeline, length):
    words = [f"w{i % 97}" for i in range(length)]
    source = tmp_path / "input.txt"
    source.write_text("\n".join(["", " ".join(words), ""]) + "\n", encoding="utf-8")
    embed_corpus(source, tmp_path / "out", EmbedSettings(str(pipeline), tokenized=True), progress=False)
    nlp = spacy.load(pipeline)
    with EmbeddedCorpus(tmp_path / "out") as corpus:
        assert len(corpus) == 3 and corpus[0].shape == corpus[2].shape == (3, 0, 32)
        np.testing.assert_array_equal(corpus[1], nlp(Doc(nlp.vocab, words=words))._.elmo_data)


def test_a_folder_and_parquet_give_the_lines_of_the_text_file(tmp_path, pipeline, corpus_file, in_process):
    pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow (the ray extra brings it)")
    import pyarrow.parquet as pq

    settings = EmbedSettings(str(pipeline), block_lines=4)
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("\n".join(CORPUS[:8]) + "\n", encoding="utf-8")  # 2 whole blocks
    (folder / "b.txt").write_bytes(("\r\n".join(CORPUS[8:])).encode())  # Windows ends, none at the end
    embed_corpus(folder, tmp_path / "from-folder", settings, progress=False)
    assert_same_output(in_process, tmp_path / "from-folder")
    (tmp_path / "parquet").mkdir()
    table = pa.table({"id": list(range(len(CORPUS))), "body": CORPUS})
    pq.write_table(table, tmp_path / "parquet" / "part-0.parquet", row_group_size=3)  # groups across blocks
    embed_corpus(tmp_path / "parquet", tmp_path / "from-parquet", replace(settings, text_column="body"), progress=False)
    assert_same_output(in_process, tmp_path / "from-parquet")
    with pytest.raises(
        ValueError, match=r"has no column 'text' \(it has \['id', 'body'\]\); name it with --text-column"
    ):
        embed_corpus(tmp_path / "parquet", tmp_path / "wrong-column", settings, progress=False)


def test_embed_reports_problems(tmp_path, pipeline):
    missing = run_embed(tmp_path / "nothing.txt", tmp_path / "out", "-p", pipeline)
    assert missing.returncode == 1 and "nothing.txt: file not found" in missing.stdout
    (tmp_path / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    bad = run_embed(tmp_path / "latin1.txt", tmp_path / "out", "-p", pipeline)
    assert bad.returncode == 1 and "latin1.txt is not valid UTF-8 (line 2, byte 3)" in bad.stdout
    spacy.blank("en").to_disk(tmp_path / "blank")
    (tmp_path / "ok.txt").write_text("fine\n")
    no_elmo = run_embed(tmp_path / "ok.txt", tmp_path / "out", "-p", tmp_path / "blank")
    assert no_elmo.returncode == 1 and "has no 'elmo' component" in no_elmo.stdout
    assert not (tmp_path / "out").exists(), "a run that wrote nothing leaves nothing behind"
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    taken = run_embed(tmp_path / "ok.txt", tmp_path / "taken", "-p", pipeline)
    assert taken.returncode == 1 and "is not an embedding run's folder" in taken.stdout
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_where_the_blocks_run_is_checked_before_any_work(tmp_path, pipeline):
    (tmp_path / "ok.txt").write_text("fine\n")
    for arguments, problem in (
        (["--workers", 2], "--workers 2 and --gpus-per-worker 0.0 run on Ray: add --ray"),
        (["--ray", "--gpu-id", 0], "--gpu-id 0 picks a GPU of this process; on Ray give --gpus-per-worker"),
        (["--ray", "--workers", 0], "--workers must be positive"),
    ):
        result = run_embed(tmp_path / "ok.txt", tmp_path / "out", "-p", pipeline, *arguments)
        assert result.returncode == 1 and problem in result.stdout, result.stdout
    assert not (tmp_path / "out").exists()


def test_ray_is_optional_and_says_how_to_get_it(tmp_path, pipeline, monkeypatch):
    (tmp_path / "ok.txt").write_text("fine\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import ray raises ImportError
    result = run_embed(tmp_path / "ok.txt", tmp_path / "out", "-p", pipeline, "--ray")
    said = result.stdout
    assert result.returncode == 1 and '"ray[data,serve]<3,>=2.60"' in said and 'pip install ".[ray]"' in said, said
    assert not result.crash, result.crash
    setup = (ROOT / "setup.py").read_text()
    core = setup[setup.index("install_requires") : setup.index("extras_require")]
    assert "ray" not in core, "the core install does not pull Ray"


def test_embed_from_bilm_weights_equals_the_assembled_pipeline(tmp_path, tiny_weights):
    from spacy_elmo.pipeline.assembly import assemble_pipeline

    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES + ["Two sentences here. And a second one."]) + "\n", encoding="utf-8")
    assemble_pipeline(tiny_weights).to_disk(tmp_path / "assembled")
    from_weights = run_embed(source, tmp_path / "weights", "--weights", tiny_weights)
    from_pipeline = run_embed(source, tmp_path / "pipeline", "-p", tmp_path / "assembled")
    assert from_weights.returncode == 0 and from_pipeline.returncode == 0, from_weights.stdout + from_pipeline.stdout
    assert_same_output(tmp_path / "weights", tmp_path / "pipeline")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error where there is no CUDA GPU")
def test_a_gpu_where_there_is_none_is_a_clear_error(tmp_path, tiny_weights):
    (tmp_path / "input.txt").write_text("one line\n", encoding="utf-8")
    result = run_embed(tmp_path / "input.txt", tmp_path / "out", "-w", tiny_weights, "--gpu-id", 0)
    assert result.returncode == 1, result.stdout
    assert "gpu_id 0: no such CUDA GPU" in result.stdout and "leave --gpu-id at -1" in result.stdout
    assert not result.crash and "Traceback" not in result.stdout
    assert not (tmp_path / "out").exists()


def test_a_pipeline_or_weights(tmp_path, pipeline, tiny_weights):
    (tmp_path / "input.txt").write_text("one line\n", encoding="utf-8")
    for settings, problem in (
        (EmbedSettings(), "not neither"),
        (EmbedSettings(str(pipeline), weights=str(tiny_weights)), "not both"),
        (EmbedSettings(str(tiny_weights)), "is a biLM directory, not a spaCy pipeline: pass it as --weights"),
        (EmbedSettings(str(pipeline), lang="de"), "lang \\('de'\\) goes with --weights"),
    ):
        with pytest.raises(ValueError, match=problem):
            embed_corpus(tmp_path / "input.txt", tmp_path / "out", settings, progress=False)


def test_embed_writes_every_layer_whatever_the_store(tmp_path, tiny_weights):
    from spacy_elmo.corpus.embedding import load_pipeline

    make_nlp(tiny_weights, store="mix", store_dtype="float16").to_disk(tmp_path / "mixed")
    doc = load_pipeline(EmbedSettings(str(tmp_path / "mixed")))("A line to embed.")
    assert doc._.elmo_data.dtype == np.float32
    np.testing.assert_array_equal(doc._.elmo_data, make_nlp(tiny_weights)("A line to embed.")._.elmo_data)


def test_a_killed_run_resumes_without_recomputing_finished_blocks(
    tmp_path, pipeline, corpus_file, in_process, monkeypatch
):
    from spacy_elmo.corpus import worker

    settings = EmbedSettings(str(pipeline), block_lines=4)
    real_write = worker.write_embeddings

    def write_then_die(nlp, lines, path, first, *args, **kwargs):
        if first == 8:
            raise KeyboardInterrupt  # the kill, in the middle of the third block
        return real_write(nlp, lines, path, first, *args, **kwargs)

    monkeypatch.setattr(worker, "write_embeddings", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(corpus_file, tmp_path / "out", settings, progress=False)
    blocks = sorted(p.name for p in (tmp_path / "out" / "blocks").iterdir())
    assert blocks == ["block-00000.hdf5", "block-00001.hdf5"], "finished blocks kept, no temporary left"
    assert not (tmp_path / "out" / "index.json").exists()
    with pytest.raises(ValueError, match="has no index.json: the run is unfinished"):
        EmbeddedCorpus(tmp_path / "out")
    monkeypatch.setattr(worker, "write_embeddings", real_write)
    report = embed_corpus(corpus_file, tmp_path / "out", settings, progress=False)
    assert [figures["block"] for figures in report.computed] == [2, 3, 4, 5, 6], "only the missing blocks"
    assert_same_output(in_process, tmp_path / "out")


def test_a_run_with_other_settings_is_refused(tmp_path, pipeline, corpus_file):
    embed_corpus(corpus_file, tmp_path / "out", EmbedSettings(str(pipeline), block_lines=4), progress=False)
    before = datasets(tmp_path / "out")[1]
    with pytest.raises(ValueError, match=r"holds the embeddings of another run \(different block_lines\)"):
        embed_corpus(corpus_file, tmp_path / "out", EmbedSettings(str(pipeline), block_lines=5), progress=False)
    (tmp_path / "changed.txt").write_text("\n".join(CORPUS[:-1]) + "\n")
    with pytest.raises(ValueError, match=r"different input, lines\)"):
        embed_corpus(tmp_path / "changed.txt", tmp_path / "out", EmbedSettings(str(pipeline), block_lines=4))
    assert datasets(tmp_path / "out")[1] == before


def test_workers_get_absolute_paths(tmp_path, pipeline, tiny_weights, corpus_file, monkeypatch):
    """Ray actors do not run in the driver's working directory (on a cluster, not on its machine):
    blocks name their file absolutely, and a pipeline or weights given relatively reach them resolved."""
    from spacy_elmo.corpus.blocks import plan_blocks
    from spacy_elmo.corpus.embedding import for_workers

    for name, target in (("corpus.txt", corpus_file), ("pipeline", pipeline), ("weights", tiny_weights)):
        (tmp_path / name).symlink_to(target)
    monkeypatch.chdir(tmp_path)
    plan = plan_blocks(Path("corpus.txt"), 4)
    assert {block.path for block in plan.blocks} == {str(corpus_file.resolve())}
    assert plan.files[0]["path"] == "corpus.txt", "the manifest keeps the path as given"
    sent = for_workers(EmbedSettings("pipeline", block_lines=4))
    assert sent.pipeline == str(pipeline.resolve()) and sent.block_lines == 4 and sent.weights is None
    assert for_workers(EmbedSettings(weights="weights")).weights == str(tiny_weights.resolve())
    assert for_workers(EmbedSettings("en_core_web_sm")).pipeline == "en_core_web_sm", "a package name stays a name"


def test_stored_tokens_map_each_row_of_a_line_back_to_its_word(tmp_path, pipeline, in_process):
    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    settings = EmbedSettings(str(pipeline), block_lines=2, store_tokens=True)
    embed_corpus(source, tmp_path / "out", settings, progress=False, merge_into=tmp_path / "m.h5")
    nlp = spacy.load(pipeline)
    with EmbeddedCorpus(tmp_path / "out") as corpus, h5py.File(tmp_path / "m.h5", "r") as merged:
        for i, line in enumerate(LINES):
            words = [token.text for token in nlp.make_doc(line)]
            assert corpus.tokens(i) == words and corpus[i].shape[1] == len(words)
            assert [word.decode() for word in merged["tokens"][str(i)][...]] == words
    with EmbeddedCorpus(in_process) as without, pytest.raises(ValueError, match="embed with --store-tokens"):
        without.tokens(0)


def test_progress_moves_line_by_line_within_a_block(tmp_path, corpus_file, pipeline, monkeypatch):
    """One block of every line: the bar counts each line as it is written, not the block at its end;
    a run that finds every block there has nothing to count (its bar starts where it ended)."""
    import io

    from spacy_elmo.corpus import embedding

    counts = []

    def recording_bar(*args, **options):
        bar = real_bar(*args, **{**options, "disable": False, "file": io.StringIO()})
        update = bar.update
        bar.update = lambda n=1: (update(n), counts.append(bar.n))
        return bar

    real_bar = embedding.progress_bar
    monkeypatch.setattr(embedding, "progress_bar", recording_bar)
    settings = EmbedSettings(str(pipeline), block_lines=10_000)
    embed_corpus(corpus_file, tmp_path / "one-block", settings, progress=True)
    assert counts == list(range(1, len(CORPUS) + 1)), counts
    counts.clear()
    embed_corpus(corpus_file, tmp_path / "one-block", settings, progress=True)  # everything there: no work
    assert counts == [], counts
