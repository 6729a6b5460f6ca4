#!/usr/bin/env bash
# hourglass's profile job vs its Java peer on the same tag events (issue 36, Performance):
# `hourglass profile replay FILE --hbase` (writes through the Thrift2 gateway) and
# bench/profile-java's ProfileJava (the seed's consumer: per-user merge, 500 users or 5 s per
# flush, one put per user, BufferedMutator), run interleaved on one generated file, the two
# profile tables truncated (splits kept) before each run, each writer under /usr/bin/time -v.
#
#   bench/profile-java/run.sh                          # or: make bench-profile-java
#   bench/profile-java/run.sh --users 20000 --events 200000 --rounds 2
#   bench/profile-java/run.sh --events-file ev.jsonl --registry-file tags.csv
#
# Flags: --users N (1000000) and --events N (20000000): what `hourglass profile generate` writes;
# --bad-ratio R (0: every event good; e.g. 0.01 to exercise the refusals in both);
# --events-file FILE and --registry-file FILE: take these instead of generating (the registry
# CSV of `hourglass profile generate --registry-out`; events more than an hour ahead of the wall
# clock are refused by both); --rounds N (2 runs of each); --workers N (2 hourglass workers);
# --buffer-mb N (8, the Java write buffer); --hbase HOST:PORT (127.0.0.1:9090, Thrift1);
# --zk HOST:PORT (127.0.0.1:2181, HBase's ZooKeeper, for the Java client); --redis URL (give
# hourglass Redis for the short-term tags; default its embedded SQLite fallback, in the work
# directory); --dir DIR (keep the files and results there; default a fresh /tmp directory,
# removed at the end). Environment: HOURGLASS (the binary; default: built here with cargo),
# HBASE_PID, THRIFT_PID, THRIFT2_PID (default: found by scripts/services.sh's markers).
# Needs java 17, mvn, jq and HBase from scripts/services.sh.
# It EMPTIES user_profile_tag and user_tag_history of that HBase: use it on a dev HBase.
#
# The events start two hours before the current hour minus their span (one day), so that none
# is ahead of the wall clock; cell timestamps are event times, so every run writes the same
# cells whenever it runs.
#
# What differs between the two on purpose: hourglass writes the short-term tags to Redis or its
# embedded store; the peer counts them and writes them nowhere (they never go to HBase). Its
# registry is the CSV read once; hourglass reads its SQLite registry at every flush.
#
# CPU: the writer's from /usr/bin/time (user + sys); the HBase JVM's (HMaster + RegionServer in
# one standalone JVM) and the Thrift gateways' from /proc/<pid>/stat (utime + stime) before and
# after the writer runs; the JVMs' work that continues after a writer exits (memstore flushes,
# compactions) is not counted for it, nor the digest's scan.
#
# Tables: after each run, ProfileJava digest scans both tables: the SHA-256 of the newest
# version of every column (what a Get returns) must be the same after every run of both. The
# older versions `behavior` keeps (VERSIONS 3) are digested too and shown, not compared: which
# ones exist depends on where each system's flushes fell (a flush writes only the newest value
# of a tag it holds, and 5 s flushes follow the clock), for hourglass from one run to the next
# as well.
#
# Prints, per run, wall time, events/s, the CPU seconds of writer, HBase and gateways, counts,
# digests and /proc/loadavg before and after; then the medians, the ratios hourglass ÷ Java of
# events/s and of HBase CPU seconds per million events, and whether the tables matched.
set -euo pipefail
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; }
USERS=1000000
EVENTS=20000000
BAD_RATIO=0
EVENTS_FILE=
REGISTRY_FILE=
ROUNDS=2
WORKERS=2
BUFFER_MB=8
HBASE=127.0.0.1:9090
ZK=127.0.0.1:2181
REDIS=
DIR=
while [[ $# -gt 0 ]]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [[ $# -ge 2 ]] || { echo "$1 needs a value (see $0 --help)" >&2; exit 2; }
  case "$1" in
    --users) USERS=$2 ;;
    --events) EVENTS=$2 ;;
    --bad-ratio) BAD_RATIO=$2 ;;
    --events-file) EVENTS_FILE=$(realpath "$2") ;;
    --registry-file) REGISTRY_FILE=$(realpath "$2") ;;
    --rounds) ROUNDS=$2 ;;
    --workers) WORKERS=$2 ;;
    --buffer-mb) BUFFER_MB=$2 ;;
    --hbase) HBASE=$2 ;;
    --zk) ZK=$2 ;;
    --redis) REDIS=$2 ;;
    --dir) DIR=$(realpath -m "$2") ;;
    *) echo "unknown argument $1 (see $0 --help)" >&2; exit 2 ;;
  esac
  shift 2
