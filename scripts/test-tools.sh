#!/usr/bin/env bash
# The client tools that the end-to-end tests of `hourglass serve` drive (tests/tests/serve_clients.rs):
#
#   * headless Chromium, from Debian's `chromium` package (/usr/bin/chromium), for the built-in
#     page test; installed with apt-get when missing (needs root, or sudo);
#   * the Prometheus HTTP API client from PyPI (`prometheus-api-client`, pinned below) in the venv
#     .services/clients, for the Grafana-compatibility test.
#
# Usage: scripts/test-tools.sh          install what is missing (idempotent, quick when present)
#        scripts/test-tools.sh check    exit 1 and say what is missing, installing nothing
#
# `make test` runs it before the tests. Environment: PYTHON (default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
PROM_REQ="prometheus-api-client==0.7.2"
VENV="$ROOT/.services/clients"

say() { echo "[test-tools] $*"; }
die() {
  echo "[test-tools] error: $*" >&2
  exit 1
}

have_chromium() { command -v chromium >/dev/null 2>&1; }
have_client() { [[ -x "$VENV/bin/python" && -f "$VENV/.complete" && "$(cat "$VENV/.complete")" == "$PROM_REQ" ]]; }

ensure_chromium() {
  have_chromium && return 0
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "chromium is missing and apt-get needs root: install Debian's chromium package"
    sudo=(sudo -n)
  fi
  local t0=$SECONDS logf="$ROOT/.services/chromium-install.log"
  mkdir -p "$ROOT/.services"
  say "installing Debian's chromium (apt-get; log: ${logf#"$ROOT"/})..."
  if ! { "${sudo[@]}" apt-get update -q && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends chromium; } >"$logf" 2>&1; then
    tail -n 20 "$logf" >&2 || true
    die "could not install chromium (log: $logf)"
  fi
  have_chromium || die "apt-get installed chromium but it is not on PATH"
  say "chromium ready ($((SECONDS - t0))s)"
}

ensure_client() {
  have_client && return 0
  command -v "$PYTHON" >/dev/null 2>&1 || die "python ('$PYTHON') not found: needed for $PROM_REQ"
  local t0=$SECONDS logf="$ROOT/.services/clients-venv.log"
  mkdir -p "$ROOT/.services"
  say "creating Python venv ${VENV#"$ROOT"/} with $PROM_REQ..."
  rm -rf "$VENV"
  if ! { "$PYTHON" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$PROM_REQ"; } >"$logf" 2>&1; then
    tail -n 20 "$logf" >&2 || true
    die "could not create the venv (log: $logf)"
  fi
  echo "$PROM_REQ" >"$VENV/.complete"
  say "venv ready ($((SECONDS - t0))s)"
}

case "${1:-install}" in
  install)
    ensure_chromium
    ensure_client
    say "chromium: $(chromium --version 2>/dev/null || echo '?'); $PROM_REQ in ${VENV#"$ROOT"/}"
    ;;
  check)
    missing=0
    have_chromium || { say "missing: chromium (Debian package chromium)"; missing=1; }
    have_client || { say "missing: $PROM_REQ in ${VENV#"$ROOT"/}"; missing=1; }
    exit $missing
    ;;
  *) die "usage: scripts/test-tools.sh [install|check]" ;;
esac
