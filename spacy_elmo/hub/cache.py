"""Names and URLs -> converted native biLM directories in the cache, fetched and converted once.

    resolve_weights("original")          # catalogue name -> CACHE/models/original/
    resolve_weights("https://.../m.zip") # an archive of a native, bilm-tf or ELMoForManyLangs model
    resolve_weights("path/to/bilm")      # a local native directory, as is
    resolve_weights("path/to/release")   # an original options.json + .hdf5 folder, converted once
    download_model("efml-de", "bilm-de/")

The downloads stay in ``CACHE/downloads`` (see ``download``); the converted model goes to
``CACHE/models/<key>/`` through a temporary directory, so a failed conversion leaves nothing behind.
Each converted directory carries ``source.json``: where it came from, the files' sha256, the
licence and the citation.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Union

from ..extras import missing
from ..files import atomic_directory, atomic_write_json
from ..network.config import ConfigError
from ..weights.native import CONFIG_FILE, WEIGHTS_FILE, WeightsError, save_bilm
from ..weights.original import config_from_options, import_original
from .catalogue import BILM_TF, BiLMShape, PublishedModel, get_model
from .download import DownloadError, RemoteFile, cache_dir, fetch_all, forget, recorded_sha256

if TYPE_CHECKING:
    from ..network.bilm import BiLM

SOURCE_FILE = "source.json"
_URL_SCHEMES = ("http://", "https://", "file://")

PathLike = Union[str, Path]


def is_url(spec: str) -> bool:
    return str(spec).startswith(_URL_SCHEMES)


def resolve_weights(spec: PathLike, cache: Optional[Path] = None, progress: bool = True) -> Path:
    """A native biLM directory for ``spec``: an existing path, a catalogue name, or a URL."""
    text = str(spec)
    if is_url(text):
        return ensure_url(text, cache, progress)
    if Path(text).expanduser().exists():
        path = Path(text).expanduser()
        return ensure_original_folder(path, cache) if is_original_release(path) else path
    if "/" in text or "\\" in text:
        raise WeightsError(f"{text}: no such biLM directory (and not a catalogue name or a URL).")
    return ensure_model(get_model(text), cache, progress)


def ensure_model(model: PublishedModel, cache: Optional[Path] = None, progress: bool = True) -> Path:
    """The converted directory of a catalogue model, downloading and converting on first use."""
    target = _models_dir(cache) / model.name
    if _is_native(target):
        return target
    if model.format == BILM_TF:
        _h5py_before_download(f"'{model.name}'")
    # the options' shape is checked as they arrive, before hundreds of MB of weights are fetched
    shape_check = None if model.is_archive else (lambda remote, path: _check_shape(model, remote, path))
    paths = fetch_all(model.files, cache, progress, _local_copies_hint(model), shape_check)
    if not model.is_archive:
        return _convert_into(
            target, lambda: import_original(paths[0], paths[1]), model.files, paths, _provenance(model)
        )
    with _extracted(paths[0]) as folder:
        return _convert_into(target, lambda: convert_directory(folder), model.files, paths, _provenance(model))


def _check_shape(model: PublishedModel, remote: RemoteFile, options: Path) -> None:
    """Refuse an options.json (``remote``, fetched to ``options``; other files pass) that describes
    another shape than the model's published name states (``BiLMShape``); it is removed with its
    record, so that the next call downloads the model's own or takes a copy placed there anew."""
    if model.shape is None or remote is not model.files[0]:
        return
    try:
        described = BiLMShape.of(config_from_options(options))
    except ConfigError as err:
        problem = f"is not a bilm-tf options.json ({err})"
    else:
        if described == model.shape:
            return
        problem = f"describes {described}"
    forget(options)
    raise DownloadError(
        f"{options} {problem}, but '{model.name}' is {model.shape}, as its published name "
        f"{remote.url.rsplit('/', 1)[-1]} states. It was removed: place the model's own options.json there "
        f"({remote.url}), or run again to download it."
    )


_ARCHIVE_HINT = 'Or give a copy of the archive as the weights, by a file:// URL: weights = "file:///path/to/{name}".'


def _local_copies_hint(model: PublishedModel) -> str:
    """Where the files are already on this machine elsewhere: how to point at them."""
    if model.is_archive:
        name = model.files[0].filename
        return f'Or give a copy of the archive as weights: weights = "file:///path/to/{name}" (a file:// URL).'
    return (
        f"Or point at copies elsewhere: python -m spacy_elmo download {model.name} OUT "
        "--options file:///path/options.json --weights file:///path/weights.hdf5"
    )


def is_original_release(folder: Path) -> bool:
    """A folder of an original (bilm-tf) release: options.json and a .hdf5 file, no native biLM."""
    return (
        folder.is_dir()
        and (folder / "options.json").is_file()
        and any(folder.glob("*.hdf5"))
        and not _is_native(folder)
    )


