#!/usr/bin/env bash
# Profile reads: `hourglass bench profile` and the Python peer (profile_read.py, the
# documents' happybase + redis-py read path) interleaved on the same populated HBase and Redis:
# hourglass, peer (async backfill), peer (sync backfill), and again, ROUNDS times; then a table
# of reads/s, hit ratio and latencies, and the ratios of hourglass's reads/s to the peer's.
#
#   CONFIG=profile.toml bench/profile-python/run.sh
#
# CONFIG: the profile config hourglass reads with: its registry and `[redis] url` (a Redis
# database of its own, e.g. redis://127.0.0.1:6379/13); the tables must hold profiles
# (`hourglass profile replay EVENTS --config … --hbase 127.0.0.1:9090`). The peer caches in
# PEER_REDIS (another database), so neither reads the other's entries.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
HOURGLASS="${HOURGLASS:-$ROOT/target/release/hourglass}"
VENV="${VENV:-$ROOT/target/profile-python-venv}"
PYTHON="${PYTHON:-python3}"
CONFIG="${CONFIG:?set CONFIG to the profile config (registry and [redis])}"
HBASE="${HBASE:-127.0.0.1:9090}"
PEER_REDIS="${PEER_REDIS:-redis://127.0.0.1:6379/14}"
ROUNDS="${ROUNDS:-2}"
USERS="${USERS:-1000000}"
READS="${READS:-200000}"
WARMUP="${WARMUP:-20000}"
THREADS="${THREADS:-1}"
MODES="${MODES:-async sync}"
OUT="${OUT:-$ROOT/target/bench-profile-python}"
USERS_FILE="${USERS_FILE:-$OUT/users.txt}"

[[ -x "$HOURGLASS" ]] || { echo "no $HOURGLASS: cargo build --release -p hourglass-jobs" >&2; exit 1; }
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"
fi
mkdir -p "$OUT"
common=(--users "$USERS" --reads "$READS" --warmup "$WARMUP" --threads "$THREADS" --users-file "$USERS_FILE")
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round: hourglass" >&2
  "$HOURGLASS" bench profile --config "$CONFIG" --hbase "$HBASE" "${common[@]}" \
    --json "$OUT/hourglass-$round.json" >/dev/null
  for mode in $MODES; do
    echo "== round $round: python, $mode backfill" >&2
    "$VENV/bin/python" "$HERE/profile_read.py" --hbase "$HBASE" --redis-url "$PEER_REDIS" \
      --backfill "$mode" "${common[@]}" --json "$OUT/python-$mode-$round.json" >/dev/null
  done
done
"$VENV/bin/python" "$HERE/summary.py" "$OUT"
