"""Progress bars that read well where they end up: tqdm's bar on a terminal; in a log file or a CI
job (output not a terminal), one plain line every ``LOG_SECONDS`` instead of thousands of
carriage-return updates.

    for item in progress_bar(items, desc="Embedding", unit="line"): ...
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

from tqdm import tqdm

LOG_SECONDS = 10.0


class _Lines:
    """A stream that turns tqdm's carriage-return redraws into whole lines and drops its clearing."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


class _LogBar(tqdm):
    """A bar that redraws (a new line) at most every ``LOG_SECONDS``, whatever asks it to (updates,
    ``set_postfix``), and once more when it closes where its last line does not say where it ended."""

    def refresh(self, nolock: bool = False, lock_args: Optional[Any] = None) -> None:
        now = time.monotonic()
        if now - getattr(self, "_last_line", -LOG_SECONDS) >= LOG_SECONDS:
            self._last_line = now
            super().refresh(nolock=nolock, lock_args=lock_args)
            self._shown = self._where()

    def close(self) -> None:
        """One last line with where it ended, unless the last line already says it; also for a bar
        that clears itself on a terminal (``leave=False``), so that a log does not end on 0%."""
        if not self.disable and not getattr(self, "_closing", False):
            self._closing = True
            if getattr(self, "_shown", None) != self._where():
                self._last_line = -LOG_SECONDS
                self.refresh()
            self.leave = False  # tqdm's own closing line would repeat the last one
        super().close()

    def _where(self) -> tuple:
        return self.n, self.postfix


def progress_bar(*args: Any, **kwargs: Any) -> tqdm:
    """``tqdm(*args, **kwargs)`` on a terminal; elsewhere a line each ``LOG_SECONDS``."""
    stream = kwargs.pop("file", None) or sys.stderr
    if stream.isatty():
        return tqdm(*args, file=stream, **kwargs)
    kwargs.update(mininterval=LOG_SECONDS, ascii=True, dynamic_ncols=False, ncols=100)
    return _LogBar(*args, file=_Lines(stream), **kwargs)
