#!/usr/bin/env bash
# Create .venv (once) and install spacy-elmo with what the workflow and the tests use; again only
# where what decides the install (setup.py, pyproject.toml, this script) changed since the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=.venv/spacy-elmo-install.sha256
wanted=$(cat setup.py pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
  echo "install.sh: .venv is up to date with setup.py, pyproject.toml and install.sh (rm $stamp to install again)"
else
  rm -f "$stamp"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q torch==2.13.0   # the CPU build first, so nothing pulls CUDA wheels
  .venv/bin/python -m pip install -q -e ".[dev]"
  echo "$wanted" > "$stamp.partial" && mv "$stamp.partial" "$stamp"
fi
# pip byte-compiles what it installs, but an editable install leaves the package's sources where they
# are: compiled here, so that a process that may not write bytecode (PYTHONDONTWRITEBYTECODE) does
# not compile them again at each start. Files already compiled and unchanged are skipped.
.venv/bin/python -m compileall -q spacy_elmo training
