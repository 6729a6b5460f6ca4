#!/usr/bin/env bash
# hourglass vs the Java HBase client on the same recordings (issue 11, item 1):
# `hourglass replay --hbase` (writes through the Thrift2 gateway) and bench/hbase-java's
# BufferedMutator writer of the same rows, run interleaved on one file per size, the three
# tables truncated (splits kept) before each run, each writer under /usr/bin/time -v.
#
#   bench/hbase-java/run.sh            # or: make bench-hbase-java
#   SIZES=10000:10m bench/hbase-java/run.sh
#
# Knobs: ROUNDS (2 runs of each per size), SIZES ("10000:10m 100000:2m 500:25h",
# devices:duration), WORKERS (2 hourglass workers), BUFFER_MB (8, the Java write buffer), HBASE
# (127.0.0.1:9090, Thrift1), ZK (127.0.0.1:2181, HBase's ZooKeeper, for the Java client), DIGEST
# (1: digest the tables after every run; both writers must leave the same one), HOURGLASS_ARGS
# (extra arguments of `hourglass replay`, e.g. "--config big-calls.toml"), HOURGLASS (the
# binary; default: built here with cargo), BENCH_DIR (a fresh /tmp directory, removed at the end
# unless given). Needs java 17, mvn, jq and HBase from scripts/services.sh.
# It EMPTIES ts_metric, ts_metric_hourly and ts_room_latest of that HBase: use it on a dev HBase.
#
# Time: a recording starts 1 h before the current hour minus its own length, so its newest
# reading is in the past (no `future` refusals) and every cell is well inside the 90-day TTL.
# No run uses --rebase-time: it shifts by whole hours counted from the wall clock at the start of
# each run, so two runs on either side of an hour boundary would write different timestamps and
# their tables could not be compared.
#
# CPU: the writer's from /usr/bin/time (user + sys), the HBase JVM's (HMaster + RegionServer in
# one standalone JVM) and the Thrift2 (hourglass's writes) and Thrift1 gateways' from
# /proc/<pid>/stat (utime + stime) before and
# after the writer runs; the JVMs' work that continues after a writer exits (memstore flushes,
# compactions) is not counted for it, nor the digest's scan.
#
# Prints, per run, wall time, readings/s, the CPU seconds of writer, HBase and gateway, the
# digest and /proc/loadavg before and after; then per size the medians, the ratios
# hourglass ÷ Java of readings/s and of HBase CPU seconds per million readings, and whether
# every run left the same tables (a difference is a bug in one writer).
set -euo pipefail
# Knobs are environment variables; an argument is a mistake, not a reason to start (this
# script's runs take minutes, and the Java one empties HBase tables).
case "${1:-}" in
  "") ;;
  -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
  *) echo "$0 takes no arguments (knobs are environment variables: see $0 --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
root=$PWD
ROUNDS=${ROUNDS:-2}
SIZES=${SIZES:-"10000:10m 100000:2m 500:25h"}
WORKERS=${WORKERS:-2}
BUFFER_MB=${BUFFER_MB:-8}
HBASE=${HBASE:-127.0.0.1:9090}
ZK=${ZK:-127.0.0.1:2181}
DIGEST=${DIGEST:-1}
for tool in java mvn jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: install it (Java 17, Maven 3.8, jq)" >&2; exit 1; }
done

