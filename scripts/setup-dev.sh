#!/usr/bin/env bash
# Creates .venv and installs the package with its dev tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
# Bytecode for the editable package now: with PYTHONDONTWRITEBYTECODE set, every start
# would compile it again (about 0.1 s of `feishu-bridge run`'s start).
.venv/bin/python -m compileall -q bridge > /dev/null
