"""The command line: ``python -m spacy_elmo COMMAND`` (or ``spacy-elmo COMMAND``).

A new command goes here, in a module of its own when it is more than a few lines.
"""

from .app import app

__all__ = ["app"]
