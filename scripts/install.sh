#!/usr/bin/env bash
# Create .venv (once) and install spacy-elmo with what the workflow and the tests use.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0   # the CPU build first, so nothing pulls CUDA wheels
.venv/bin/python -m pip install -q -e ".[dev]"
