#!/usr/bin/env bash
# Installs the bridge into .venv and starts the local demo (emulator + scripted agent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e .
exec .venv/bin/feishu-bridge demo "$@"
