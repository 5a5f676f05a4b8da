"""A corpus cut into blocks of consecutive lines: the unit of work, of output and of resuming.

The input is a text file, a folder of them, or Parquet files with a text column (``.parquet``).
Lines are numbered from 0 across the files in order (a folder's files sorted by name); a text file's
lines end at "\\n" (a "\\r" before it is dropped). Block k of a file holds its lines from
``k * block_lines`` on; a block never spans two files. Planning reads each file once, as a stream
(its sha256, its lines' byte offsets at block starts), so a block can later be read on its own by
whoever embeds it, and the whole input is never held in memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from ..hub.download import sha256_of

PARQUET_SUFFIX = ".parquet"


@dataclass(frozen=True)
class Block:
    """Lines ``first_line .. first_line + lines - 1`` of the corpus, found in ``path`` (absolute:
    workers may run elsewhere) at ``start`` (a byte offset in a text file, a row number in Parquet)."""

    number: int
    path: str
    start: int
    lines: int
    first_line: int


@dataclass(frozen=True)
class CorpusPlan:
    """The blocks of a corpus and what identifies its input (each file's name, size and sha256)."""

    blocks: List[Block]
    files: List[Dict[str, object]]
    text_column: str

    @property
    def lines(self) -> int:
        return sum(block.lines for block in self.blocks)


def input_files(source: Path) -> List[Path]:
    """The file itself, or a folder's files sorted by name (hidden ones left out)."""
    source = Path(source)
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise ValueError(f"{source} is a folder with no files to embed.")
        return files
    if not source.is_file():
        raise ValueError(
            f"{source}: file not found; give a UTF-8 text file (one sentence or paragraph per line), a folder of "
            "such files, or .parquet files."
        )
    return [source]


def plan_blocks(source: Path, block_lines: int, text_column: str = "text") -> CorpusPlan:
    """Cut ``source`` into blocks of ``block_lines`` lines (fewer at the end of each file)."""
    if block_lines < 1:
        raise ValueError(f"block_lines must be positive, got {block_lines}.")
    blocks: List[Block] = []
    files: List[Dict[str, object]] = []
    for path in input_files(source):
        plan = _parquet_starts if path.suffix == PARQUET_SUFFIX else _text_starts
        starts, count, digest = plan(path, block_lines, text_column)
        files.append({"path": str(path), "bytes": path.stat().st_size, "sha256": digest, "lines": count})
        first = sum(block.lines for block in blocks)
        for k, start in enumerate(starts):
            size = min(block_lines, count - k * block_lines)
            blocks.append(Block(len(blocks), str(path.resolve()), start, size, first + k * block_lines))
    return CorpusPlan(blocks, files, text_column)


def read_block(block: Block, text_column: str = "text") -> List[str]:
    """The block's lines, read from its file alone."""
    path = Path(block.path)
    if path.suffix == PARQUET_SUFFIX:
        return _parquet_rows(path, text_column, block.start, block.lines)
    lines = []
    with open(path, "rb") as stream:
        stream.seek(block.start)
        for number in range(block.first_line, block.first_line + block.lines):
            lines.append(_decode(stream.readline(), path, number))
    return lines


def _text_starts(path: Path, block_lines: int, text_column: str) -> Tuple[List[int], int, str]:
    """Byte offsets of the lines that start blocks, the line count and the file's sha256 (hashed in the
    same pass that checks the UTF-8 and counts the lines, so the file is read once)."""
    digest, starts, offset, count = hashlib.sha256(), [], 0, 0
    with open(path, "rb") as stream:
        for raw in stream:
            if count % block_lines == 0:
                starts.append(offset)
            _decode(raw, path, count)
            digest.update(raw)
            offset += len(raw)
            count += 1
    return starts, count, digest.hexdigest()


def _decode(raw: bytes, path: Path, number: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not valid UTF-8 (line {number + 1}, byte {err.start}): {err.reason}.") from None
    return text[:-2] if text.endswith("\r\n") else text.rstrip("\n")


def _parquet_starts(path: Path, block_lines: int, text_column: str) -> Tuple[List[int], int, str]:
    """Row numbers that start blocks, the row count and the file's sha256."""
    metadata = _parquet_file(path, text_column).metadata
    return list(range(0, metadata.num_rows, block_lines)), metadata.num_rows, sha256_of(path)


def _parquet_rows(path: Path, text_column: str, start: int, count: int) -> List[str]:
    """Rows ``start .. start + count - 1`` of the text column (null rows as empty lines)."""
    parquet = _parquet_file(path, text_column)
    rows: List[str] = []
    first_of_group = 0
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        if first_of_group + size > start and first_of_group < start + count:
            column = parquet.read_row_group(group, columns=[text_column]).column(0).to_pylist()
            low, high = max(start - first_of_group, 0), min(start + count - first_of_group, size)
            rows.extend(text or "" for text in column[low:high])
        first_of_group += size
    return rows


def _parquet_file(path: Path, text_column: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"{path} is Parquet, which needs pyarrow: pip install pyarrow (the ray extra brings it too)."
        ) from None
    parquet = pq.ParquetFile(path)
    names: Sequence[str] = parquet.schema_arrow.names
    if text_column not in names:
        raise ValueError(f"{path} has no column {text_column!r} (it has {list(names)}); name it with --text-column.")
    return parquet