done
if [[ -n $EVENTS_FILE || -n $REGISTRY_FILE ]] && [[ -z $EVENTS_FILE || -z $REGISTRY_FILE ]]; then
  echo "--events-file and --registry-file go together" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
root=$PWD
for tool in java mvn jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: install it (Java 17, Maven 3.8, jq)" >&2; exit 1; }
done

# The pid of a JVM scripts/services.sh started, by the marker it gives it (-Dhourglass.service=).
service_pid() {
  local name=$1 f
  for f in /proc/[0-9]*/cmdline; do
    # stderr first: a process that exits meanwhile takes its cmdline with it.
    if tr '\0' '\n' 2>/dev/null <"$f" | grep -qx -- "-Dhourglass.service=$name"; then
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
# hourglass writes through the Thrift2 gateway and reads through Thrift1.
thrift2_pid=${THRIFT2_PID:-$(service_pid hbase-thrift2)} ||
  { echo "no Thrift2 gateway found: start it with scripts/services.sh up hbase (or set THRIFT2_PID)" >&2; exit 1; }
# The region server's own counters (JMX over the master's info port; standalone HBase runs the
# region server in the master's JVM): multi RPCs, WAL appends and syncs, since it started.
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

if [[ -n $DIR ]]; then
  work=$DIR
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/hourglass-profile-java.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi

if [[ -n "${HOURGLASS:-}" ]]; then
  hg=$HOURGLASS
else
  cargo build --release --locked -q -p hourglass-jobs
  hg=${CARGO_TARGET_DIR:-$root/target}/release/hourglass
fi
(cd bench/profile-java && mvn -q -B -Dstyle.color=never package -DskipTests dependency:copy-dependencies -DoutputDirectory=target/lib)
java_cmd=(java -Dzk="$ZK" -Dbuffer.mb="$BUFFER_MB" -cp "$root/bench/profile-java/target/classes:$root/bench/profile-java/target/lib/*" hourglass.bench.profile.ProfileJava)

if [[ -n $EVENTS_FILE ]]; then
  events=$EVENTS_FILE registry=$REGISTRY_FILE
  size="$(basename "$events")"
else
  events=$work/events-$USERS-$EVENTS.jsonl registry=$work/tags.csv
  size="${USERS}x${EVENTS}"
  span=86400
  start=$(($(date +%s) / 3600 * 3600 - 7200 - span))
  echo "== hourglass profile generate --users $USERS --events $EVENTS --start $start --span $span --bad-ratio $BAD_RATIO"
  "$hg" profile generate --users "$USERS" --events "$EVENTS" --start "$start" --span "$span" \
    --bad-ratio "$BAD_RATIO" --out "$events" --registry-out "$registry" 2>&1 | tail -1
fi

# hourglass's job config: its registry (imported from the CSV) and short-term store here.
{
  echo "[registry]"
  echo "url = \"sqlite://$work/tags.sqlite\""
  echo "[short_term]"
  echo "path = \"$work/short-term.sqlite\""
  if [[ -n $REDIS ]]; then
    echo "[redis]"
    echo "url = \"$REDIS\""
  fi
} >"$work/job.toml"
rm -f "$work/tags.sqlite"
"$hg" tags import "$registry" --config "$work/job.toml" >/dev/null
"$hg" tables create --hbase "$HBASE" >/dev/null

# Runs one writer on the events into emptied tables: appends a JSON line to results.jsonl.
run_one() {
  local system=$1 round=$2
  local timing=$work/time.txt counters=$work/counters.json load_before load_after
  "${java_cmd[@]}" truncate 2>"$work/java.err" || { cat "$work/java.err" >&2; exit 1; }
  rm -f "$work/short-term.sqlite"*
  sleep 2
  local hb0 th0 t20 hb1 th1 t21 rs0 rs1 digest
  hb0=$(cpu_s "$hbase_pid") th0=$(cpu_s "$thrift_pid") t20=$(cpu_s "$thrift2_pid")
  rs0=$(rs_counters)
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  case "$system" in
    hourglass)
      /usr/bin/time -v -o "$timing" "$hg" profile replay "$events" --config "$work/job.toml" \
        --hbase "$HBASE" --workers "$WORKERS" --quiet --stats-json "$counters" \
        --dead-letter "$work/dead-letters.jsonl" --late-output "$work/late.jsonl" \
        2>"$work/hourglass.err" || { cat "$work/hourglass.err" >&2; exit 1; }
      rm -f "$work/dead-letters.jsonl" "$work/late.jsonl"
      ;;
    java)
      /usr/bin/time -v -o "$timing" "${java_cmd[@]}" write "$events" "$registry" >"$counters" \
        2>"$work/java.err" || { cat "$work/java.err" >&2; exit 1; }
      ;;
  esac
  hb1=$(cpu_s "$hbase_pid") th1=$(cpu_s "$thrift_pid") t21=$(cpu_s "$thrift2_pid")
  rs1=$(rs_counters)
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  digest=$("${java_cmd[@]}" digest 2>"$work/java.err") || { cat "$work/java.err" >&2; exit 1; }
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
      events: .read, events_per_s: (.read / $wall | floor),
      inner_events_per_s: (.read / (.wall_s // .elapsed_s) | floor),
      hbase_cpu_s_per_m: ($hbase / .read * 1e6 * 10 | round / 10),
      load_before: $load_before, load_after: $load_after,
      counts: {read, ok, rejected, tags_rejected, flushes, users_flushed, tags_written, history_rows},
      digest: $digest.all,
      tables: ($digest | del(.all) | map_values({rows, cells, sha256: .sha256[0:16],
        version_cells, versions_sha256: .versions_sha256[0:16]}))}' \
    "$counters" | tee -a "$work/results.jsonl"
}

