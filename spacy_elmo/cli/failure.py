"""How every command fails on what its user can fix (a wrong path, no network, a missing extra, a bad
value): a short message on stderr, what was wrong and how to fix it, exit 1; the traceback only
when asked for, by ``--verbose`` or ``SPACY_ELMO_TRACEBACK=1``. A failure no message expects (a bug)
keeps its traceback.
"""

from __future__ import annotations

import traceback
from typing import NoReturn, Optional, Union

import typer
from wasabi import Printer

TRACEBACK_VARIABLE = "SPACY_ELMO_TRACEBACK"

# Set by each run's --verbose (typer's callbacks and commands return nothing to share state through)
_asked = {"traceback": False}

VERBOSE = typer.Option(
    False,
    "--verbose",
    envvar=TRACEBACK_VARIABLE,
    show_envvar=True,
    help="On a failure, also print its traceback (for a bug report).",
)


def fail(title: str, error: Union[BaseException, str, None] = None, fix: Optional[str] = None) -> NoReturn:
    """Print ``title``, ``error`` (what was wrong) and ``fix`` to stderr and exit 1; first, where
    this run asked for it (``show_tracebacks``), ``error``'s traceback."""
    if _asked["traceback"] and isinstance(error, BaseException):
        traceback.print_exception(error)
    text = "\n".join(part for part in (str(error) if error is not None else "", fix or "") if part)
    typer.echo(Printer(no_print=True).fail(title, text or None), err=True)
    raise typer.Exit(1)


def show_tracebacks(verbose: bool) -> None:
    """Whether this run's failures print their traceback: its ``--verbose`` (or ``SPACY_ELMO_TRACEBACK``)."""
    _asked["traceback"] = verbose
