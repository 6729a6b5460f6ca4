#!/usr/bin/env bash
# hourglass vs Flink on the same recordings (issue 10, item 3): `hourglass replay` into the
# embedded store and the Flink 2.3 peer job (bench/flink, counting sinks: Flink stores nothing),
# run interleaved on one file per size, each under /usr/bin/time -v.
#
#   bench/flink/run.sh            # or: make bench-flink
#
# Knobs: ROUNDS (2 runs of each per size), SIZES ("10000:1h 100000:10m", devices:duration),
# WORKERS (2: hourglass workers and Flink parallelism), BENCH_DIR (a fresh /tmp directory,
# removed at the end unless given), CHECK (1: first compare the counts of both on a small
# recording with late, malformed and duplicate lines; Flink at parallelism 1 there, see below).
# Needs java 17, mvn, jq.
#
# Lateness at parallelism 2: Flink's window sees the minimum of the watermarks of its two input
# channels, which lags the file's by the data in flight, so Flink accepts a few readings that
# arrive a little (seconds of event time) beyond the allowed lateness and that hourglass drops
# (its watermark is the file position's). With parallelism 1 the counts agree exactly; the
# check uses it. On clean recordings (no late lines) the counts agree at any parallelism.
#
# Prints, per run, wall time, readings/s, CPU seconds, peak RSS and /proc/loadavg before and
# after; then per size the medians, the ratio hourglass ÷ Flink of readings/s and of CPU
# seconds, and both systems' counts (a mismatch is a bug in one of them).
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
SIZES=${SIZES:-"10000:1h 100000:10m"}
WORKERS=${WORKERS:-2}
CHECK=${CHECK:-1}
for tool in java mvn jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: install it (Java 17, Maven 3.8, jq)" >&2; exit 1; }
done

if [[ -n "${BENCH_DIR:-}" ]]; then
  work=$BENCH_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/hourglass-flink.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi

target=${CARGO_TARGET_DIR:-$root/target}
cargo build --release --locked -q -p hourglass-jobs
hg=$target/release/hourglass
(cd bench/flink && mvn -q -B -Dstyle.color=never package -DskipTests dependency:copy-dependencies -DoutputDirectory=target/lib)
flink_cp="$root/bench/flink/target/classes:$root/bench/flink/target/lib/*"

# Runs one system on one recording: appends a JSON result line to $work/results.jsonl.
run_one() {
  local system=$1 size=$2 file=$3 round=$4 parallelism=${5:-$WORKERS}
  local timing=$work/time.txt counters=$work/counters.json load_before load_after
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  case "$system" in
    hourglass)
      rm -rf "$work/store"
      /usr/bin/time -v -o "$timing" "$hg" replay "$file" --store "$work/store" \
        --workers "$WORKERS" --quiet --stats-json "$counters" \
        --dead-letter "$work/dead-letters.jsonl" --late-output "$work/late.jsonl" \
        2>"$work/hourglass.err" || { cat "$work/hourglass.err" >&2; exit 1; }
      rm -rf "$work/store" "$work/dead-letters.jsonl" "$work/late.jsonl"
      ;;
    flink)
      /usr/bin/time -v -o "$timing" java -cp "$flink_cp" hourglass.bench.FlinkReplay \
        "$file" "$parallelism" >"$counters"
      ;;
  esac
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  local wall user sys rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0;
    for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$timing")
  user=$(awk -F': ' '/User time/ {print $2}' "$timing")
  sys=$(awk -F': ' '/System time/ {print $2}' "$timing")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$timing")
  jq -c --arg system "$system" --arg size "$size" --argjson round "$round" \
    --argjson wall "$wall" --argjson cpu "$(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}')" --argjson rss_kb "$rss" \
    --arg load_before "$load_before" --arg load_after "$load_after" \
    '{system: $system, size: $size, round: $round, wall_s: $wall, cpu_s: $cpu,
      readings_per_s: (.read / $wall | floor), peak_rss_mb: ($rss_kb / 1024 | floor),
      load_before: $load_before, load_after: $load_after,
      counts: {read, ok, rejected, late_dropped, narrow_rows, wide_cells}}
     + (if .panes_early then {panes: {early: .panes_early, on_time: .panes_on_time,
        late: .panes_late}} else {} end)' "$counters" | tee -a "$work/results.jsonl"
}

