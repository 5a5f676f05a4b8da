"""What the benchmark scripts share when they report: their section of BENCHMARKS.md."""
from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def write_section(key: str, lines: list) -> None:
    """Replace (or append) the BENCHMARKS.md section between the ``<!-- key start/end -->`` marks."""
    start, end = f"<!-- {key} start -->", f"<!-- {key} end -->"
    text = BENCHMARKS.read_text(encoding="utf-8") if BENCHMARKS.exists() else "# Benchmarks\n\n"
    block = f"{start}\n" + "\n".join(lines) + end
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS.write_text(text, encoding="utf-8")
