"""Fetching files into a local cache: resumable, size- and checksum-checked, with a progress bar.

    path = fetch(RemoteFile(url, "weights.hdf5", sha256="..."))

The cache lives in ``$SPACY_ELMO_CACHE`` (default ``~/.cache/spacy-elmo``, or under
``$XDG_CACHE_HOME``). A file is downloaded to ``NAME.part``; an interrupted transfer leaves the
part behind and the next call asks the server for the rest (HTTP ``Range``). Only a complete file
whose size and checksum check out is renamed into place, next to a ``NAME.json`` record of its URL,
size and sha256, so a second call sends no request at all. A file that fails a check is deleted.

Why ``requests`` and not pooch: pooch restarts an interrupted download from byte zero (a 374 MB
weights file cut at 90% is fetched again whole) and has no ``file://`` downloader; both matter here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from ..files import atomic_write_json, cache_dir
from ..progress import progress_bar

if TYPE_CHECKING:
    import requests

CHUNK_BYTES = 1 << 20
NETWORK_CHUNK_BYTES = 1 << 16  # an interrupted read loses at most this much of what arrived
CONNECT_TIMEOUT_S = 15
READ_TIMEOUT_S = 60


class DownloadError(OSError):
    """A file that could not be fetched, or that failed its size or checksum check."""


class Unreachable(DownloadError):
    """A file whose server could not be reached (no network, a firewall): ``remote``, and
    ``target``, where a copy placed by hand is read from without a request."""

    def __init__(self, message: str, remote: "RemoteFile", target: Path) -> None:
        super().__init__(message)
        self.remote = remote
        self.target = target


@dataclass(frozen=True)
class RemoteFile:
    """A file to fetch: where from, the name to store it under, and what it must be (when known):
    ``size`` and ``sha256``, and ``pinned_by``, the source those values come from."""

    url: str
    filename: str
    size: Optional[int] = None
    sha256: Optional[str] = None
    pinned_by: Optional[str] = None


def cached_path(remote: RemoteFile, cache: Optional[Path] = None) -> Path:
    """Where ``remote`` is (or will be) stored: ``CACHE/downloads/<url hash>/<filename>``."""
    key = hashlib.sha256(remote.url.encode("utf-8")).hexdigest()[:16]
    return (cache or cache_dir()) / "downloads" / key / _safe_filename(remote.filename)


def fetch(remote: RemoteFile, cache: Optional[Path] = None, progress: bool = True) -> Path:
    """The local path of ``remote``, downloading it (or the rest of it) unless it is cached."""
    target = cached_path(remote, cache)
    if _is_cached(target, remote):
        return target
    if target.is_file() and not _record_path(target).is_file():
        return _adopt(target, remote)  # placed there by hand
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    scheme = urlparse(remote.url).scheme
    if scheme in ("http", "https"):
        _download_http(remote, part, progress)
    elif scheme == "file":
        _copy_local(remote, part, progress)
    else:
        raise DownloadError(f"Cannot fetch {remote.url!r}: only http://, https:// and file:// URLs are supported.")
    digest = _verify(remote, part, delete_on_failure=True)
    os.replace(part, target)
    _write_record(target, remote, digest)
    return target


def _adopt(target: Path, remote: RemoteFile) -> Path:
    digest = _verify(remote, target, delete_on_failure=False)
    _write_record(target, remote, digest)
    return target


def _write_record(target: Path, remote: RemoteFile, digest: str) -> None:
    atomic_write_json(_record_path(target), {"url": remote.url, "size": target.stat().st_size, "sha256": digest})


def _is_cached(target: Path, remote: RemoteFile) -> bool:
    record_path = _record_path(target)
    if not (target.is_file() and record_path.is_file()):
        return False
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    expected = remote.sha256 or record.get("sha256")
    return record.get("sha256") == expected and target.stat().st_size == record.get("size")


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def _safe_filename(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", Path(unquote(name)).name).lstrip(".")
    return cleaned or "download"


def _verify(remote: RemoteFile, path: Path, delete_on_failure: bool) -> str:
    """Check a finished file against what the catalogue says; returns its sha256."""
    size = path.stat().st_size
    problem = None
    if remote.size is not None and size != remote.size:
        problem = f"is {size:,} bytes, expected {remote.size:,}{_pinned(remote)} (a truncated or different file)"
    digest = sha256_of(path) if problem is None else ""
    if problem is None and remote.sha256 is not None and digest != remote.sha256.lower():
        problem = f"has sha256 {digest}, expected {remote.sha256}{_pinned(remote)} (corrupt, or changed upstream)"
    if problem is None:
        return digest
    if delete_on_failure:
        path.unlink(missing_ok=True)
        raise DownloadError(
            f"{remote.filename} from {remote.url} {problem}. It was deleted; run the command again to retry."
            + _changed_on_purpose(remote)
        )
    raise DownloadError(
        f"{path} {problem}. Replace it with the right file or delete it to download again."
        + _changed_on_purpose(remote)
    )


def _pinned(remote: RemoteFile) -> str:
    return f" (pinned by {remote.pinned_by})" if remote.pinned_by else ""


def _changed_on_purpose(remote: RemoteFile) -> str:
    if not remote.pinned_by:
        return ""
    return (
        " If the publisher changed the file on purpose, fetch the model by its URLs rather than its catalogue "
        "name, which checks no pinned value (`python -m spacy_elmo models --files` lists them): `python -m "
        f"spacy_elmo download NAME OUT --options OPTIONS_URL --weights {remote.url}` for two files, or the "
        "archive's URL in place of NAME; and tell spacy-elmo's maintainers, so that the catalogue pins the new file."
    )


def forget(path: Path) -> None:
    """Remove a cached file and its record: the next ``fetch`` downloads it, or takes a copy placed
    there by hand as new."""
    path.unlink(missing_ok=True)
    _record_path(path).unlink(missing_ok=True)


def recorded_sha256(path: Path) -> str:
    """The sha256 that ``fetch`` recorded for a cached file (computed afresh if there is no record)."""
    try:
        return json.loads(_record_path(path).read_text(encoding="utf-8"))["sha256"]
    except (OSError, ValueError, KeyError):
        return sha256_of(path)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_http(remote: RemoteFile, part: Path, progress: bool) -> None:
    import requests

    have = part.stat().st_size if part.is_file() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with requests.get(
            remote.url, headers=headers, stream=True, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
        ) as response:
            if response.status_code == 416 and have:  # the part is already whole
                return
            _raise_for_status(remote, response)
            resumed = response.status_code == 206
            total = _expected_total(response, have if resumed else 0)
            _stream_to(
                part,
                response.iter_content(NETWORK_CHUNK_BYTES),
                append=resumed,
                total=total,
                remote=remote,
                progress=progress,
            )
    except requests.exceptions.ConnectionError as err:
        if part.is_file() and part.stat().st_size > have:
            raise _interrupted(remote, part) from None
        raise _unreachable(remote, part, err) from None
    except requests.exceptions.Timeout as err:
        raise _unreachable(remote, part, err) from None
    except requests.exceptions.ChunkedEncodingError:
        raise _interrupted(remote, part) from None


def _raise_for_status(remote: RemoteFile, response: requests.Response) -> None:
    if response.status_code in (200, 206):
        return
    raise DownloadError(
        f"{remote.url} answered HTTP {response.status_code} ({response.reason}). Check the URL; "
        "for a catalogue model, the publisher may have moved the file: pass its new location "
        "with --options/--weights, or place the file by hand (see `python -m spacy_elmo download --help`)."
    )


def _expected_total(response: requests.Response, offset: int) -> Optional[int]:
    length = response.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _stream_to(
    part: Path, chunks: Iterable[bytes], append: bool, total: Optional[int], remote: RemoteFile, progress: bool
) -> None:
    initial = part.stat().st_size if append and part.is_file() else 0
    with (
        open(part, "ab" if append else "wb") as stream,
        progress_bar(
            total=total,
            initial=initial,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=remote.filename,
            disable=not progress,
            leave=False,
        ) as bar,
    ):
        for chunk in chunks:
            stream.write(chunk)
            bar.update(len(chunk))
        stream.flush()
        os.fsync(stream.fileno())
    if total is not None and part.stat().st_size < total:
        raise _interrupted(remote, part)


def _copy_local(remote: RemoteFile, part: Path, progress: bool) -> None:
    parsed = urlparse(remote.url)
    source = Path(url2pathname(unquote(parsed.path)))
    if not source.is_file():
        raise DownloadError(f"{remote.url}: no such file ({source}).")
    with open(source, "rb") as stream:
        chunks = iter(lambda: stream.read(CHUNK_BYTES), b"")
        _stream_to(part, chunks, append=False, total=source.stat().st_size, remote=remote, progress=progress)


def _interrupted(remote: RemoteFile, part: Path) -> DownloadError:
    size = part.stat().st_size if part.is_file() else 0
    return DownloadError(
        f"The download of {remote.url} was interrupted after {size:,} bytes. Run the same command "
        f"again to resume from there (the part is kept in {part})."
    )


def _unreachable(remote: RemoteFile, part: Path, err: Exception) -> Unreachable:
    target = part.with_name(part.name[: -len(".part")])
    return Unreachable(
        f"Could not reach {remote.url} ({type(err).__name__}). Without network access, download "
        f"the file on another machine and place it at {target}, or point at local copies with "
        "file:// URLs (python -m spacy_elmo download NAME OUT --options file:///path/options.json "
        "--weights file:///path/weights.hdf5).",
        remote,
        target,
    )


def fetch_all(
    remotes: Iterable[RemoteFile],
    cache: Optional[Path] = None,
    progress: bool = True,
    hint: str = "",
    check: Optional[Callable[[RemoteFile, Path], None]] = None,
) -> List[Path]:
    """The local path of each of ``remotes``, fetched as ``fetch`` does, in order. Where some cannot be
    reached, one error lists every one of them, with where to place it and what it must be, so that
    a machine without network is set up in one round (files already in place are used as they are);
    ``hint``: another way, said last. ``check(remote, path)`` runs on each file as it arrives, before
    the next is fetched: what it raises stops the download there."""
    paths, missing = [], []
    for remote in remotes:
        try:
            path = fetch(remote, cache, progress)
        except Unreachable as unreachable:
            missing.append(unreachable)
            continue
        if check is not None:
            check(remote, path)
        paths.append(path)
    if missing:
        raise DownloadError(_offline_message(missing, hint))
    return paths


def _offline_message(missing: List[Unreachable], hint: str) -> str:
    lines = [
        f"Could not reach {len(missing)} file(s) of the model (no network?). Place each file at its path, then run "
        "the same command again:"
    ]
    for unreachable in missing:
        remote = unreachable.remote
        pins = ([f"sha256 {remote.sha256}"] if remote.sha256 else []) + (
            [f"{remote.size:,} bytes"] if remote.size else []
        )
        lines.append(f"  {remote.url}\n    -> {unreachable.target}" + (f" ({', '.join(pins)})" if pins else ""))
    return "\n".join(lines + ([hint] if hint else []))
