"""Published models by name: download (from a server on 127.0.0.1), cache, resume, checks, convert."""

import hashlib
import io
import os
import socket
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from file_server import FileServer
from typer.testing import CliRunner

from spacy_elmo import embed_sentences, load_bilm, save_bilm
from spacy_elmo.cli.app import app
from spacy_elmo.hub.cache import download_model, resolve_weights
from spacy_elmo.hub.catalogue import BILM_TF, CATALOGUE, BiLMShape, PublishedModel
from spacy_elmo.hub.download import DownloadError, RemoteFile, cached_path, fetch
from spacy_elmo.weights.native import WeightsError

SENTENCES = [["The", "bank", "raised", "rates", "."], ["We", "sat", "by", "the", "river", "bank", "."]]


@pytest.fixture
def original_files(fixture_dir):
    return {
        "/elmo/options.json": (fixture_dir / "options.json").read_bytes(),
        "/elmo/weights.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
    }


@pytest.fixture
def server(original_files):
    with FileServer(original_files) as running:
        yield running


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(folder))
    return folder


def catalogue_entry(server, name="fixture-elmo", size=None, sha256=None, weights_path="/elmo/weights.hdf5", shape=None):
    return PublishedModel(
        name=name,
        language="en",
        format=BILM_TF,
        files=(
            RemoteFile(server.url("/elmo/options.json"), "options.json"),
            RemoteFile(server.url(weights_path), "weights.hdf5", size=size, sha256=sha256),
        ),
        trained_on="the AllenNLP test fixture",
        licence="Apache-2.0",
        citation="test",
        source="http://127.0.0.1/",
        shape=shape,
    )


@pytest.fixture
def registered(server, monkeypatch):
    """A catalogue entry served by the local server, known by name for the duration of a test."""

    def register(**kwargs):
        entry = catalogue_entry(server, **kwargs)
        monkeypatch.setitem(CATALOGUE, entry.name, entry)
        return entry

    return register


def assert_same_layers(a, b):
    for x, y in zip(embed_sentences(a, SENTENCES), embed_sentences(b, SENTENCES), strict=True):
        np.testing.assert_array_equal(x, y)


def test_download_converts_a_catalogue_model_with_its_provenance(
    server, cache, registered, tmp_path, fixture_bilm, original_files
):
    registered()
    out = download_model("fixture-elmo", tmp_path / "bilm", progress=False)
    assert_same_layers(load_bilm(out), fixture_bilm)
    import json

    source = json.loads((out / "source.json").read_text())
    expected = hashlib.sha256(original_files["/elmo/weights.hdf5"]).hexdigest()
    assert source["files"][1]["sha256"] == expected and source["licence"] == "Apache-2.0"


def test_second_call_and_the_component_are_served_from_cache(server, cache, registered, tmp_path, fixture_bilm):
    import spacy

    registered()
    download_model("fixture-elmo", tmp_path / "first", progress=False)
    served = len(server.requests)
    assert served == 2
    download_model("fixture-elmo", tmp_path / "second", progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "fixture-elmo"})
    nlp.initialize()
    doc = nlp("The bank raised rates .")
    assert len(server.requests) == served  # no request at all
    np.testing.assert_array_equal(doc._.elmo_data, embed_sentences(fixture_bilm, [SENTENCES[0]])[0])


def test_interrupted_download_resumes_from_where_it_stopped(server, cache, original_files):
    body = original_files["/elmo/weights.hdf5"]
    server.cut_after["/elmo/weights.hdf5"] = 300_000
    remote = RemoteFile(server.url("/elmo/weights.hdf5"), "weights.hdf5", size=len(body))
    with pytest.raises(DownloadError, match="interrupted after .* bytes.*again to resume"):
        fetch(remote, progress=False)
    part = cached_path(remote).with_name("weights.hdf5.part")
    kept = part.stat().st_size
    assert 0 < kept <= 300_000 and part.read_bytes() == body[:kept]
    path = fetch(remote, progress=False)
    assert server.requests[-1] == ("/elmo/weights.hdf5", f"bytes={kept}-")
    assert path.read_bytes() == body and not part.exists()


