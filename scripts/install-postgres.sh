#!/usr/bin/env bash
# Installs PostgreSQL's server binaries on Debian/Ubuntu: tests/pg.py starts a throwaway
# cluster from them (initdb + postgres under /usr/lib/postgresql/*/bin) so the store
# contract runs against PostgreSQL too (it fails in CI without them). Only the binaries are
# needed: the package's own cluster is neither used nor required.
# Idempotent: exits 0 at once when they are there. Needs root (or sudo).
set -euo pipefail

find_initdb() {  # the newest version's, or nothing
  local newest
  newest="$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)"
  if [ -x "$newest" ]; then echo "$newest"; fi
}

initdb="$(find_initdb)"
if [ -n "$initdb" ]; then
  echo "install-postgres: $("$initdb" --version) already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-postgres: need root or sudo" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-postgres: installing postgresql"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
initdb="$(find_initdb)"
[ -n "$initdb" ] || { echo "install-postgres: initdb still missing" >&2; exit 1; }
echo "install-postgres: $("$initdb" --version)"
