"""The downstream data as project assets: project.yml's assets and the downstream-assets command
give every file the downstream workflow reads, their checksums match ../shared/data, and a
download from a server on 127.0.0.1 (serving the files in their public form) rebuilds
../shared/data's files byte for byte."""

import hashlib
import io
import re
import shutil
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import pytest
import srsly
from conftest import SHARED
from file_server import FileServer
from weasel.util import load_project_config

from spacy_elmo.training.downstream.assets import (
    MEASURED_WIC_MD5,
    WIC_FILES,
    check_layout,
    main,
    unlike_measured,
    unpack_wic,
    workflow_files,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED / "data"
DOWNSTREAM = PurePosixPath("assets/downstream")
WIC_ZIP = "assets/WiC_dataset.zip"


def downstream_assets(config):
    return [asset for asset in config["assets"] if asset["dest"] == WIC_ZIP or _in_downstream(asset["dest"])]


def _in_downstream(dest: str) -> bool:
    return DOWNSTREAM in PurePosixPath(dest).parents


def command(config, name):
    return next(c for c in config["commands"] if c["name"] == name)


def shared_copy(data: Path, dest: str) -> Path:
    """The file of ../shared/data that an asset's ``dest`` under assets/downstream stands for."""
    return data / PurePosixPath(dest).relative_to(DOWNSTREAM)


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def require_data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is missing: the test compares with ../shared/data (or $SPACY_ELMO_SHARED/data)")
    return DATA


def test_assets_and_unpack_give_every_file_the_downstream_workflow_reads():
    config = load_project_config(ROOT)
    produced = [asset["dest"] for asset in downstream_assets(config)] + command(config, "downstream-assets")["outputs"]
    layout = {str(PurePosixPath(dest).relative_to(DOWNSTREAM)) for dest in produced if _in_downstream(dest)}
    missing = [name for name in workflow_files() if name not in layout]
    assert not missing, f"no asset or downstream-assets output gives {missing}"
    assert command(config, "downstream-assets")["deps"] == [WIC_ZIP]
    assert all(asset.get("extra") for asset in downstream_assets(config)), "only `--extra` fetches them"


def test_checksums_match_the_shared_data():
    data = require_data()
    config = load_project_config(ROOT)
    assets = [a for a in downstream_assets(config) if a.get("checksum") and _in_downstream(a["dest"])]
    assert assets, "no downstream asset has a checksum to check"
    shared = {asset["dest"]: md5(shared_copy(data, asset["dest"])) for asset in assets}
    assert shared == {asset["dest"]: asset["checksum"] for asset in assets}


def test_the_measured_wic_checksums_are_the_shared_files():
    data = require_data()
    assert MEASURED_WIC_MD5 == {name: md5(data / "wic" / name) for name in WIC_FILES}


def release_member(name: str) -> str:
    """Where the WiC release's zip holds a file: SPLIT/SPLIT.data.txt, SPLIT/SPLIT.gold.txt."""
    return f"{name.split('.')[0]}/{name}"


def wic_release_zip(data: Path) -> bytes:
    """A zip in the WiC release's layout, built from the shared files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in WIC_FILES:
            archive.write(data / "wic" / name, release_member(name))
    return buffer.getvalue()


def public_files(assets, data: Path) -> dict:
    """URL path -> the bytes the public URL serves, taken from ../shared/data."""
    files = {}
    for asset in assets:
        served = wic_release_zip(data) if asset["dest"] == WIC_ZIP else shared_copy(data, asset["dest"]).read_bytes()
        files[server_path(asset["url"])] = served
    return files


def server_path(url: str) -> str:
    parsed = urlparse(url)
    return f"/{parsed.netloc}{parsed.path}"


def project_served_by(server: FileServer, tmp_path: Path) -> Path:
    """A copy of the project whose downstream assets point at ``server`` (the others dropped)."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "training", project / "training", ignore=shutil.ignore_patterns("__pycache__"))
    config = srsly.read_yaml(ROOT / "project.yml")
    config["assets"] = downstream_assets(config)
    for asset in config["assets"]:
        asset["url"] = server.url(server_path(asset["url"]))
    srsly.write_yaml(project / "project.yml", config)
    return project


@pytest.mark.slow
def test_assets_from_their_urls_rebuild_the_shared_data(tmp_path, monkeypatch, capfd, forked_steps):
    """`spacy project assets --extra` then `spacy project run downstream-assets`, through the
    functions those commands call (the step's own script still runs as its process: ``forked_steps``)."""
    from weasel.cli.assets import project_assets
    from weasel.cli.run import project_run

    data = require_data()
    assets = downstream_assets(load_project_config(ROOT))
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    with FileServer(public_files(assets, data)) as server:
        project = project_served_by(server, tmp_path)
        project_assets(project, extra=True)
        fetched = capfd.readouterr().out
        project_run(project, "downstream-assets", parent_command="python -m spacy")
        unpacked = capfd.readouterr().out
    assert "Checksum doesn't match" not in fetched and "Downloaded asset" in fetched, fetched[-3000:]
    assert sorted(path for path, _ in server.requests) == sorted(server.files), "each asset fetched once"
    folder = project / DOWNSTREAM
    different = [name for name in workflow_files() if (folder / name).read_bytes() != (data / name).read_bytes()]
    assert not different
    assert all((folder / "wic" / name).read_bytes() == (data / "wic" / name).read_bytes() for name in WIC_FILES)
    assert "Running command: " in unpacked and "differ from the copies" not in unpacked, unpacked[-3000:]


def test_unpack_finds_the_wic_files_under_a_top_folder(tmp_path):
    archive = tmp_path / "wic.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for name in WIC_FILES:
            zipped.writestr(f"WiC_dataset/{release_member(name)}", f"{name}\n")
    written = unpack_wic(archive, tmp_path / "wic")
    assert [path.name for path in written] == list(WIC_FILES)
    assert all(path.read_text() == f"{path.name}\n" for path in written)
    assert unlike_measured(written) == list(WIC_FILES), "other content: every file is named as unlike the measured"


def test_a_zip_without_test_gold_is_named_with_the_fix(tmp_path):
    archive = tmp_path / "wic.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for name in WIC_FILES[:-1]:
            zipped.writestr(release_member(name), "x\n")
    with pytest.raises(SystemExit, match=r"has no test\.gold\.txt.*spacy project assets --extra"):
        main(archive, tmp_path / "downstream")
    assert not (tmp_path / "downstream" / "wic").exists(), "nothing is written from an incomplete zip"


def test_a_folder_missing_a_file_is_named_with_the_fix(tmp_path):
    for name in workflow_files()[1:]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    with pytest.raises(ValueError, match=rf"lacks 1 file.*{re.escape(workflow_files()[0])}.*assets --extra"):
        check_layout(tmp_path)