def test_truncated_file_is_refused_and_nothing_is_kept(server, cache, registered, tmp_path, original_files):
    body = original_files["/elmo/weights.hdf5"]
    server.files["/elmo/short.hdf5"] = body[: len(body) // 2]
    registered(name="short", size=len(body), weights_path="/elmo/short.hdf5")
    with pytest.raises(
        DownloadError, match=rf"weights\.hdf5 from .*short\.hdf5 is {len(body) // 2:,} bytes, expected {len(body):,}"
    ):
        download_model("short", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    assert not list((cache / "downloads").rglob("weights.hdf5*"))
    assert not (cache / "models" / "short").exists()


def test_wrong_checksum_is_refused_and_nothing_is_kept(server, cache, registered, tmp_path):
    registered(name="bad-sum", sha256="0" * 64)
    with pytest.raises(DownloadError, match="weights.hdf5 from .* has sha256 [0-9a-f]{64}, expected 0{64}"):
        download_model("bad-sum", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    assert not list((cache / "downloads").rglob("weights.hdf5*"))


def test_a_pinned_file_that_changed_names_both_values_their_source_and_the_way_on(server, cache, tmp_path):
    from dataclasses import replace

    body_sha = hashlib.sha256(server.files["/elmo/weights.hdf5"]).hexdigest()
    pinned = RemoteFile(server.url("/elmo/weights.hdf5"), "weights.hdf5", sha256="ab" * 32, pinned_by="a test's pin")
    with pytest.raises(DownloadError) as error:
        fetch(pinned, progress=False)
    message = str(error.value)
    assert f"has sha256 {body_sha}, expected {'ab' * 32} (pinned by a test's pin)" in message
    assert "If the publisher changed the file on purpose" in message and "--weights " + pinned.url in message
    assert not cached_path(pinned).exists()
    sized = replace(pinned, size=7, sha256=body_sha)
    with pytest.raises(DownloadError, match=r"expected 7 \(pinned by a test's pin\).*changed the file on purpose"):
        fetch(sized, progress=False)


def test_right_checksum_is_accepted(server, cache, registered, tmp_path, original_files):
    body = original_files["/elmo/weights.hdf5"]
    registered(name="good-sum", size=len(body), sha256=hashlib.sha256(body).hexdigest())
    assert (download_model("good-sum", tmp_path / "out", progress=False) / "model.safetensors").is_file()


def test_missing_file_reports_the_http_status(server, cache):
    with pytest.raises(DownloadError, match=r"/elmo/nowhere\.hdf5 answered HTTP 404"):
        fetch(RemoteFile(server.url("/elmo/nowhere.hdf5"), "weights.hdf5"), progress=False)


def test_no_network_says_which_url_and_where_to_place_the_file(cache):
    with socket.socket() as probe:  # a port on which nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = RemoteFile(f"http://127.0.0.1:{port}/elmo/weights.hdf5", "weights.hdf5")
    with pytest.raises(DownloadError) as failure:
        fetch(remote, progress=False)
    message = str(failure.value)
    assert f"Could not reach http://127.0.0.1:{port}/elmo/weights.hdf5" in message
    assert str(cached_path(remote)) in message and "file://" in message


def test_a_file_placed_by_hand_is_used_without_a_request(server, cache, original_files):
    remote = RemoteFile(server.url("/elmo/weights.hdf5"), "weights.hdf5")
    placed = cached_path(remote)
    placed.parent.mkdir(parents=True)
    placed.write_bytes(original_files["/elmo/weights.hdf5"])
    assert fetch(remote, progress=False) == placed and server.requests == []


def test_cli_download_with_file_urls_for_a_model_not_in_the_catalogue(cache, fixture_dir, fixture_bilm, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "download",
            "my-model",
            str(tmp_path / "bilm"),
            "--options",
            (fixture_dir / "options.json").as_uri(),
            "--weights",
            (fixture_dir / "lm_weights.hdf5").as_uri(),
        ],
    )
    assert result.exit_code == 0, result.output
    assert_same_layers(load_bilm(tmp_path / "bilm"), fixture_bilm)


def test_cli_download_of_an_unknown_name_suggests_close_ones(cache, tmp_path):
    result = CliRunner().invoke(app, ["download", "orignal", str(tmp_path / "bilm")])
    assert result.exit_code == 1 and "Did you mean original" in result.output
    assert not (tmp_path / "bilm").exists()


def test_a_url_of_a_zipped_native_model_resolves_through_the_cache(cache, tiny_weights, tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for item in tiny_weights.iterdir():
            archive.write(item, f"tiny/{item.name}")
    with FileServer({"/tiny.zip": buffer.getvalue()}) as server:
        folder = resolve_weights(server.url("/tiny.zip"), progress=False)
        assert resolve_weights(server.url("/tiny.zip"), progress=False) == folder
        assert len(server.requests) == 1
    assert_same_layers(load_bilm(folder), load_bilm(tiny_weights))


def test_an_existing_output_directory_is_not_overwritten(server, cache, registered, tmp_path):
    registered()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already exists"):
        download_model("fixture-elmo", tmp_path / "out", progress=False)
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_save_and_reload_of_a_converted_model_is_exact(server, cache, registered, tmp_path, fixture_bilm):
    registered()
    out = download_model("fixture-elmo", tmp_path / "bilm", progress=False)
    assert_same_layers(load_bilm(save_bilm(load_bilm(out), tmp_path / "again")), fixture_bilm)


def test_an_nlpl_style_zip_of_a_bilm_tf_model_converts(cache, fixture_dir, fixture_bilm):
    """NLPL's repository ships bilm-tf models as a zip of options.json + model.hdf5 (+ vocab)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(fixture_dir / "options.json", "options.json")
        archive.write(fixture_dir / "lm_weights.hdf5", "model.hdf5")
        archive.writestr("vocab.txt", "the\nbank\n")
    with FileServer({"/repository/20/999.zip": buffer.getvalue()}) as server:
        folder = resolve_weights(server.url("/repository/20/999.zip"), progress=False)
    assert_same_layers(load_bilm(folder), fixture_bilm)


def test_an_archive_with_token_embeddings_beside_the_weights_converts_the_weights(cache, fixture_dir, fixture_bilm):
    """AllenNLP's folders hold elmo_token_embeddings.hdf5 beside the weights (it sorts first)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in ("options.json", "lm_weights.hdf5", "elmo_token_embeddings.hdf5"):
            archive.write(fixture_dir / name, f"elmo/{name}")
    with FileServer({"/elmo.zip": buffer.getvalue()}) as server:
        folder = resolve_weights(server.url("/elmo.zip"), progress=False)
    assert_same_layers(load_bilm(folder), fixture_bilm)


def test_the_component_names_an_unknown_model_clearly(cache):
    import spacy

    from spacy_elmo.hub.catalogue import UnknownModelError

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "orignal"})
    with pytest.raises(UnknownModelError, match="No published model named 'orignal'. Did you mean original"):
        nlp.initialize()


def test_offline_one_error_lists_every_file_and_placing_them_is_enough(cache, tmp_path, fixture_bilm, original_files):
    """No network: one error names every file of the model with the path it is read from; with the
    files placed there, the same call converts the model without a request."""
    with socket.socket() as probe:  # a port on which nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    offline = SimpleNamespace(url=lambda path: f"http://127.0.0.1:{port}{path}")  # the entry's URLs, unreachable
    weights = original_files["/elmo/weights.hdf5"]
    entry = catalogue_entry(offline, name="offline-elmo", size=len(weights), sha256=hashlib.sha256(weights).hexdigest())
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(CATALOGUE, entry.name, entry)
        with pytest.raises(DownloadError) as failure:
            download_model("offline-elmo", tmp_path / "bilm", progress=False)
        message = str(failure.value)
        assert message.startswith("Could not reach 2 file(s) of the model")
        for remote in entry.files:
            assert f"{remote.url}\n    -> {cached_path(remote)}" in message
        assert (
            f"(sha256 {entry.files[1].sha256}, {len(weights):,} bytes)" in message and "--options file:///" in message
        )
        for remote, path in zip(entry.files, ("/elmo/options.json", "/elmo/weights.hdf5"), strict=True):
            cached_path(remote).parent.mkdir(parents=True, exist_ok=True)
            cached_path(remote).write_bytes(original_files[path])
        assert_same_layers(load_bilm(download_model("offline-elmo", tmp_path / "bilm", progress=False)), fixture_bilm)


def test_an_unreachable_archive_url_hints_at_a_file_url(cache):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DownloadError, match=r'weights = "file:///path/to/model\.zip"') as failure:
        resolve_weights(f"http://127.0.0.1:{port}/models/model.zip", progress=False)
    assert "--options" not in str(failure.value)