: >"$work/results.jsonl"
for round in $(seq "$ROUNDS"); do
  run_one hourglass "$round"
  run_one java "$round"
done
"${java_cmd[@]}" truncate 2>/dev/null

echo
echo "== summary ($size): medians over $ROUNDS rounds; events/s = lines / writer process wall time;"
echo "   CPU s of the writer process, the HBase JVM (HMaster + RegionServer) and the Thrift gateways"
jq -rs '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
    else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r1: . * 10 | round / 10;
  def r2: . * 100 | round / 100;
  (map(select(.system == "hourglass"))) as $h
  | (map(select(.system == "java"))) as $j
  | ($h | map(.events_per_s) | median) as $hr | ($j | map(.events_per_s) | median) as $jr
  | ($h | map(.hbase_cpu_s_per_m) | median) as $hm | ($j | map(.hbase_cpu_s_per_m) | median) as $jm
  | ($h | map(.inner_events_per_s) | median) as $hi | ($j | map(.inner_events_per_s) | median) as $ji
  | "events/s: hourglass \($hr | floor), Java \($jr | floor), hourglass ÷ Java \($hr / $jr | r2) (goal >= 2)\n"
    + "  as each writer times its own run (no JVM start, connection set-up or shutdown): hourglass \($hi | floor), Java \($ji | floor), ÷ \($hi / $ji | r2)\n"
    + "CPU s: hourglass \($h | map(.writer_cpu_s) | median | r1) + HBase \($h | map(.hbase_cpu_s) | median | r1) + Thrift2 \($h | map(.thrift2_cpu_s) | median | r1) + Thrift1 \($h | map(.thrift_cpu_s) | median | r1); "
    + "Java \($j | map(.writer_cpu_s) | median | r1) + HBase \($j | map(.hbase_cpu_s) | median | r1)\n"
    + "HBase CPU s per million events: hourglass \($hm | r1), Java \($jm | r1), hourglass ÷ Java \($hm / $jm | r2) (goal <= 1)\n"
    + "region server: multi RPCs hourglass \($h | map(.region_server.multi) | median), Java \($j | map(.region_server.multi) | median); "
    + "WAL appends \($h | map(.region_server.wal_appends) | median) vs \($j | map(.region_server.wal_appends) | median); "
    + "WAL syncs \($h | map(.region_server.wal_syncs) | median) vs \($j | map(.region_server.wal_syncs) | median)\n"
    + "counts: hourglass \($h[0].counts | tostring)\n        Java      \($j[0].counts | tostring)\n"
    + "load average (1 min) seen \(map(.load_before, .load_after | split(" ")[0] | tonumber) | min)–"
    + "\(map(.load_before, .load_after | split(" ")[0] | tonumber) | max)"' "$work/results.jsonl"
status=0
digests=$(jq -r '.digest' "$work/results.jsonl" | sort -u)
if [[ $(wc -l <<<"$digests") == 1 ]]; then
  echo "tables byte-identical (newest version of every column) after every run: $(jq -c '.tables | map_values({rows, cells, sha256})' "$work/results.jsonl" | head -1), digest ${digests:0:16}"
else
  echo "TABLES DIFFER between runs: a bug in one writer, or another writer on the same HBase meanwhile"
  jq -r '"  \(.system) round \(.round): \(.tables | map_values({rows, cells, sha256}) | tostring)"' "$work/results.jsonl"
  status=1
fi
echo "older versions of behavior (shown, not compared): $(jq -r '"\(.system) \(.round): \(.tables.user_profile_tag.version_cells) cells \(.tables.user_profile_tag.versions_sha256)"' "$work/results.jsonl" | paste -sd ';' | sed 's/;/; /g')"
[[ -z $DIR ]] || echo "results: $work/results.jsonl"
exit "$status"
