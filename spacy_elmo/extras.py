"""How to install an optional part of spacy-elmo (an extra of setup.py), as every message that needs
one says it.

spacy-elmo is installed from a clone, or from a wheel built there; it is on no package index yet,
so its index name with an extra ("spacy-elmo[h5]") finds nothing. The command that works wherever it came
from names the packages the extra brings, read from the installed distribution's own metadata (what
setup.py declared, so the two cannot drift); and, for a clone, the extra itself.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import List, Optional

from packaging.requirements import Requirement

DISTRIBUTION = "spacy-elmo"


def requirements(extra: str) -> List[str]:
    """The requirements ``extra`` adds on this platform, as pip takes them ("h5py>=3.8"); empty where
    the installed metadata cannot be read or has no such extra."""
    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    wanted = []
    for line in declared:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is not None and marker.evaluate({"extra": extra}) and not marker.evaluate({"extra": ""}):
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            wanted.append(f"{requirement.name}{extras}{requirement.specifier}")
    return wanted


def install_command(extra: str) -> str:
    """What installs ``extra``: its packages by name, and in a clone of spacy-elmo the extra itself."""
    clone = f'pip install ".[{extra}]" in a clone of spacy-elmo'
    packages = requirements(extra)
    if not packages:
        return clone
    quoted = " ".join(f'"{package}"' for package in packages)
    return f"pip install {quoted} (the {extra} extra; {clone})"


def missing(extra: str, module: str, needed_by: str) -> Optional[str]:
    """None where ``module`` (of ``extra``) is installed; else a message that ``needed_by`` needs it,
    with the command that installs it. Looked for, not imported: a command asks before its work."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"{needed_by} needs {module}, which is not installed: {install_command(extra)}"
