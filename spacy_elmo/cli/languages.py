"""``--lang``: a spaCy language code, checked when the command line is read, so that a wrong one is
a usage error that says what to give, before a model loads."""

from __future__ import annotations

from typing import Optional

import typer


def language_parameter(lang: Optional[str]) -> Optional[str]:
    """``lang`` where spaCy has a language of that code (None: the command's default)."""
    if lang is None:
        return None
    from spacy.util import get_lang_class

    try:
        get_lang_class(lang)
    except ImportError:
        raise typer.BadParameter(
            f"spaCy has no language {lang!r}: give the code of one of spacy.lang (en, de, fr, nb, ...)"
        ) from None
    return lang
