"""The downstream data from its public sources, for a machine without ``../shared/data``.

``spacy project assets --extra`` downloads project.yml's assets: UD English-EWT r2.15, WNUT-17 and
the word-similarity sets straight into ``assets/downstream/`` (the layout the downstream commands
read, see ``workflow_files``), and the WiC release as ``assets/WiC_dataset.zip``. This module (the
``downstream-assets`` command) unpacks the zip into ``assets/downstream/wic/`` and checks that the
folder holds every file the workflow reads:

    python -m spacy_elmo.training.downstream.assets assets/WiC_dataset.zip assets/downstream
    spacy project run downstream . --vars.downstream_data assets/downstream

The files are written atomically, byte for byte as the zip holds them.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path, PurePosixPath
from typing import Dict, List

import typer

from spacy_elmo.files import atomic_write

from . import data, similarity, wic

# The WiC release's zip holds SPLIT/SPLIT.data.txt and SPLIT/SPLIT.gold.txt for each split.
WIC_SPLITS = ("train", "dev", "test")
WIC_FILES = tuple(f"{split}.{kind}.txt" for split in WIC_SPLITS for kind in ("data", "gold"))
# md5 of the WiC files RESULTS.md was measured on (../shared/data/wic): the zip itself has no
# checksum in project.yml, since only its unpacked files were at hand, so they are compared here.
MEASURED_WIC_MD5 = {
    "train.data.txt": "133aa798a2b8ec67718acf8ed2f188c2",
    "train.gold.txt": "c5815b27b0c7bcdc6dbca11e8ff7eee5",
    "dev.data.txt": "f1efdc11a4dca8078ae96a8723497eac",
    "dev.gold.txt": "f6b4e0bbaf15a2e1fd0355c6adcdbe8a",
    "test.data.txt": "f9fe779e5964d2c11e9fe91d467247f3",
    "test.gold.txt": "79977c3d544d54e425e1e1ac2599587a",
}
FETCH_HINT = "Fetch the downstream data with `spacy project assets --extra` (see project.yml's assets)."


class AssetError(ValueError):
    pass


def workflow_files() -> List[str]:
    """Every file the downstream commands read from their data folder by default, relative to it."""
    files = [pattern.format(split=split) for pattern in (data.UPOS_FILES, data.NER_FILES) for split in data.SPLITS]
    files += [pattern.format(split=split) for pattern in (wic.EXAMPLES, wic.GOLD) for split in wic.SPLITS]
    files += [item.partition("=")[2] for item in similarity.SETS]
    return files


def unpack_wic(archive_path: Path, output: Path) -> List[Path]:
    """Write the WiC zip's data and gold files of every split into ``output``, unchanged."""
    try:
        archive = zipfile.ZipFile(archive_path)
    except (FileNotFoundError, zipfile.BadZipFile) as err:
        raise AssetError(f"Cannot read the WiC zip {archive_path}: {err}. {FETCH_HINT}") from None
    with archive:
        members = _wic_members(archive, archive_path)
        return [_extract(archive, members[name], Path(output) / name) for name in WIC_FILES]


def _wic_members(archive: zipfile.ZipFile, archive_path: Path) -> Dict[str, str]:
    """File name -> its one member in the zip, found by name at any depth."""
    found: Dict[str, List[str]] = {}
    for member in archive.namelist():
        found.setdefault(PurePosixPath(member).name, []).append(member)
    missing = [name for name in WIC_FILES if name not in found]
    if missing:
        raise AssetError(
            f"{archive_path} has no {', '.join(missing)}: not the WiC release (it holds SPLIT/SPLIT.data.txt "
            f"and SPLIT/SPLIT.gold.txt for train, dev and test). {FETCH_HINT}"
        )
    repeated = {name: found[name] for name in WIC_FILES if len(found[name]) > 1}
    if repeated:
        raise AssetError(f"{archive_path} holds more than one of {repeated}; which to use is unclear.")
    return {name: found[name][0] for name in WIC_FILES}


def _extract(archive: zipfile.ZipFile, member: str, path: Path) -> Path:
    content = archive.read(member)
    return atomic_write(path, lambda temporary: temporary.write_bytes(content))


def unlike_measured(paths: List[Path]) -> List[str]:
    """The names of unpacked WiC files whose md5 differs from the measured copies'."""
    return [path.name for path in paths if hashlib.md5(path.read_bytes()).hexdigest() != MEASURED_WIC_MD5[path.name]]


def check_layout(folder: Path) -> None:
    """Raise, naming them, if files the downstream workflow reads are missing from ``folder``."""
    missing = [name for name in workflow_files() if not (Path(folder) / name).is_file()]
    if missing:
        raise AssetError(
            f"{folder} lacks {len(missing)} file(s) the downstream workflow reads: {', '.join(missing)}. {FETCH_HINT}"
        )


def main(
    wic_zip: Path = typer.Argument(..., help="The WiC release zip (project.yml asset assets/WiC_dataset.zip)."),
    output: Path = typer.Argument(..., help="The downstream data folder the other assets went into."),
) -> None:
    """Unpack the WiC zip into OUTPUT/wic and check OUTPUT holds every file the downstream workflow reads."""
    try:
        written = unpack_wic(wic_zip, output / "wic")
        check_layout(output)
    except AssetError as err:
        raise SystemExit(str(err)) from None
    typer.echo(f"Unpacked {len(written)} WiC files into {output / 'wic'}")
    different = unlike_measured(written)
    if different:
        typer.echo(
            f"Warning: {', '.join(different)} differ from the copies RESULTS.md was measured on (md5): the workflow "
            "runs on them, but its WiC figures are not comparable with RESULTS.md's."
        )
    typer.echo(f"{output} holds all {len(workflow_files())} files: --vars.downstream_data {output}")


if __name__ == "__main__":
    typer.run(main)
