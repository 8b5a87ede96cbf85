#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests (tests/web). Idempotent: does nothing when
# /usr/bin/chromium is already there. Runs as root (as on the dev machines and in CI); with sudo
# otherwise. The tests drive this browser through the `playwright` Python package and never run
# `playwright install` (which would download a second browser).
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium

/usr/bin/chromium --version
