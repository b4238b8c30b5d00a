#!/usr/bin/env bash
# Installs what the real-agent tests need beside the agents, on Debian/Ubuntu:
#   ripgrep (`rg`)  OpenCode's grep and glob tools download it from GitHub when there is no
#                   `rg` on PATH, which an offline test must never do
#                   (tests/integration/model_agents.py requires it for OpenCode);
#   strace          tests/integration/test_opencode_on_scripted_model.py traces OpenCode's
#                   connect() calls: nothing but loopback.
# CI fails those tests without them. Idempotent: exits 0 at once when both are there.
# Needs root (or sudo).
set -euo pipefail

if command -v rg >/dev/null 2>&1 && command -v strace >/dev/null 2>&1; then
  echo "install-agent-tools: $(rg --version | sed -n 1p), $(strace -V | sed -n 1p) already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-agent-tools: need root or sudo" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-agent-tools: installing ripgrep and strace"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends ripgrep strace >/dev/null
for program in rg strace; do
  command -v "$program" >/dev/null || { echo "install-agent-tools: $program still missing" >&2; exit 1; }
done
echo "install-agent-tools: $(rg --version | sed -n 1p), $(strace -V | sed -n 1p)"