def test_an_original_release_folder_as_weights_is_converted_once(cache, tmp_path, fixture_dir, fixture_bilm):
    import shutil

    import spacy

    release = tmp_path / "release"
    release.mkdir()
    shutil.copy(fixture_dir / "options.json", release)
    shutil.copy(fixture_dir / "lm_weights.hdf5", release / "elmo_weights.hdf5")
    converted = resolve_weights(str(release), progress=False)
    assert converted.parent == cache / "models" and converted.name.startswith("local-release-")
    assert_same_layers(load_bilm(converted), fixture_bilm)
    written = (converted / "model.safetensors").stat().st_mtime_ns
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(release)})
    nlp.initialize()  # the folder as the component's weights: the converted copy, not converted again
    assert (converted / "model.safetensors").stat().st_mtime_ns == written
    os.utime(release / "elmo_weights.hdf5", ns=(written, written + 1))  # the weights written anew
    again = resolve_weights(str(release), progress=False)
    assert again != converted and (again / "model.safetensors").is_file()
    assert not converted.exists(), "the conversion of the files before is removed"
    assert sorted(path.name for path in (cache / "models").iterdir()) == [again.name]
    (release / "more_weights.hdf5").write_bytes(b"")
    with pytest.raises(WeightsError, match=r"several \.hdf5 files .* python -m spacy_elmo convert"):
        resolve_weights(str(release), progress=False)


