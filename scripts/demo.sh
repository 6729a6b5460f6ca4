#!/usr/bin/env bash
# The README's first command: run the main job on the embedded default and answer dashboard
# queries. Needs only cargo; writes ./demo-traffic.jsonl.gz and ./hourglass-data.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p hourglass-jobs
hg=target/release/hourglass
echo "== generate: 500 sensors, 2 hours, with late, duplicate and malformed lines"
$hg generate --devices 500 --duration 2h --start $(( $(date +%s) - 7200 )) --late-rate 0.01 \
  --duplicate-rate 0.005 --malformed-rate 0.002 --out demo-traffic.jsonl.gz
echo "== replay into the embedded store (./hourglass-data), newest reading moved to this hour"
$hg replay demo-traffic.jsonl.gz --rebase-time
echo "== query latest --device dev00042"
$hg query latest --device dev00042
now=$(date +%s)
echo "== query hour --device dev00042 --hour $now (one Get of the wide row; first lines)"
$hg query hour --device dev00042 --hour "$now" | head -6
echo "== query curve --device dev00042 over the last 15 minutes, as CSV (first lines)"
$hg query curve --device dev00042 --from $((now - 900)) --to "$now" --format csv | head -6
room=$($hg query latest --device dev00042 --format json | sed -n 's/.*"room":"\([^"]*\)".*/\1/p')
echo "== query room --room $room (every device's current value, one prefix scan of ts_room_latest)"
$hg query room --room "$room"
