#!/usr/bin/env bash
# Profile reads, three clients interleaved per round: hourglass with the near cache
# (NEAR_CONFIG, `[cache] near_mib` set), hourglass without it (CONFIG), and the Python peer
# with async backfill; prints reads/s and hit ratio of each run.
#
#   NEAR_CONFIG=readn.toml CONFIG=read.toml USERS_FILE=users.txt ROUNDS=2 THREADS=32 \
#     bench/profile-python/near.sh
#
# The two configs should name different Redis databases, and the peer a third (PEER_REDIS).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
HOURGLASS="${HOURGLASS:-$ROOT/target/release/hourglass}"
VENV="${VENV:-$ROOT/target/profile-python-venv}"
NEAR_CONFIG="${NEAR_CONFIG:?set NEAR_CONFIG to a profile config with [cache] near_mib}"
CONFIG="${CONFIG:?set CONFIG to the same config without near_mib}"
HBASE="${HBASE:-127.0.0.1:9090}"
PEER_REDIS="${PEER_REDIS:-redis://127.0.0.1:6379/14}"
ROUNDS="${ROUNDS:-2}"
THREADS="${THREADS:-32}"
OUT="${OUT:-$ROOT/target/bench-profile-near}"
USERS_FILE="${USERS_FILE:?set USERS_FILE (hourglass bench profile --users-file writes one)}"
[[ -x "$VENV/bin/python" ]] || { python3 -m venv "$VENV"; "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"; }
mkdir -p "$OUT"
common=(--users 1000000 --reads "${READS:-100000}" --warmup "${WARMUP:-10000}" --threads "$THREADS" --users-file "$USERS_FILE")
for round in $(seq 1 "$ROUNDS"); do
  for who in near plain peer; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    json="$OUT/$who-$THREADS-$round.json"
    case $who in
      near) "$HOURGLASS" bench profile --config "$NEAR_CONFIG" --hbase "$HBASE" "${common[@]}" --json "$json" >/dev/null ;;
      plain) "$HOURGLASS" bench profile --config "$CONFIG" --hbase "$HBASE" "${common[@]}" --json "$json" >/dev/null ;;
      peer) "$VENV/bin/python" "$HERE/profile_read.py" --hbase "$HBASE" --redis-url "$PEER_REDIS" \
              --backfill async "${common[@]}" --json "$json" >/dev/null ;;
    esac
    "$VENV/bin/python" -c 'import json,sys; d=json.load(open(sys.argv[2])); print(sys.argv[1], "load", sys.argv[3], "reads/s", d["reads_per_s"], "hit", d["hit_ratio"], "miss p50", d["misses"]["p50_ms"])' "$who" "$json" "$load"
  done
done