def test_the_catalogue_reads_each_allennlp_models_shape_from_its_published_name():
    assert CATALOGUE["original"].shape == BiLMShape(layers=2, cells=4096, projection=512, filters=2048, highways=2)
    assert CATALOGUE["small"].shape == BiLMShape(layers=2, cells=1024, projection=128, filters=2048, highways=1)
    assert CATALOGUE["pt"].shape is None, "a name that states no shape pins none"


def test_an_options_json_of_another_shape_is_refused_and_not_kept(
    server, cache, registered, tmp_path, original_files, fixture_bilm
):
    """An unpinned options.json is held to the shape the model's published name states: one of
    another shape (here placed by hand) is refused with both shapes and removed with its record;
    the next call downloads the model's own and converts."""
    import json

    entry = registered(shape=BiLMShape(layers=2, cells=64, projection=16, filters=124, highways=2))
    placed = cached_path(entry.files[0])
    placed.parent.mkdir(parents=True, exist_ok=True)
    placed.write_text("{not json", encoding="utf-8")
    with pytest.raises(DownloadError, match="is not a bilm-tf options.json"):
        download_model("fixture-elmo", tmp_path / "bilm", progress=False)
    wrong = json.loads(original_files["/elmo/options.json"])
    wrong["lstm"]["dim"] = 4096
    placed.write_text(json.dumps(wrong), encoding="utf-8")
    with pytest.raises(DownloadError) as failure:
        download_model("fixture-elmo", tmp_path / "bilm", progress=False)
    message = " ".join(str(failure.value).split())
    assert "describes 2 x 4096 cells projected to 16" in message and "'fixture-elmo' is 2 x 64 cells" in message
    assert not placed.exists() and not placed.with_name(placed.name + ".json").exists()
    assert not (tmp_path / "bilm").exists()
    assert not any(path.endswith(".hdf5") for path, _ in server.requests), "refused before the weights download"
    assert not cached_path(entry.files[1]).exists()
    assert_same_layers(load_bilm(download_model("fixture-elmo", tmp_path / "bilm", progress=False)), fixture_bilm)
