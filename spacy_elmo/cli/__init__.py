"""The command line: ``python -m spacy_elmo COMMAND`` (or ``spacy-elmo COMMAND``).

A new command goes in a module of its own here that registers it on ``app`` (as ``info`` and
``embed`` do), imported below.
"""

from . import embed, info, serve, tasks  # noqa: F401  (they register their commands on app)
from .app import app

__all__ = ["app"]