# The pid of a JVM scripts/services.sh started, by the marker it gives it (-Dhourglass.service=).
service_pid() {
  local name=$1 f
  for f in /proc/[0-9]*/cmdline; do
    if tr '\0' '\n' <"$f" 2>/dev/null | grep -qx -- "-Dhourglass.service=$name"; then
      f=${f#/proc/}
      echo "${f%/cmdline}"
      return 0
    fi
  done
  return 1
}
hbase_pid=${HBASE_PID:-$(service_pid hbase-master)} ||
  { echo "no HBase JVM found: start it with scripts/services.sh up hbase (or set HBASE_PID)" >&2; exit 1; }
thrift_pid=${THRIFT_PID:-$(service_pid hbase-thrift1)} ||
  { echo "no Thrift1 gateway found: start it with scripts/services.sh up hbase (or set THRIFT_PID)" >&2; exit 1; }
# hourglass writes through the Thrift2 gateway (putMultiple) and reads through Thrift1.
thrift2_pid=${THRIFT2_PID:-$(service_pid hbase-thrift2)} ||
  { echo "no Thrift2 gateway found: start it with scripts/services.sh up hbase (or set THRIFT2_PID)" >&2; exit 1; }
# The region server's own counters (JMX over the master's info port; standalone HBase runs the
# region server in the master's JVM): multi RPCs, WAL appends and syncs, all counted since the
# server started (per-region counters restart when a truncate recreates the regions).
JMX=${JMX:-http://127.0.0.1:16010/jmx}
rs_counters() {
  { curl -fsS "$JMX?qry=Hadoop:service=HBase,name=RegionServer,sub=Server" 
    curl -fsS "$JMX?qry=Hadoop:service=HBase,name=RegionServer,sub=WAL"; } |
    jq -s '{multi: .[0].beans[0].rpcMultiRequestCount,
      wal_appends: .[1].beans[0].appendCount, wal_syncs: .[1].beans[0].SyncTime_num_ops}'
}
ticks=$(getconf CLK_TCK)
# CPU seconds (utime + stime) of a process so far; fields counted after the ")" ending its name.
cpu_s() {
  awk -v t="$ticks" '{ sub(/.*\) /, ""); split($0, f, " "); printf "%.2f\n", (f[12] + f[13]) / t }' "/proc/$1/stat"
}

if [[ -n "${BENCH_DIR:-}" ]]; then
  work=$BENCH_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/hourglass-hbase-java.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi

if [[ -n "${HOURGLASS:-}" ]]; then
  hg=$HOURGLASS
else
  cargo build --release --locked -q -p hourglass-jobs
  hg=${CARGO_TARGET_DIR:-$root/target}/release/hourglass
fi
(cd bench/hbase-java && mvn -q -B -Dstyle.color=never package -DskipTests dependency:copy-dependencies -DoutputDirectory=target/lib)
java_cmd=(java -Dzk="$ZK" -Dbuffer.mb="$BUFFER_MB" -cp "$root/bench/hbase-java/target/classes:$root/bench/hbase-java/target/lib/*" hourglass.bench.hbase.HbaseJava)

"$hg" tables create --hbase "$HBASE" >/dev/null

# Seconds in a duration such as 10m, 25h, 1h30m.
duration_s() {
  local rest=$1 total=0 n unit
  while [[ $rest =~ ^([0-9]+)([smhd])(.*)$ ]]; do
    n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} rest=${BASH_REMATCH[3]}
    case $unit in s) total=$((total + n)) ;; m) total=$((total + n * 60)) ;; h) total=$((total + n * 3600)) ;; d) total=$((total + n * 86400)) ;; esac
  done
  [[ -z $rest ]] || { echo "duration $1: use a sum of Ns, Nm, Nh, Nd" >&2; exit 1; }
  echo "$total"
}