def ensure_original_folder(folder: Path, cache: Optional[Path] = None) -> Path:
    """An original release's folder converted once into the cache (``CACHE/models/local-...``),
    again only where its files change; a new conversion replaces the folder's earlier ones."""
    options, weights = folder / "options.json", _weights_file(folder)
    stamp = " ".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (options, weights))
    prefix = f"local-{_slug(folder.resolve().name)}-"
    target = _models_dir(cache) / f"{prefix}{_url_key(stamp)}"
    if _is_native(target):
        return target
    files = [{"file": str(p.resolve()), "bytes": p.stat().st_size} for p in (options, weights)]
    name = str(folder.resolve())
    _save_converted(target, import_original(options, weights), {"name": name, "files": files})
    _remove_earlier_conversions(target, prefix, name)
    return target


def _remove_earlier_conversions(target: Path, prefix: str, name: str) -> None:
    """Conversions beside ``target`` of the same folder (``name``) from files since changed: each a
    copy of the weights (374 MB for the original model) nothing would read again. Each is renamed
    away before it is deleted, so that no reader finds half of one; a process that has one open
    keeps reading it (on Windows, where it cannot be deleted yet, it stays)."""
    for earlier in target.parent.glob(f"{prefix}*"):
        if earlier == target or not earlier.is_dir() or recorded_source(earlier).get("name") != name:
            continue
        doomed = earlier.with_name(f".removing-{earlier.name}")
        try:
            earlier.rename(doomed)
        except OSError:
            continue
        shutil.rmtree(doomed, ignore_errors=True)


def _weights_file(folder: Path) -> Path:
    """The release's weights: its one .hdf5 file, else the one whose name says weights."""
    found = sorted(folder.glob("*.hdf5"))
    named = [path for path in found if "weights" in path.name]
    if len(found) == 1 or len(named) == 1:
        return found[0] if len(found) == 1 else named[0]
    raise WeightsError(
        f"{folder} holds options.json and several .hdf5 files ({', '.join(p.name for p in found)}), and none is "
        f"clearly the weights: convert it yourself, python -m spacy_elmo convert {folder / 'options.json'} "
        f"{folder}/WEIGHTS.hdf5 OUT, and give OUT as the weights."
    )


def ensure_original_files(
    options_url: str, weights_url: str, label: str, cache: Optional[Path] = None, progress: bool = True
) -> Path:
    """A bilm-tf model given by the URLs of its options.json and weights.hdf5."""
    remotes = (RemoteFile(options_url, "options.json"), RemoteFile(weights_url, "weights.hdf5"))
    target = _models_dir(cache) / f"{_slug(label)}-{_url_key(options_url + ' ' + weights_url)}"
    if _is_native(target):
        return target
    _h5py_before_download(f"'{label}'")
    paths = fetch_all(remotes, cache, progress)
    return _convert_into(target, lambda: import_original(paths[0], paths[1]), remotes, paths, {"name": label})


def _h5py_before_download(model: str) -> None:
    """An original release's weights are read with h5py (the h5 extra): where it is missing, say so
    before the download rather than after it."""
    problem = missing("h5", "h5py", f"Converting {model} (an original release, its weights in .hdf5)")
    if problem:
        raise WeightsError(problem)


def ensure_url(url: str, cache: Optional[Path] = None, progress: bool = True) -> Path:
    """An archive (.zip, .tar.gz, .tgz, .tar) holding a native, bilm-tf or ELMoForManyLangs model."""
    name = url.rstrip("/").rsplit("/", 1)[-1] or "model"
    target = _models_dir(cache) / f"url-{_url_key(url)}"
    if _is_native(target):
        return target
    remote = RemoteFile(url, name)
    (path,) = fetch_all([remote], cache, progress, _ARCHIVE_HINT.format(name=name))
    with _extracted(path) as folder:
        return _convert_into(target, lambda: convert_directory(folder), (remote,), [path], {"name": url})


def download_model(
    spec: str,
    output: PathLike,
    options: Optional[str] = None,
    weights: Optional[str] = None,
    cache: Optional[Path] = None,
    progress: bool = True,
    replace: bool = False,
) -> Path:
    """Fetch and convert ``spec`` (or the bilm-tf files at ``options``/``weights``) and write the
    native biLM to ``output`` atomically."""
    if (options is None) != (weights is None):
        raise ValueError("Give both --options and --weights (the URLs of options.json and the .hdf5 file), or neither.")
    if options is not None:
        assert weights is not None  # given together with options (checked above)
        source = ensure_original_files(options, weights, spec, cache, progress)
    else:
        source = resolve_weights(spec, cache, progress)
    with atomic_directory(output, replace=replace) as temporary:
        for item in source.iterdir():
            if item.is_file():
                shutil.copy2(item, temporary / item.name)
    return Path(output)


