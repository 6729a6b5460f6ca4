#!/usr/bin/env bash
# The sensor tables' bytes on disk, write speed and read speed in HBase with each data block
# encoding (issue 38), interleaved: for each round and each encoding in turn, the three tables
# are emptied (splits and descriptors kept), their family `t` set to the encoding
# (`HbaseJava family`), the recording replayed into them with one hourglass binary, the tables
# flushed and major-compacted and their store files summed (`disk.sh`), then `hourglass bench
# queries` run on them. The encoding is the tables' only difference: the same binary writes and
# reads every round.
#
#   bench/hbase-java/encoding.sh RECORDING.jsonl
#   ENCODINGS="NONE FAST_DIFF" ROUNDS=2 DEVICES=100000 bench/hbase-java/encoding.sh f10m.jsonl
#
# Knobs: ENCODINGS ("NONE FAST_DIFF"), BLOCK (65536, the block size of every round), ROUNDS (2),
# DEVICES (100000: `bench queries --devices`, the recording's), ITERATIONS (300), WORKERS (2),
# HOURGLASS (the binary; default target/release/hourglass), HBASE (127.0.0.1:9090), ZK
# (127.0.0.1:2181), HBASE_DATA (see disk.sh), COMPACT (1; 0 skips the flush, compaction and
# byte count, for rounds of speed alone: the queries then read the tables as the replay left
# them), OUT (a fresh /tmp directory: every round's
# replay stats, disk figures and query JSON, and results.jsonl, one line per round).
# It EMPTIES ts_metric, ts_metric_hourly and ts_room_latest of that HBase and leaves them with
# the last encoding of the last round: use it on a dev HBase, then `hourglass tables create`
# says how their layout differs from the spec's.
set -euo pipefail
case "${1:-}" in
  "" | -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 2 ;;
esac
recording=$(realpath "$1")
cd "$(dirname "$0")/../.."
root=$PWD
ENCODINGS=${ENCODINGS:-"NONE FAST_DIFF"}
BLOCK=${BLOCK:-65536}
ROUNDS=${ROUNDS:-2}
DEVICES=${DEVICES:-100000}
ITERATIONS=${ITERATIONS:-300}
COMPACT=${COMPACT:-1}
WORKERS=${WORKERS:-2}
HOURGLASS=${HOURGLASS:-$root/target/release/hourglass}
HBASE=${HBASE:-127.0.0.1:9090}
ZK=${ZK:-127.0.0.1:2181}
OUT=${OUT:-$(mktemp -d /tmp/hourglass-encoding.XXXXXX)}
mkdir -p "$OUT"
tables=(ts_metric ts_metric_hourly ts_room_latest)
if [ ! -d bench/hbase-java/target/lib ]; then
  (cd bench/hbase-java && mvn -q -B -Dstyle.color=never package -DskipTests dependency:copy-dependencies -DoutputDirectory=target/lib)
fi
java_cmd=(java -Dzk="$ZK" -cp "$root/bench/hbase-java/target/classes:$root/bench/hbase-java/target/lib/*" hourglass.bench.hbase.HbaseJava)
lines=$(wc -l <"$recording")
echo "recording $recording: $lines lines; results in $OUT" >&2

for round in $(seq 1 "$ROUNDS"); do
  for enc in $ENCODINGS; do
    tag="r$round-$enc"
    "${java_cmd[@]}" truncate "${tables[@]}" 2>"$OUT/java.err" || { cat "$OUT/java.err" >&2; exit 1; }
    for t in "${tables[@]}"; do
      "${java_cmd[@]}" family "$t" t "$enc" "$BLOCK" >>"$OUT/$tag.family" 2>"$OUT/java.err" ||
        { cat "$OUT/java.err" >&2; exit 1; }
    done
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    started=$(date +%s.%N)
    "$HOURGLASS" replay "$recording" --hbase "$HBASE" --workers "$WORKERS" --quiet \
      --stats-json "$OUT/$tag.replay.json" --dead-letter "$OUT/dead.jsonl" --late-output "$OUT/late.jsonl"
    secs=$(echo "$(date +%s.%N) - $started" | bc)
    load_after=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$COMPACT" = 1 ]; then
      bench/hbase-java/disk.sh "${tables[@]}" >"$OUT/$tag.disk.jsonl"
    else
      printf '{"table":"%s","bytes":null}\n' "${tables[@]}" >"$OUT/$tag.disk.jsonl"
    fi
    "$HOURGLASS" bench queries --hbase "$HBASE" --devices "$DEVICES" --iterations "$ITERATIONS" \
      --json "$OUT/$tag.queries.json" >/dev/null
    load_queries=$(cut -d' ' -f1 /proc/loadavg)
    jq -cn --arg enc "$enc" --argjson round "$round" --argjson lines "$lines" --argjson secs "$secs" \
      --arg load "$load_before $load_after $load_queries" \
      --slurpfile disk "$OUT/$tag.disk.jsonl" --slurpfile q "$OUT/$tag.queries.json" '
      ($disk | map({(.table): .bytes}) | add) as $bytes |
      {round: $round, encoding: $enc, replay_s: $secs, readings_per_s: ($lines / $secs),
       bytes: $bytes,
       bytes_per_reading: (if $bytes.ts_metric then ($bytes | add) / $lines else null end),
       ts_metric_bytes_per_reading: (if $bytes.ts_metric then $bytes.ts_metric / $lines else null end),
       queries: ($q[0] | with_entries(select(.key | startswith("query_")))), load: $load}' |
      tee -a "$OUT/results.jsonl"
  done
done
