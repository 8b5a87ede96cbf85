#!/usr/bin/env bash
# Debian's prometheus package: the `prometheus` server and `promtool`, for the alert-rule unit tests
# and the end-to-end test that scrapes a real API and worker. Nothing is started by installing it.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q prometheus >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q prometheus >/dev/null; }
command -v promtool >/dev/null || { echo "install_prometheus.sh: promtool is still missing" >&2; exit 1; }