def convert_directory(folder: Path) -> BiLM:
    """A BiLM from a folder holding (somewhere inside) a native, bilm-tf or ELMoForManyLangs model."""
    from ..weights.native import load_bilm

    for config in sorted(folder.rglob(CONFIG_FILE)):
        if (config.parent / WEIGHTS_FILE).is_file():
            return load_bilm(config.parent)
    for encoder in sorted(folder.rglob("encoder.pkl")):
        from ..weights.elmo_for_many_langs import import_efml

        return import_efml(encoder.parent)
    for options in sorted(folder.rglob("options.json")):
        if any(options.parent.glob("*.hdf5")):
            return import_original(options, _weights_file(options.parent))
    raise WeightsError(
        f"Found no model in the archive: expected a native biLM ({CONFIG_FILE} + {WEIGHTS_FILE}), "
        "an original release (options.json + a .hdf5 file) or an ELMoForManyLangs model (encoder.pkl, "
        "token_embedder.pkl, char.dic, config.json)."
    )


def _convert_into(
    target: Path, build: Callable[[], BiLM], remotes: Sequence[RemoteFile], paths: Sequence[Path], provenance: Dict
) -> Path:
    bilm = build()
    files = [
        {"url": r.url, "file": r.filename, "sha256": recorded_sha256(p), "bytes": p.stat().st_size}
        for r, p in zip(remotes, paths, strict=True)
    ]
    return _save_converted(target, bilm, {**provenance, "files": files})


def _save_converted(target: Path, bilm: BiLM, source: Dict[str, Any]) -> Path:
    """``bilm`` as a native directory at ``target`` (atomically, replacing a stale one) with
    ``source`` as its ``source.json``."""
    with atomic_directory(target, replace=True) as temporary:
        save_bilm(bilm, temporary)
        atomic_write_json(temporary / SOURCE_FILE, source)
    return target


def recorded_source(directory: Path) -> Dict[str, Any]:
    """What ``source.json`` in a converted model's ``directory`` records (its catalogue entry's
    name, language, input, licence, files...); empty where there is none (a model of one's own)."""
    path = directory / SOURCE_FILE
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        raise WeightsError(f"{path} is not a readable JSON object; delete it or convert the model again.")
    return record


def recorded_input_attr(directory: Path) -> Optional[str]:
    """What the model in ``directory`` reads of a token ("LEMMA", ...) as its catalogue entry
    recorded it; None where nothing is recorded."""
    value = recorded_source(directory).get("input_attr")
    return value if isinstance(value, str) else None


def _provenance(model: PublishedModel) -> Dict:
    return {
        "name": model.name,
        "language": model.language,
        "format": model.format,
        "input_attr": model.input_attr,
        "spacy_language": model.spacy_language,
        "trained_on": model.trained_on,
        "licence": model.licence,
        "citation": model.citation,
        "source": model.source,
    }


class _extracted:
    """Context manager: an archive unpacked into a temporary folder, removed afterwards."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.folder: Optional[Path] = None

    def __enter__(self) -> Path:
        self.folder = Path(tempfile.mkdtemp(prefix=".extract-", dir=self.archive.parent))
        try:
            _unpack(self.archive, self.folder)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        return self.folder

    def __exit__(self, *exc_info: object) -> None:
        assert self.folder is not None  # set by __enter__, which ran for __exit__ to run
        shutil.rmtree(self.folder, ignore_errors=True)


def _unpack(archive: Path, folder: Path) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as handle:
            handle.extractall(folder)  # zipfile drops absolute paths and ".." itself
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as handle:
            _extract_tar_safely(handle, folder)
    else:
        raise DownloadError(f"{archive} is neither a zip nor a tar archive; cannot unpack it.")


def _extract_tar_safely(handle: tarfile.TarFile, folder: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        handle.extractall(folder, filter="data")
        return
    root = folder.resolve()
    for member in handle.getmembers():  # Pythons without extraction filters
        destination = (folder / member.name).resolve()
        outside = root not in destination.parents and destination != root
        if outside or not (member.isfile() or member.isdir()):
            raise DownloadError(
                f"Refusing to unpack {member.name!r}: it points outside the archive's folder or is a link."
            )
    handle.extractall(folder)


def _is_native(directory: Path) -> bool:
    return (directory / CONFIG_FILE).is_file() and (directory / WEIGHTS_FILE).is_file()


def _models_dir(cache: Optional[Path]) -> Path:
    return (cache or cache_dir()) / "models"


def _url_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label).strip("._") or "model"