# Both systems' counts on one size; returns 1 when they differ.
compare_counts() {
  local size=$1 hg_counts flink_counts
  hg_counts=$(jq -c --arg s "$size" 'select(.size == $s and .system == "hourglass") | .counts' "$work/results.jsonl" | sort -u)
  flink_counts=$(jq -c --arg s "$size" 'select(.size == $s and .system == "flink") | .counts' "$work/results.jsonl" | sort -u)
  echo "  hourglass counts: $hg_counts"
  echo "  Flink counts:     $flink_counts"
  jq -c --arg s "$size" 'select(.size == $s and .system == "flink") | .panes' "$work/results.jsonl" \
    | sed 's/^/  Flink panes:      /'
  if [[ "$hg_counts" == "$flink_counts" ]]; then
    echo "  counts agree"
  else
    echo "  COUNTS DIFFER: a bug in one of them"
    return 1
  fi
}

: >"$work/results.jsonl"
start=$(($(date +%s) / 3600 * 3600 - 7200))
status=0
if [[ "$CHECK" == 1 ]]; then
  echo "== count check (Flink at parallelism 1): 1000 devices x 3 h, 2% late, 1% malformed, 1% duplicate lines"
  "$hg" generate --devices 1000 --duration 3h --start "$((start - 3600))" --late-rate 0.02 \
    --malformed-rate 0.01 --duplicate-rate 0.01 --out "$work/check.jsonl" 2>/dev/null
  run_one hourglass check "$work/check.jsonl" 1 >/dev/null
  run_one flink check "$work/check.jsonl" 1 1 >/dev/null
  compare_counts check || status=1
  rm -f "$work/check.jsonl"
fi

for size in $SIZES; do
  devices=${size%%:*} duration=${size#*:}
  file=$work/$devices-$duration.jsonl
  echo "== $devices devices x $duration: hourglass generate --devices $devices --duration $duration --start $start"
  "$hg" generate --devices "$devices" --duration "$duration" --start "$start" --out "$file" 2>&1 | tail -1
  for round in $(seq "$ROUNDS"); do
    run_one hourglass "$size" "$file" "$round"
    run_one flink "$size" "$file" "$round"
  done
  rm -f "$file"
done

echo
echo "== summary (medians over $ROUNDS rounds; readings/s = lines / process wall time)"
for size in $SIZES; do
  jq -rs --arg s "$size" '
    def median: sort | if length % 2 == 1 then .[length / 2 | floor]
      else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    map(select(.size == $s)) as $runs
    | ($runs | map(select(.system == "hourglass"))) as $h
    | ($runs | map(select(.system == "flink"))) as $f
    | ($h | map(.readings_per_s) | median) as $hr | ($f | map(.readings_per_s) | median) as $fr
    | ($h | map(.cpu_s) | median) as $hc | ($f | map(.cpu_s) | median) as $fc
    | "\($s): hourglass \($hr | floor) readings/s (\($hc * 10 | round / 10) CPU s, peak RSS \($h | map(.peak_rss_mb) | median) MB), "
      + "Flink \($fr | floor) readings/s (\($fc * 10 | round / 10) CPU s, peak RSS \($f | map(.peak_rss_mb) | median) MB); "
      + "hourglass ÷ Flink: readings/s \($hr / $fr * 100 | round / 100), CPU s \($hc / $fc * 100 | round / 100); "
      + "load average (1 min) seen \($runs | map(.load_before, .load_after | split(" ")[0] | tonumber) | min)–"
      + "\($runs | map(.load_before, .load_after | split(" ")[0] | tonumber) | max)"' "$work/results.jsonl"
  compare_counts "$size" || status=1
done
[[ -z "${BENCH_DIR:-}" ]] || echo "results: $work/results.jsonl"
exit "$status"
