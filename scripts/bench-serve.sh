#!/usr/bin/env bash
# Latency of `hourglass serve` under concurrent load (wrk, Debian package `wrk`): GET
# /api/v1/hour and a 24 h query_range at a 60 s step, each for random devices, on tables that
# hold `hourglass generate --devices N` traffic.
#
#   scripts/bench-serve.sh --store DIR --devices N        # embedded store
#   scripts/bench-serve.sh --hbase HOST:PORT --devices N  # HBase (the Thrift1 address; reads
#                                                         # go to the Thrift2 gateway, :9091)
#
# Knobs: CONNECTIONS (16), THREADS (2), DURATION (20s), HOURGLASS (a binary to measure instead
# of this checkout's release build, e.g. an older one for a side-by-side run). Prints one JSON
# line per kind.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=() devices=1000
while (($#)); do
  case "$1" in
    --store | --hbase) backend=("$1" "$2"); shift 2 ;;
    --devices) devices="$2"; shift 2 ;;
    *) echo "usage: $0 (--store DIR | --hbase HOST:PORT) [--devices N]" >&2; exit 2 ;;
  esac
done
((${#backend[@]})) || { echo "usage: $0 (--store DIR | --hbase HOST:PORT) [--devices N]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }
hg=${HOURGLASS:-target/release/hourglass}
[[ -n "${HOURGLASS:-}" ]] || cargo build --release --locked -q -p hourglass-jobs
at=$($hg query latest --device dev00000 "${backend[@]}" --format json | sed -n 's/.*"ts":\([0-9]*\).*/\1/p')
[[ -n "$at" ]] || { echo "dev00000 has no readings: replay generated traffic first" >&2; exit 1; }
log=$(mktemp)
$hg serve "${backend[@]}" --listen 127.0.0.1:0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)
  [[ -n "$url" ]] && curl -fs "$url/healthz" >/dev/null && break
  sleep 0.1
done
[[ -n "$url" ]] || { cat "$log" >&2; exit 1; }
echo "# $0 ${backend[*]} --devices $devices; newest reading $at; wrk -t${THREADS:-2} -c${CONNECTIONS:-16} -d${DURATION:-20s}" >&2
for kind in hour range24h; do
  wrk -t"${THREADS:-2}" -c"${CONNECTIONS:-16}" -d"${DURATION:-20s}" -s scripts/wrk-queries.lua "$url" \
    -- "$kind" "$devices" "$at" | tail -1 | sed "s/^{/{\"kind\":\"$kind\",/"
done
