#!/usr/bin/env bash
# Installs bubblewrap (`bwrap`) on Debian/Ubuntu: BRIDGE_AGENT_SANDBOX=bwrap runs every agent
# under it, and tests/integration/test_agent_sandbox.py needs it (it fails in CI without it).
# Idempotent: exits 0 at once when bwrap is already there. Needs root (or sudo).
set -euo pipefail

if command -v bwrap >/dev/null 2>&1; then
  echo "install-sandbox: $(bwrap --version) already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-sandbox: need root or sudo" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-sandbox: installing bubblewrap"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
command -v bwrap >/dev/null || { echo "install-sandbox: bwrap still missing" >&2; exit 1; }
echo "install-sandbox: $(bwrap --version)"
# bubblewrap also needs unprivileged user namespaces; say so now rather than in a test.
if ! bwrap --unshare-all --share-net --ro-bind / / --proc /proc --dev /dev true 2>/dev/null; then
  echo "install-sandbox: bwrap is installed but cannot start a sandbox here" \
    "(user namespaces off?); see docs/sandbox.md" >&2
fi
