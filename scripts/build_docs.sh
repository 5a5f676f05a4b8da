#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, docs/) into .site/, failing on any warning.
# Needs the dev extra in .venv (bash scripts/install.sh). Runs from any directory.
set -euo pipefail
cd "$(dirname "$0")/.."

# The API reference must cover every module of spacy_elmo: each subpackage ("room") is rendered
# whole by a `::: spacy_elmo.ROOM` line with show_submodules, each top-level module by its own
# `::: spacy_elmo.MODULE` line (docs/reference/). A module added, moved or removed without the
# reference following fails the build here, naming it.
.venv/bin/python - <<'PY'
import re
import sys
from pathlib import Path

package = Path("spacy_elmo")
wanted = set()
for path in package.rglob("*.py"):
    parts = path.relative_to(package).with_suffix("").parts
    if parts[-1] == "__main__" or any(part.startswith("_") and part != "__init__" for part in parts):
        continue
    if len(parts) > 1:
        wanted.add("spacy_elmo." + parts[0])  # a room, rendered with its submodules
    elif parts[0] != "__init__":
        wanted.add("spacy_elmo." + parts[0])
for path in package.iterdir():
    if path.is_dir() and not (path / "__init__.py").exists() and any(path.rglob("*.py")):
        sys.exit(f"build_docs: {path} holds modules but no __init__.py; the reference cannot render it.")

documented = set()
for page in Path("docs/reference").glob("*.md"):
    documented.update(re.findall(r"^::: (spacy_elmo(?:\.\w+)*)\s*$", page.read_text(), re.M))
documented.discard("spacy_elmo")

missing, stale = sorted(wanted - documented), sorted(documented - wanted)
if missing or stale:
    for name in missing:
        print(f"build_docs: {name} is not in docs/reference/ (add a '::: {name}' line, and a page to mkdocs.yml's nav for a new room)", file=sys.stderr)
    for name in stale:
        print(f"build_docs: docs/reference/ names {name}, which is not a top-level module or room of spacy_elmo", file=sys.stderr)
    sys.exit(1)
PY

if [ ! -x .venv/bin/mkdocs ]; then
  echo "build_docs: .venv/bin/mkdocs is missing; run bash scripts/install.sh (the dev extra has the docs tools)." >&2
  exit 1
fi
# Material 9.7+ prints a banner about MkDocs 2.0 and its own end of life on every build; it is a
# notice, not a build warning (--strict does not count it). The pins in setup.py keep MkDocs 1.x.
export NO_MKDOCS_2_WARNING=1
exec .venv/bin/mkdocs build --strict --clean --site-dir .site "$@"