# Runs one writer on one recording into emptied tables: appends a JSON line to results.jsonl.
# The digest covers cells stamped from the recording's start to its last hour's end: another
# run writing into the same HBase meanwhile (`hourglass bench replay --hbase` rebases to the
# current hour) stays out of it, though not out of the HBase CPU seconds.
run_one() {
  local system=$1 size=$2 file=$3 round=$4 from_ms=$5 to_ms=$6
  local timing=$work/time.txt counters=$work/counters.json load_before load_after
  "${java_cmd[@]}" truncate 2>"$work/java.err" || { cat "$work/java.err" >&2; exit 1; }
  sleep 2
  local hb0 th0 hb1 th1 digest='null'
  hb0=$(cpu_s "$hbase_pid") th0=$(cpu_s "$thrift_pid") t20=$(cpu_s "$thrift2_pid")
  rs0=$(rs_counters)
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  case "$system" in
    hourglass)
      /usr/bin/time -v -o "$timing" "$hg" replay "$file" --hbase "$HBASE" \
        --workers "$WORKERS" --quiet --stats-json "$counters" \
        --dead-letter "$work/dead-letters.jsonl" --late-output "$work/late.jsonl" ${HOURGLASS_ARGS:-} \
        2>"$work/hourglass.err" || { cat "$work/hourglass.err" >&2; exit 1; }
      rm -f "$work/dead-letters.jsonl" "$work/late.jsonl"
      ;;
    java)
      /usr/bin/time -v -o "$timing" "${java_cmd[@]}" write "$file" >"$counters" \
        2>"$work/java.err" || { cat "$work/java.err" >&2; exit 1; }
      ;;
  esac
  hb1=$(cpu_s "$hbase_pid") th1=$(cpu_s "$thrift_pid") t21=$(cpu_s "$thrift2_pid")
  rs1=$(rs_counters)
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  if [[ "$DIGEST" == 1 ]]; then
    digest=$("${java_cmd[@]}" digest "$from_ms" "$to_ms" 2>"$work/java.err") || { cat "$work/java.err" >&2; exit 1; }
  fi
  local wall user sys
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0;
    for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$timing")
  user=$(awk -F': ' '/User time/ {print $2}' "$timing")
  sys=$(awk -F': ' '/System time/ {print $2}' "$timing")
  jq -c --arg system "$system" --arg size "$size" --argjson round "$round" \
    --argjson wall "$wall" --argjson cpu "$(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}')" \
    --argjson hbase "$(awk -v a="$hb0" -v b="$hb1" 'BEGIN {print b - a}')" \
    --argjson thrift "$(awk -v a="$th0" -v b="$th1" 'BEGIN {print b - a}')" \
    --argjson thrift2 "$(awk -v a="$t20" -v b="$t21" 'BEGIN {print b - a}')" \
    --argjson rs0 "$rs0" --argjson rs1 "$rs1" \
    --arg load_before "$load_before" --arg load_after "$load_after" --argjson digest "$digest" \
    '{system: $system, size: $size, round: $round, wall_s: $wall, writer_cpu_s: ($cpu * 100 | round / 100),
      hbase_cpu_s: ($hbase * 100 | round / 100), thrift_cpu_s: ($thrift * 100 | round / 100),
      thrift2_cpu_s: ($thrift2 * 100 | round / 100),
      region_server: ($rs1 | with_entries(.value = .value - ($rs0[.key] // 0))),
      readings: .read, readings_per_s: (.read / $wall | floor),
      hbase_cpu_s_per_m: ($hbase / .read * 1e6 * 10 | round / 10),
      load_before: $load_before, load_after: $load_after,
      counts: {read, ok, rejected, late_dropped, narrow_rows},
      digest: (if $digest then $digest.all else null end),
      tables: (if $digest then ($digest | del(.all) | map_values({rows, cells, sha256: .sha256[0:16]})) else null end)}' \
    "$counters" | tee -a "$work/results.jsonl"
}

: >"$work/results.jsonl"
hour_now=$(($(date +%s) / 3600 * 3600))
for size in $SIZES; do
  devices=${size%%:*} duration=${size#*:}
  secs=$(duration_s "$duration")
  start=$((hour_now - 3600 - (secs + 3599) / 3600 * 3600))
  file=$work/$devices-$duration.jsonl
  echo "== $devices devices x $duration: hourglass generate --devices $devices --duration $duration --start $start"
  "$hg" generate --devices "$devices" --duration "$duration" --start "$start" --out "$file" 2>&1 | tail -1
  for round in $(seq "$ROUNDS"); do
    run_one hourglass "$size" "$file" "$round" "$((start * 1000))" "$(((start + secs + 3599) / 3600 * 3600 * 1000))"
    run_one java "$size" "$file" "$round" "$((start * 1000))" "$(((start + secs + 3599) / 3600 * 3600 * 1000))"
  done
  rm -f "$file"
done
"${java_cmd[@]}" truncate 2>/dev/null

echo
echo "== summary: medians over $ROUNDS rounds; readings/s = lines / writer process wall time;"
echo "   CPU s of the writer process, the HBase JVM (HMaster + RegionServer) and the Thrift gateways"
status=0
for size in $SIZES; do
  jq -rs --arg s "$size" '
    def median: sort | if length % 2 == 1 then .[length / 2 | floor]
      else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    def r1: . * 10 | round / 10;
    def r2: . * 100 | round / 100;
    map(select(.size == $s)) as $runs
    | ($runs | map(select(.system == "hourglass"))) as $h
    | ($runs | map(select(.system == "java"))) as $j
    | ($h | map(.readings_per_s) | median) as $hr | ($j | map(.readings_per_s) | median) as $jr
    | ($h | map(.hbase_cpu_s_per_m) | median) as $hm | ($j | map(.hbase_cpu_s_per_m) | median) as $jm
    | "\($s): hourglass \($hr | floor) readings/s, Java \($jr | floor) readings/s, hourglass ÷ Java \($hr / $jr | r2)\n"
      + "  CPU s: hourglass \($h | map(.writer_cpu_s) | median | r1) + HBase \($h | map(.hbase_cpu_s) | median | r1) + Thrift2 \($h | map(.thrift2_cpu_s) | median | r1) + Thrift1 \($h | map(.thrift_cpu_s) | median | r1); "
      + "Java \($j | map(.writer_cpu_s) | median | r1) + HBase \($j | map(.hbase_cpu_s) | median | r1)\n"
      + "  region server: multi RPCs hourglass \($h | map(.region_server.multi) | median), Java \($j | map(.region_server.multi) | median); "
      + "WAL appends \($h | map(.region_server.wal_appends) | median) vs \($j | map(.region_server.wal_appends) | median); "
      + "WAL syncs \($h | map(.region_server.wal_syncs) | median) vs \($j | map(.region_server.wal_syncs) | median)\n"
      + "  HBase CPU s per million readings: hourglass \($hm | r1), Java \($jm | r1), hourglass ÷ Java \($hm / $jm | r2)\n"
      + "  load average (1 min) seen \($runs | map(.load_before, .load_after | split(" ")[0] | tonumber) | min)–"
      + "\($runs | map(.load_before, .load_after | split(" ")[0] | tonumber) | max)"' "$work/results.jsonl"
  if [[ "$DIGEST" == 1 ]]; then
    digests=$(jq -r --arg s "$size" 'select(.size == $s) | .digest' "$work/results.jsonl" | sort -u)
    if [[ $(wc -l <<<"$digests") == 1 ]]; then
      echo "  tables byte-identical after every run: $(jq -c --arg s "$size" 'select(.size == $s) | .tables' "$work/results.jsonl" | head -1), digest ${digests:0:16}"
    else
      echo "  TABLES DIFFER between runs: a bug in one writer, or another writer on the same HBase meanwhile"
      jq -r --arg s "$size" 'select(.size == $s) | "    \(.system) round \(.round): \(.tables | tostring)"' "$work/results.jsonl"
      status=1
    fi
  fi
done
[[ -z "${BENCH_DIR:-}" ]] || echo "results: $work/results.jsonl"
exit "$status"
