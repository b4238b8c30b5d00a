#!/usr/bin/env bash
# Installs what the browser tests (pytest -m browser) need on Debian/Ubuntu: the distro's
# chromium at /usr/bin/chromium, and CJK fonts so the chat page's Chinese text renders in
# screenshots instead of boxes. Never `playwright install` (it downloads a browser).
# Idempotent: exits 0 at once when everything is already there. Needs root (or sudo).
set -euo pipefail

packages=()
[ -x /usr/bin/chromium ] || packages+=(chromium)
dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null | grep -q 'install ok installed' \
  || packages+=(fonts-noto-cjk)

if [ ${#packages[@]} -eq 0 ]; then
  echo "install-browser: chromium and fonts-noto-cjk already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-browser: need root or sudo" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-browser: installing ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
[ -x /usr/bin/chromium ] || { echo "install-browser: /usr/bin/chromium still missing" >&2; exit 1; }
echo "install-browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium installed)"
