#!/usr/bin/env bash
# Bytes on disk of HBase tables after a flush and a major compaction (issue 38: HBase's bytes
# per reading with and without a data block encoding).
#
#   bench/hbase-java/disk.sh ts_metric ts_metric_hourly ts_room_latest
#
# `HbaseJava compact` flushes each table's memstores, asks for a major compaction and waits
# until the master reports none running, table after table; then this script waits until every store
# (region × family directory) holds at most one file, since HBase moves the files a compaction
# replaced to the archive only when its discharger chore runs (every 2 min by default), and
# sums the sizes of the store files: the regular files directly in
# `$HBASE_DATA/<table>/<region>/<family>/`. Not counted: `.regioninfo`, `recovered.edits`
# (empty sequence-id markers), `.tmp`, the archive, the WAL (HBase's own directories, not the table's data). Prints one JSON
# line per table: {"table", "bytes", "files", "regions", "flush_compact_s"}.
#
# Knobs: HBASE_DATA (default .services/hbase/data/hbase/data/default under the checkout that
# started the services: scripts/services.sh keeps HBase's root dir there), ZK (HBase's
# ZooKeeper, 127.0.0.1:2181), WAIT_SECS (600: how long to wait for one file per store).
# Needs java 17 and mvn (the Java client is built here if it is not yet).
set -euo pipefail
case "${1:-}" in
  "" | -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
root=$PWD
HBASE_DATA=${HBASE_DATA:-$root/.services/hbase/data/hbase/data/default}
ZK=${ZK:-127.0.0.1:2181}
WAIT_SECS=${WAIT_SECS:-600}
[ -d "$HBASE_DATA" ] || { echo "no HBase data directory at $HBASE_DATA: set HBASE_DATA" >&2; exit 1; }
if [ ! -d bench/hbase-java/target/lib ]; then
  (cd bench/hbase-java && mvn -q -B -Dstyle.color=never package -DskipTests dependency:copy-dependencies -DoutputDirectory=target/lib)
fi
java_cmd=(java -Dzk="$ZK" -cp "$root/bench/hbase-java/target/classes:$root/bench/hbase-java/target/lib/*" hourglass.bench.hbase.HbaseJava)

# The store files of a table, one per line: size, then path (./<region>/<family>/<file>).
store_files() {
  (cd "$HBASE_DATA/$1" && find . -mindepth 3 -maxdepth 3 -type f -not -path '*/.*' \
    -not -path '*/recovered.edits/*' -printf '%s %p\n')
}

for table in "$@"; do
  [ -d "$HBASE_DATA/$table" ] || { echo "table $table has no directory under $HBASE_DATA" >&2; exit 1; }
done
compacted=$("${java_cmd[@]}" compact "$@" 2>/tmp/disk-sh-java.err) || { cat /tmp/disk-sh-java.err >&2; exit 1; }
for table in "$@"; do
  secs=$(jq -r --arg t "$table" 'select(.table == $t) | .flush_compact_s' <<<"$compacted")
  waited=0
  while :; do
    # A store with two files or more still holds files the compaction replaced.
    crowded=$(store_files "$table" | awk '{ n = split($2, p, "/"); d = p[n-2] "/" p[n-1]; c[d]++ } END { for (d in c) if (c[d] > 1) k++; print k + 0 }')
    [ "$crowded" -eq 0 ] && break
    if [ "$waited" -ge "$WAIT_SECS" ]; then
      echo "$table: $crowded stores still hold several files after ${WAIT_SECS}s" >&2
      exit 1
    fi
    sleep 5
    waited=$((waited + 5))
  done
  store_files "$table" | awk -v t="$table" -v s="$secs" '
    { bytes += $1; files++; n = split($2, p, "/"); r[p[n-2]] = 1 }
    END { for (x in r) regions++; printf "{\"table\":\"%s\",\"bytes\":%d,\"files\":%d,\"regions\":%d,\"flush_compact_s\":%s}\n", t, bytes, files, regions + 0, s }'
done
