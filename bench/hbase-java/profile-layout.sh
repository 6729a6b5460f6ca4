#!/usr/bin/env bash
# `user_profile_tag`'s point reads and bytes on disk in HBase with each block layout (issue 37),
# interleaved: for each round and each layout in turn, both families of the table are given the
# layout (`HbaseJava family`), the table is flushed and major-compacted so that every file is
# rewritten in it and its store files summed (`disk.sh`), then `hourglass bench profile` runs
# the batchGet benchmarks of docs/BENCHMARKS.md on it. The layout is the table's only
# difference: the same binary, data and users read every round.
#
#   bench/hbase-java/profile-layout.sh DIR
#
# DIR holds what `bench profile` reads: users.txt, and the configs MIXED (a batch of cache hits
# and misses) and MISS (every read a miss), each with its own Redis database; the commands run
# in DIR, so the configs' relative registry paths resolve there.
# Knobs: LAYOUTS ("NONE:65536 ROW_INDEX_V1:16384", ENCODING:BLOCK_BYTES), ROUNDS (2), MIXED
# (bgh.toml), MISS (bgh0.toml), HOURGLASS (default target/release/hourglass), ZK, HBASE_DATA
# (see disk.sh). Prints one JSON line per round and layout; OUT (a fresh /tmp directory)
# keeps every run's JSON. The table keeps the last layout of the last round.
set -euo pipefail
case "${1:-}" in
  "" | -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 2 ;;
esac
dir=$(realpath "$1")
cd "$(dirname "$0")/../.."
root=$PWD
LAYOUTS=${LAYOUTS:-"NONE:65536 ROW_INDEX_V1:16384"}
ROUNDS=${ROUNDS:-2}
MIXED=${MIXED:-bgh.toml}
MISS=${MISS:-bgh0.toml}
HOURGLASS=${HOURGLASS:-$root/target/release/hourglass}
ZK=${ZK:-127.0.0.1:2181}
OUT=${OUT:-$(mktemp -d /tmp/hourglass-profile-layout.XXXXXX)}
mkdir -p "$OUT"
table=user_profile_tag
if [ ! -d bench/hbase-java/target/lib ]; then
  (cd bench/hbase-java && mvn -q -B -Dstyle.color=never package -DskipTests dependency:copy-dependencies -DoutputDirectory=target/lib)
fi
java_cmd=(java -Dzk="$ZK" -cp "$root/bench/hbase-java/target/classes:$root/bench/hbase-java/target/lib/*" hourglass.bench.hbase.HbaseJava)
echo "results in $OUT" >&2

for round in $(seq 1 "$ROUNDS"); do
  for layout in $LAYOUTS; do
    enc=${layout%%:*} block=${layout##*:}
    tag="r$round-$enc-$block"
    for family in dimension behavior; do
      "${java_cmd[@]}" family "$table" "$family" "$enc" "$block" >>"$OUT/$tag.family" 2>"$OUT/java.err" ||
        { cat "$OUT/java.err" >&2; exit 1; }
    done
    bench/hbase-java/disk.sh "$table" >"$OUT/$tag.disk.json"
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$dir" && "$HOURGLASS" bench profile --config "$MIXED" --users-file users.txt --batch 1000 \
      --batches 50 --warmup 5000 --json "$OUT/$tag.mixed.json" >/dev/null 2>"$OUT/$tag.mixed.err")
    (cd "$dir" && "$HOURGLASS" bench profile --config "$MISS" --users-file users.txt --cache-fraction 0 \
      --batch 1000 --batches 30 --warmup 0 --json "$OUT/$tag.miss.json" >/dev/null 2>"$OUT/$tag.miss.err")
    (cd "$dir" && "$HOURGLASS" bench profile --config "$MISS" --users-file users.txt --cache-fraction 0 \
      --reads 5000 --warmup 500 --threads 1 --json "$OUT/$tag.get.json" >/dev/null 2>"$OUT/$tag.get.err")
    load_after=$(cut -d' ' -f1 /proc/loadavg)
    jq -cn --arg layout "$layout" --argjson round "$round" --arg load "$load_before $load_after" \
      --slurpfile disk "$OUT/$tag.disk.json" --slurpfile mixed "$OUT/$tag.mixed.json" \
      --slurpfile miss "$OUT/$tag.miss.json" --slurpfile get "$OUT/$tag.get.json" \
      '{round: $round, layout: $layout, bytes: $disk[0].bytes, mixed: $mixed[0], miss: $miss[0], get: $get[0], load: $load}' |
      tee -a "$OUT/results.jsonl"
  done
done
