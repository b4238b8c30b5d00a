#!/usr/bin/env bash
# Installs the bridge into .venv and starts the local demo (emulator + scripted agent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e .
# Bytecode for the editable package now: with PYTHONDONTWRITEBYTECODE set, every start
# would compile it again (about 0.1 s of `feishu-bridge run`'s start).
.venv/bin/python -m compileall -q bridge > /dev/null
exec .venv/bin/feishu-bridge demo "$@"
