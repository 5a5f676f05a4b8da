"""Small file helpers used everywhere: atomic writes of files and of whole directories, and
where the cache lives.

A reader never sees a half-written file: content goes to a temporary name beside the target,
is flushed to disk, and is renamed into place (``os.replace`` is atomic on one file system).
A failure removes the temporary and leaves the target as it was. Temporaries are created with the
modes a plain ``open`` or ``mkdir`` gives under the user's umask (``tempfile``'s are private,
0600 and 0700, and would stay so after the rename), so what is written can be shared as the user's
other files are.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Iterator, Union

PathLike = Union[str, Path]
CACHE_ENVIRONMENT_VARIABLE = "SPACY_ELMO_CACHE"


def cache_dir() -> Path:
    """The cache root (downloaded models, speed advice): ``$SPACY_ELMO_CACHE``, else
    ``$XDG_CACHE_HOME/spacy-elmo``, else ``~/.cache/spacy-elmo``."""
    configured = os.environ.get(CACHE_ENVIRONMENT_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spacy-elmo"


def atomic_write(path: PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary_path)``, then rename the temporary file to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _create_beside(path, ".tmp", lambda name: os.close(os.open(name, _NEW_FILE, 0o666)))
    shared = stat.S_IMODE(temporary.stat().st_mode)  # what the umask gives a new file
    try:
        write(Path(temporary))
        if stat.S_IMODE(temporary.stat().st_mode) != shared:  # a writer that replaced the file (safetensors: 0600)
            os.chmod(temporary, shared)
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


def _create_beside(path: Path, suffix: str, create: Callable[[Path], object]) -> Path:
    """A new hidden name beside ``path`` (``.NAME.RANDOM.SUFFIX``), made by ``create(name)``, which
    fails where the name exists (then another is drawn)."""
    while True:
        candidate = path.parent / f".{path.name}.{secrets.token_hex(6)}{suffix}"
        try:
            create(candidate)
        except FileExistsError:
            continue
        return candidate


def directory_beside(path: Path, suffix: str = ".tmp") -> Path:
    """A new empty hidden directory beside ``path``, with the mode ``mkdir`` gives under the umask."""
    return _create_beside(path, suffix, lambda name: os.mkdir(name, 0o777))


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def atomic_write_json(path: PathLike, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_directory(path: PathLike, replace: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary name and move it to ``path`` when the block succeeds.

    Yields the temporary directory (beside ``path``, so the final rename stays on one file system).
    If the block raises, the temporary directory is removed and ``path`` is untouched. An existing
    ``path`` is an error unless ``replace`` is set; then it is swapped out only after the new
    directory is complete.
    """
    path = Path(path)
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()  # an empty directory made for us beforehand holds nothing to keep
    if path.exists() and not (replace and path.is_dir()):
        raise FileExistsError(f"{path} already exists; choose another output directory or remove it first.")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = directory_beside(path)
    try:
        yield temporary
        _swap_into_place(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _swap_into_place(temporary: Path, path: Path) -> None:
    if not path.exists():
        os.replace(temporary, path)
        return
    retired = _create_beside(path, ".old", lambda name: os.mkdir(name, 0o700))
    os.replace(path, retired / path.name)
    try:
        os.replace(temporary, path)
    except BaseException:
        os.replace(retired / path.name, path)  # put the old one back
        raise
    finally:
        shutil.rmtree(retired, ignore_errors=True)
