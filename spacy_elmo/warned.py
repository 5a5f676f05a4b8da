"""Where a warning points: at the user's line, not at the library code between it and the warning.

A precision's warning is raised while a pipeline initializes or loads, some frames below the
user's ``nlp.initialize()`` or ``spacy.load()``, in spaCy, thinc, confection or torch; a fixed
``stacklevel`` points at whichever library frame happens to sit there, the component's included.
``user_stacklevel`` counts the frames to the first one outside them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Optional, Tuple

LIBRARIES = ("spacy_elmo", "spacy", "thinc", "confection", "torch", "catalogue")


@functools.lru_cache(maxsize=1)
def library_folders() -> Tuple[str, ...]:
    """The folders of ``LIBRARIES`` that are installed, each ending in a separator; and Python's
    frozen import machinery, which runs between a ``spacy.load`` and a package's code."""
    folders = []
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            folders.append(str(Path(spec.origin).parent) + os.sep)
    return (*folders, "<frozen ")


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a ``warnings.warn`` in the function calling this at the first
    frame outside ``LIBRARIES`` (the user's line); past the top of the stack where there is none."""
    frame: Optional[FrameType] = sys._getframe(1)
    level = 1
    folders = library_folders()
    while frame is not None and frame.f_code.co_filename.startswith(folders):
        frame, level = frame.f_back, level + 1
    return level
