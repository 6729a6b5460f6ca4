#!/usr/bin/env bash
# Local services for hourglass development and integration tests:
#
#   * Apache HBase 2.6 standalone (HMaster + RegionServer + in-process ZooKeeper
#     in one JVM, data on the local filesystem) with its two Thrift gateways:
#       Thrift1  127.0.0.1:9090  (org.apache.hadoop.hbase.thrift.ThriftServer)
#       Thrift2  127.0.0.1:9091  (org.apache.hadoop.hbase.thrift2.ThriftServer)
#     both TBinaryProtocol over a plain (unframed, buffered) socket.
#   * Apache Kafka 3.9 in KRaft mode, one combined broker+controller:
#       broker 127.0.0.1:9092, controller 127.0.0.1:9093
#   * MariaDB (Debian's mariadb-server), the tag registry's real backend:
#       127.0.0.1:3306, database `hourglass`, user hourglass / password hourglass
#       (rights on `hourglass` and `hourglass\_*`, for tests' own databases)
#   * Redis (Debian's redis-server), short-term tags: 127.0.0.1:6379
#
# HBase and Kafka come from Maven Central through Maven (services/*/pom.xml); no
# tarballs. MariaDB and Redis are Debian packages: when their binaries are
# missing, `up` installs them with apt-get (as root; it says so). All four run
# as plain processes of this script (no systemd). All state lives in
# <repo>/.services/ (owned by this script):
#   .services/{hbase,kafka}/lib    jars (resolved once, reused)
#   .services/{hbase,kafka}/conf   rendered configuration
#   .services/{hbase,kafka}/data   HBase rootdir + ZooKeeper / Kafka log dirs
#   .services/{hbase,kafka}/logs   logs (*.log from log4j, *.out = stdout/stderr)
#   .services/{hbase,kafka}/pids   pid files of the JVMs started here
#   .services/{mysql,redis}/{conf,data,logs,pids}  the same for MariaDB and Redis
#                                  (MariaDB's data dir is initialised on first up)
#   .services/venv                 Python venv with happybase (readiness checks,
#                                  integration tests)
#
# Usage: scripts/services.sh <command> [hbase|kafka|mysql|redis|all]
#   up [hbase|kafka|mysql|redis|all]
#                              start (or, if running, re-check) and wait until ready
#   down [hbase|kafka|mysql|redis|all]
#                              stop what this script started (graceful, then kill -9)
#   restart [hbase|kafka|thrift|all]
#                              hbase: restart ONLY the HMaster (data kept; the
#                              Thrift gateways keep running and reconnect)
#                              thrift: restart the two Thrift gateways
#   status                     processes, pids, RSS, ports
#   logs [SERVICE|all] [N]     where the logs are + their last N lines (default 20)
#   kafka-tool CLASS [ARGS..]  run a Kafka CLI class with the Kafka jars, e.g.
#                              kafka-tool org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --list
#
# Environment knobs: JAVA_HOME, MVN (default mvn), PYTHON (default python3),
#   HBASE_ZK_PORT (2181), HBASE_UP_TIMEOUT (300 s), KAFKA_UP_TIMEOUT (180 s),
#   STOP_GRACE (60 s before kill -9), HBASE_SHUTDOWN_WAIT (40 s for a clean
#   HBase cluster shutdown before SIGTERM), HBASE_MASTER_HEAP (2g: the
#   standalone JVM is master and region server; at 768m its block cache, 0.2 of
#   the heap, could not hold a day of 500 sensors' hourly rows, and G1 ran
#   concurrent cycles back to back with the old generation 85 % full),
#   HBASE_THRIFT_HEAP (256m), KAFKA_HEAP (512m), MYSQL_UP_TIMEOUT (120 s),
#   REDIS_UP_TIMEOUT (30 s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SVC="$ROOT/.services"
HB="$SVC/hbase"
KF="$SVC/kafka"
MY="$SVC/mysql"
RD="$SVC/redis"
VENV="$SVC/venv"

THRIFT1_PORT=9090
THRIFT2_PORT=9091
THRIFT1_INFO_PORT=9095
THRIFT2_INFO_PORT=9096
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093
HBASE_MASTER_INFO_PORT=16010
ZK_PORT="${HBASE_ZK_PORT:-2181}"
MYSQL_PORT=3306
REDIS_PORT=6379

HBASE_UP_TIMEOUT="${HBASE_UP_TIMEOUT:-300}"
KAFKA_UP_TIMEOUT="${KAFKA_UP_TIMEOUT:-180}"
MYSQL_UP_TIMEOUT="${MYSQL_UP_TIMEOUT:-120}"
REDIS_UP_TIMEOUT="${REDIS_UP_TIMEOUT:-30}"
STOP_GRACE="${STOP_GRACE:-60}"
HBASE_SHUTDOWN_WAIT="${HBASE_SHUTDOWN_WAIT:-40}"
HBASE_MASTER_HEAP="${HBASE_MASTER_HEAP:-2g}"
HBASE_THRIFT_HEAP="${HBASE_THRIFT_HEAP:-256m}"
KAFKA_HEAP="${KAFKA_HEAP:-512m}"
MVN="${MVN:-mvn}"
PYTHON="${PYTHON:-python3}"
HAPPYBASE_REQ="happybase==1.3.0"

say() { printf '[services] %s\n' "$*"; }
warn() { printf '[services] WARNING: %s\n' "$*" >&2; }
die() {
  printf '[services] ERROR: %s\n' "$*" >&2
  exit 1
}

# ---------------------------------------------------------------- java / maven

JAVA=""
find_java() {
  [[ -n "$JAVA" ]] && return 0
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    JAVA="$(command -v java)"
  elif [[ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ]]; then
    JAVA=/usr/lib/jvm/java-17-openjdk-amd64/bin/java
  else
    die "no java found (set JAVA_HOME; Java 11+ needed, 17 recommended)"
  fi
  local v major
  v="$("$JAVA" -version 2>&1 | awk -F '"' '/version/ {print $2; exit}')"
  major="${v%%.*}"
  major="${major%%-*}"
  [[ "$major" =~ ^[0-9]+$ ]] || die "cannot parse java version from '$v' ($JAVA)"
  ((major >= 11)) || die "java $v at $JAVA is too old (need 11+, 17 recommended)"
}

# JVM flags HBase's bin/hbase adds on JDK 11+/17 (HBase and its shaded netty
# reach into JDK internals).
HBASE_JDK_OPTS=(
  -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
  --add-modules jdk.unsupported
  --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/jdk.internal.misc=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED
  --add-opens java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens java.base/java.io=ALL-UNNAMED
  --add-opens java.base/java.net=ALL-UNNAMED
  --add-opens java.base/jdk.internal.util.random=ALL-UNNAMED
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.base/sun.net.dns=ALL-UNNAMED
  --add-exports java.base/sun.net.util=ALL-UNNAMED
  --add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED
)

# ensure_lib NAME POM DEST: resolve the pom's dependencies into DEST, once.
# DEST/.complete holds the pom's sha256; a changed pom triggers a re-resolve.
ensure_lib() {
  local name="$1" pom="$2" dest="$3" stamp
  stamp="$(sha256sum "$pom" | cut -c1-64)"
  if [[ -f "$dest/.complete" && "$(cat "$dest/.complete")" == "$stamp" ]]; then
    return 0
  fi
  command -v "$MVN" >/dev/null 2>&1 || die "maven ('$MVN') not found: needed once to fetch the $name jars"
  local logf="$SVC/$name/logs/mvn.log" t0=$SECONDS
  mkdir -p "$SVC/$name/logs"
  say "$name: resolving jars from Maven Central into ${dest#"$ROOT"/} (first run only)..."
  rm -rf "$dest.tmp"
  mkdir -p "$dest.tmp"
  if ! "$MVN" -q -B -f "$pom" dependency:copy-dependencies \
    -DoutputDirectory="$dest.tmp" >"$logf" 2>&1; then
    tail -n 40 "$logf" >&2 || true
    die "$name: maven failed (full log: $logf)"
  fi
  local n
  n="$(find "$dest.tmp" -maxdepth 1 -name '*.jar' | wc -l)"
  ((n > 10)) || die "$name: maven produced only $n jars (log: $logf)"
  echo "$stamp" >"$dest.tmp/.complete"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
  say "$name: $n jars ready ($((SECONDS - t0))s)"
}

ensure_venv() {
  if [[ -x "$VENV/bin/python" && -f "$VENV/.complete" && "$(cat "$VENV/.complete")" == "$HAPPYBASE_REQ" ]]; then
    return 0
  fi
  command -v "$PYTHON" >/dev/null 2>&1 || die "python ('$PYTHON') not found: needed for the HBase readiness check"
  local t0=$SECONDS logf="$HB/logs/venv.log"
  mkdir -p "$HB/logs"
  say "creating Python venv ${VENV#"$ROOT"/} with $HAPPYBASE_REQ..."
  rm -rf "$VENV"
  if ! { "$PYTHON" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$HAPPYBASE_REQ"; } >"$logf" 2>&1; then
    tail -n 30 "$logf" >&2 || true
    die "could not create the venv (log: $logf)"
  fi
  echo "$HAPPYBASE_REQ" >"$VENV/.complete"
  say "venv ready ($((SECONDS - t0))s)"
}

# render TEMPLATE OUT KEY=VALUE...: replace @KEY@ by VALUE (no sed escaping issues)
render() {
  local tpl="$1" out="$2" content kv
  shift 2
  content="$(<"$tpl")"
  for kv in "$@"; do
    content="${content//@${kv%%=*}@/${kv#*=}}"
  done
  mkdir -p "$(dirname "$out")"
  printf '%s\n' "$content" >"$out.tmp"
  mv "$out.tmp" "$out"
}

# ------------------------------------------------------------ process helpers
# Processes are tracked by pid file AND by a marker argument on their command
# line (JVMs: -Dhourglass.service=NAME; MariaDB and Redis: their config file
# under .services/) so that a recycled pid is never mistaken for ours.

svc_dir() {
  case "$1" in
  hbase-*) echo "$HB" ;;
  kafka) echo "$KF" ;;
  mysql) echo "$MY" ;;
  redis) echo "$RD" ;;
  *) die "internal: unknown process $1" ;;
  esac
}
proc_marker() {
  case "$1" in
  mysql) echo "--defaults-file=$MY/conf/my.cnf" ;;
  redis) echo "$RD/conf/redis.conf" ;;
  *) echo "-Dhourglass.service=$1" ;;
  esac
}
pidfile() { echo "$(svc_dir "$1")/pids/$1.pid"; }

# prints the pid if NAME is running, else nothing (and cleans a stale pid file)
proc_pid() {
  local name="$1" pf pid
  pf="$(pidfile "$name")"
  [[ -f "$pf" ]] || return 0
  pid="$(cat "$pf" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$(proc_marker "$name")"; then
    echo "$pid"
  else
    rm -f "$pf"
  fi
}
is_running() { [[ -n "$(proc_pid "$1")" ]]; }

rss_mb() {
  local kb
  kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || true)"
  [[ -n "$kb" ]] && echo "$((kb / 1024))MB" || echo "?"
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# refuse to start when somebody else holds one of our ports
require_free_ports() {
  local what="$1" p
  shift
  for p in "$@"; do
    if port_open "$p"; then
      die "$what: port 127.0.0.1:$p is already in use by a process this script did not start (see: ss -ltnp | grep :$p)"
    fi
  done
}

# start_java NAME OUTFILE JAVA-ARGS...: background, detached, pid file written; the JVM carries
# its marker as -Dhourglass.service=NAME
start_java() {
  local name="$1" out="$2"
  shift 2
  start_native "$name" "$out" "$JAVA" "-Dhourglass.service=$name" "$@"
}

# start_native NAME OUTFILE CMD...: background, detached, pid file written, for a server whose
# command line carries its marker (proc_marker)
start_native() {
  local name="$1" out="$2" pf pid i
  shift 2
  pf="$(pidfile "$name")"
  mkdir -p "$(dirname "$pf")" "$(dirname "$out")"
  echo "=== $(date '+%F %T') starting $name" >>"$out"
  (cd "$(svc_dir "$name")" && exec setsid "$@" >>"$out" 2>&1 </dev/null) &
  pid=$!
  echo "$pid" >"$pf"
  for ((i = 0; i < 50; i++)); do
    is_running "$name" && return 0
    kill -0 "$pid" 2>/dev/null || break
    echo "$pid" >"$pf"
    sleep 0.1
  done
  tail -n 30 "$out" >&2 || true
  die "$name exited right after start (log: $out)"
}

# stop_proc NAME [GRACE]: SIGTERM, wait, SIGKILL after GRACE seconds
stop_proc() {
  local name="$1" grace="${2:-$STOP_GRACE}" pid i
  pid="$(proc_pid "$name")"
  [[ -n "$pid" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  wait_exit "$name" "$pid" "$grace" || {
    warn "$name (pid $pid) still running after ${grace}s: kill -9"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
  }
  rm -f "$(pidfile "$name")"
}

wait_exit() {
  local name="$1" pid="$2" secs="$3" i
  for ((i = 0; i < secs * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  ! kill -0 "$pid" 2>/dev/null
}

fail_with_log() {
  local msg="$1"
  shift
  local f
  printf '[services] ERROR: %s\n' "$msg" >&2
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    printf '[services] ---- last lines of %s ----\n' "$f" >&2
    tail -n 40 "$f" >&2 || true
  done
  printf '[services] processes started so far are left running for inspection: scripts/services.sh status / down\n' >&2
  exit 1
}

# --------------------------------------------------------------------- HBase

hbase_prepare() {
  find_java
  mkdir -p "$HB"/{logs,pids,data,conf}
  ensure_lib hbase "$ROOT/services/hbase/pom.xml" "$HB/lib"
  ensure_venv
  render "$ROOT/services/hbase/hbase-site.xml" "$HB/conf/hbase-site.xml" \
    "DATA_DIR=$HB/data" "ZK_PORT=$ZK_PORT"
  cp "$ROOT/services/hbase/log4j2.properties" "$HB/conf/log4j2.properties"
}

# common JVM args: NAME HEAP LOGFILE-BASENAME
hbase_jvm_args() {
  local heap="$1" logfile="$2"
  printf '%s\n' \
    "-Xms64m" "-Xmx$heap" -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
    "-Xlog:gc:file=$HB/logs/${logfile%.log}-gc.log:uptime,time:filecount=2,filesize=8m" \
    -Djava.net.preferIPv4Stack=true -Djava.awt.headless=true \
    "${HBASE_JDK_OPTS[@]}" \
    "-Dlog4j2.configurationFile=file:$HB/conf/log4j2.properties" \
    "-Dhbase.log.dir=$HB/logs" "-Dhbase.log.file=$logfile" \
    "-Dhbase.home.dir=$HB" "-Dhbase.root.logger=INFO,RFA" \
    -cp "$HB/conf:$HB/lib/*"
}

# check the ports of every HBase process that is not running yet, before
# starting anything (no half-started state on a port clash)
hbase_preflight() {
  if ! is_running hbase-master; then
    require_free_ports "HBase master" "$ZK_PORT" "$HBASE_MASTER_INFO_PORT" 16000 16020 16030
  fi
  if ! is_running hbase-thrift1; then
    require_free_ports "HBase Thrift1" "$THRIFT1_PORT" "$THRIFT1_INFO_PORT"
  fi
  if ! is_running hbase-thrift2; then
    require_free_ports "HBase Thrift2" "$THRIFT2_PORT" "$THRIFT2_INFO_PORT"
  fi
}

hbase_start_master() {
  if is_running hbase-master; then
    say "hbase: HMaster already running (pid $(proc_pid hbase-master))"
    return 0
  fi
  require_free_ports "HBase master" "$ZK_PORT" "$HBASE_MASTER_INFO_PORT" 16000 16020 16030
  local args
  mapfile -t args < <(hbase_jvm_args "$HBASE_MASTER_HEAP" master.log)
  say "hbase: starting HMaster (standalone, ZooKeeper on 127.0.0.1:$ZK_PORT)"
  start_java hbase-master "$HB/logs/master.out" "${args[@]}" \
    org.apache.hadoop.hbase.master.HMaster start
}

hbase_start_thrift() {
  local which="$1" port info cls name
  if [[ "$which" == 1 ]]; then
    port=$THRIFT1_PORT info=$THRIFT1_INFO_PORT cls=org.apache.hadoop.hbase.thrift.ThriftServer name=hbase-thrift1
  else
    port=$THRIFT2_PORT info=$THRIFT2_INFO_PORT cls=org.apache.hadoop.hbase.thrift2.ThriftServer name=hbase-thrift2
  fi
  if is_running "$name"; then
    say "hbase: Thrift$which already running (pid $(proc_pid "$name"))"
    return 0
  fi
  require_free_ports "HBase Thrift$which" "$port" "$info"
  local args
  mapfile -t args < <(hbase_jvm_args "$HBASE_THRIFT_HEAP" "thrift$which.log")
  say "hbase: starting Thrift$which gateway on 127.0.0.1:$port (info port $info)"
  # default server type (-threadpool = TBoundedThreadPoolServer), no -f (framed),
  # no -c (compact): plain binary protocol over a buffered socket
  start_java "$name" "$HB/logs/thrift$which.out" "${args[@]}" \
    "$cls" -b 127.0.0.1 -p "$port" --infoport "$info" -threadpool start
}

hbase_wait() {
  local deadline=$((SECONDS + HBASE_UP_TIMEOUT)) t0=$SECONDS name rem
  say "hbase: waiting for Thrift1 getTableNames on :$THRIFT1_PORT and Thrift2 on :$THRIFT2_PORT (timeout ${HBASE_UP_TIMEOUT}s)..."
  while :; do
    for name in hbase-master hbase-thrift1 hbase-thrift2; do
      if ! is_running "$name"; then
        fail_with_log "hbase: $name died while starting" \
          "$HB/logs/${name#hbase-}.out" "$HB/logs/${name#hbase-}.log"
      fi
    done
    rem=$((deadline - SECONDS))
    ((rem < 1)) && rem=1
    ((rem > 30)) && rem=30
    if port_open "$THRIFT1_PORT" && port_open "$THRIFT2_PORT" &&
      timeout "$rem" "$VENV/bin/python" "$ROOT/scripts/hbase_check.py" --lib "$HB/lib" \
        --thrift2 --quiet --rpc-timeout 20 >/dev/null 2>"$HB/logs/readiness.err"; then
      break
    fi
    if ((SECONDS >= deadline)); then
      fail_with_log "hbase: not ready after ${HBASE_UP_TIMEOUT}s (last check error below, then logs)" \
        "$HB/logs/readiness.err" "$HB/logs/master.log" "$HB/logs/thrift1.log" "$HB/logs/thrift2.log"
    fi
    sleep 2
  done
  say "hbase: ready in $((SECONDS - t0))s (Thrift1 127.0.0.1:$THRIFT1_PORT, Thrift2 127.0.0.1:$THRIFT2_PORT, UI http://127.0.0.1:$HBASE_MASTER_INFO_PORT)"
}

hbase_stop_master() {
  local pid
  pid="$(proc_pid hbase-master)"
  [[ -n "$pid" ]] || return 0
  # Graceful cluster shutdown (regions are closed => memstores flushed). A bare
  # SIGTERM can lose the last WAL edits (the local filesystem has no hflush) and
  # makes the standalone JVM linger ~30s (its ZooKeeper stops before the RS).
  say "hbase: stopping HMaster (pid $pid): graceful cluster shutdown..."
  local args attempt requested=0
  mapfile -t args < <(hbase_jvm_args 256m master-stop.log)
  for attempt in 1 2 3; do
    if timeout 90 "$JAVA" -XX:TieredStopAtLevel=1 "${args[@]}" \
      org.apache.hadoop.hbase.master.HMaster stop --shutDownCluster >>"$HB/logs/master-stop.out" 2>&1; then
      requested=1
      break
    fi
    # typically: master still initializing (not registered in ZooKeeper yet)
    kill -0 "$pid" 2>/dev/null || break
    ((attempt < 3)) && sleep 5
  done
  if ((requested)); then
    # a clean shutdown takes ~10s; one requested while the master was still
    # initializing can leave the RegionServer thread hanging: SIGTERM it then
    wait_exit hbase-master "$pid" "$HBASE_SHUTDOWN_WAIT" ||
      warn "hbase: HMaster still up ${HBASE_SHUTDOWN_WAIT}s after the shutdown request; sending SIGTERM"
  elif kill -0 "$pid" 2>/dev/null; then
    warn "hbase: shutdown request failed (see $HB/logs/master-stop.out); sending SIGTERM"
  fi
  stop_proc hbase-master 30
}

hbase_down() {
  local any=0 name pid
  # Thrift gateways are stateless: SIGTERM them first (they stop accepting),
  # shut the cluster down meanwhile, then reap them (kill -9 after 15s: a
  # gateway waits up to 60s for idle client connections otherwise).
  for name in hbase-thrift2 hbase-thrift1; do
    pid="$(proc_pid "$name")"
    if [[ -n "$pid" ]]; then
      any=1
      say "hbase: stopping ${name#hbase-} (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  if is_running hbase-master; then
    any=1
    find_java
    hbase_stop_master
  fi
  for name in hbase-thrift2 hbase-thrift1; do
    stop_proc "$name" 15
  done
  if ((any)); then say "hbase: stopped"; else say "hbase: not running"; fi
}

# -------------------------------------------------------------------- Kafka

kafka_prepare() {
  find_java
  mkdir -p "$KF"/{logs,pids,data,conf}
  ensure_lib kafka "$ROOT/services/kafka/pom.xml" "$KF/lib"
  render "$ROOT/services/kafka/server.properties" "$KF/conf/server.properties" "DATA_DIR=$KF/data"
  cp "$ROOT/services/kafka/log4j.properties" "$KF/conf/log4j.properties"
  cp "$ROOT/services/kafka/tools-log4j.properties" "$KF/conf/tools-log4j.properties"
}

kafka_tool() {
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
    "-Dlog4j.configuration=file:$KF/conf/tools-log4j.properties" \
    -cp "$KF/lib/*" "$@"
}

kafka_format() {
  if [[ -f "$KF/data/kraft-logs/meta.properties" ]]; then
    return 0
  fi
  local id
  if [[ -s "$KF/data/cluster-id" ]]; then
    id="$(cat "$KF/data/cluster-id")"
  else
    id="$(kafka_tool kafka.tools.StorageTool random-uuid 2>>"$KF/logs/format.out" | tail -n 1)"
    [[ "$id" =~ ^[A-Za-z0-9_-]{22}$ ]] || fail_with_log "kafka: could not generate a cluster id (got '$id')" "$KF/logs/format.out"
    echo "$id" >"$KF/data/cluster-id"
  fi
  say "kafka: formatting KRaft storage (cluster id $id)"
  kafka_tool kafka.tools.StorageTool format -t "$id" -c "$KF/conf/server.properties" --ignore-formatted \
    >>"$KF/logs/format.out" 2>&1 || fail_with_log "kafka: storage format failed" "$KF/logs/format.out"
}

kafka_start() {
  if is_running kafka; then
    say "kafka: broker already running (pid $(proc_pid kafka))"
    return 0
  fi
  require_free_ports "Kafka" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"
  kafka_format
  say "kafka: starting KRaft broker+controller on 127.0.0.1:$KAFKA_PORT (controller :$KAFKA_CONTROLLER_PORT)"
  start_java kafka "$KF/logs/kafka.out" \
    -Xms128m "-Xmx$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    "-Dkafka.logs.dir=$KF/logs" "-Dlog4j.configuration=file:$KF/conf/log4j.properties" \
    -cp "$KF/lib/*" kafka.Kafka "$KF/conf/server.properties"
}

kafka_wait() {
  local deadline=$((SECONDS + KAFKA_UP_TIMEOUT)) t0=$SECONDS
  say "kafka: waiting for a metadata answer on :$KAFKA_PORT (timeout ${KAFKA_UP_TIMEOUT}s)..."
  while :; do
    is_running kafka || fail_with_log "kafka: broker died while starting" "$KF/logs/kafka.out" "$KF/logs/server.log"
    if port_open "$KAFKA_PORT" &&
      timeout 60 "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
        "-Dlog4j.configuration=file:$KF/conf/tools-log4j.properties" -cp "$KF/lib/*" \
        org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" --list \
        >"$KF/logs/readiness.out" 2>&1; then
      break
    fi
    if ((SECONDS >= deadline)); then
      fail_with_log "kafka: not ready after ${KAFKA_UP_TIMEOUT}s" "$KF/logs/readiness.out" "$KF/logs/server.log"
    fi
    sleep 2
  done
  say "kafka: ready in $((SECONDS - t0))s (bootstrap 127.0.0.1:$KAFKA_PORT)"
}

kafka_down() {
  local pid
  pid="$(proc_pid kafka)"
  if [[ -z "$pid" ]]; then
    say "kafka: not running"
    return 0
  fi
  say "kafka: stopping broker (pid $pid, controlled shutdown)"
  stop_proc kafka "$STOP_GRACE"
  say "kafka: stopped"
}

# ------------------------------------------------------- Debian packages

# find_bin NAME: the path of NAME on PATH or in an sbin directory (non-root
# PATHs often lack /usr/sbin, where mariadbd lives), or nothing
find_bin() {
  local d
  if command -v "$1" >/dev/null 2>&1; then
    command -v "$1"
    return 0
  fi
  for d in /usr/sbin /sbin /usr/local/sbin; do
    [[ -x "$d/$1" ]] && {
      echo "$d/$1"
      return 0
    }
  done
  return 0
}

# ensure_debs WHAT BIN... -- PKG...: install the Debian packages PKG when one of
# the binaries BIN is missing (apt-get, non-interactive, as root)
ensure_debs() {
  local what="$1" bin missing=() pkgs=()
  shift
  while [[ $# -gt 0 && "$1" != "--" ]]; do
    [[ -n "$(find_bin "$1")" ]] || missing+=("$1")
    shift
  done
  shift
  pkgs=("$@")
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null 2>&1 ||
    die "$what: ${missing[*]} not found and no apt-get here: install ${pkgs[*]} by hand"
  [[ "$(id -u)" == 0 ]] ||
    die "$what: ${missing[*]} not found: run as root, or first: sudo apt-get install -y --no-install-recommends ${pkgs[*]}"
  local logf="$SVC/apt.log" t0=$SECONDS added_policy=0
  mkdir -p "$SVC"
  say "$what: ${missing[*]} not found: installing Debian packages ${pkgs[*]} with apt-get (as root; log ${logf#"$ROOT"/})..."
  # The packages' postinst would start a system-wide server on our port;
  # policy-rc.d = 101 tells invoke-rc.d not to (Debian container images ship one).
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    added_policy=1
  fi
  local ok=0
  if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update >>"$logf" 2>&1 &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
      --no-install-recommends "${pkgs[@]}" >>"$logf" 2>&1; then
    ok=1
  fi
  ((added_policy)) && rm -f /usr/sbin/policy-rc.d
  if ((!ok)); then
    tail -n 30 "$logf" >&2 || true
    die "$what: apt-get install ${pkgs[*]} failed (log: $logf)"
  fi
  for bin in "${missing[@]}"; do
    [[ -n "$(find_bin "$bin")" ]] || die "$what: $bin still missing after installing ${pkgs[*]}"
  done
  say "$what: installed ${pkgs[*]} ($((SECONDS - t0))s)"
}

# ------------------------------------------------------------------- MariaDB

MY_SOCK="$MY/run/mysqld.sock"

mysql_prepare() {
  ensure_debs mysql mariadbd mariadb-install-db mariadb mariadb-admin -- mariadb-server mariadb-client
  mkdir -p "$MY"/{conf,data,logs,pids,run,tmp}
  render "$ROOT/services/mysql/my.cnf" "$MY/conf/my.cnf" \
    "DATA_DIR=$MY/data" "TMP_DIR=$MY/tmp" "RUN_DIR=$MY/run" "LOG_DIR=$MY/logs" \
    "SOCKET=$MY_SOCK" "PORT=$MYSQL_PORT" "USER=$(id -un)"
  # first up: system tables; root and the OS user of this script log in over
  # the socket only (unix_socket), never over TCP
  # (.initialised: written once mariadb-install-db succeeded; a half-made data
  # dir of a killed first run is made again)
  if [[ ! -f "$MY/data/.initialised" ]]; then
    local t0=$SECONDS
    say "mysql: initialising the data dir ${MY#"$ROOT"/}/data (mariadb-install-db)"
    rm -rf "$MY/data" && mkdir -p "$MY/data"
    "$(find_bin mariadb-install-db)" --defaults-file="$MY/conf/my.cnf" --user="$(id -un)" \
      --auth-root-authentication-method=socket --skip-test-db >"$MY/logs/install-db.out" 2>&1 ||
      fail_with_log "mysql: mariadb-install-db failed" "$MY/logs/install-db.out"
    touch "$MY/data/.initialised"
    say "mysql: data dir ready ($((SECONDS - t0))s)"
  fi
}

mysql_start() {
  if is_running mysql; then
    say "mysql: MariaDB already running (pid $(proc_pid mysql))"
    return 0
  fi
  require_free_ports "MariaDB" "$MYSQL_PORT"
  say "mysql: starting MariaDB on 127.0.0.1:$MYSQL_PORT"
  start_native mysql "$MY/logs/mariadbd.out" "$(find_bin mariadbd)" --defaults-file="$MY/conf/my.cnf"
}

# the database and user the registry uses, idempotently, as the socket's admin
mysql_setup() {
  "$(find_bin mariadb)" --defaults-file="$MY/conf/my.cnf" -u "$(id -un)" >>"$MY/logs/setup.out" 2>&1 <<'SQL'
CREATE DATABASE IF NOT EXISTS hourglass CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
CREATE USER IF NOT EXISTS 'hourglass'@'127.0.0.1' IDENTIFIED BY 'hourglass';
CREATE USER IF NOT EXISTS 'hourglass'@'localhost' IDENTIFIED BY 'hourglass';
ALTER USER 'hourglass'@'127.0.0.1' IDENTIFIED BY 'hourglass';
ALTER USER 'hourglass'@'localhost' IDENTIFIED BY 'hourglass';
GRANT ALL PRIVILEGES ON `hourglass`.* TO 'hourglass'@'127.0.0.1', 'hourglass'@'localhost';
GRANT ALL PRIVILEGES ON `hourglass\_%`.* TO 'hourglass'@'127.0.0.1', 'hourglass'@'localhost';
SQL
}

mysql_wait() {
  local deadline=$((SECONDS + MYSQL_UP_TIMEOUT)) t0=$SECONDS admin client
  admin="$(find_bin mariadb-admin)"
  client="$(find_bin mariadb)"
  say "mysql: waiting for MariaDB on :$MYSQL_PORT (timeout ${MYSQL_UP_TIMEOUT}s)..."
  while :; do
    is_running mysql || fail_with_log "mysql: MariaDB died while starting" "$MY/logs/mariadbd.out" "$MY/logs/error.log"
    if "$admin" --defaults-file="$MY/conf/my.cnf" -u "$(id -un)" --connect-timeout=2 ping >/dev/null 2>&1; then
      break
    fi
    ((SECONDS >= deadline)) && fail_with_log "mysql: not ready after ${MYSQL_UP_TIMEOUT}s" "$MY/logs/error.log"
    sleep 1
  done
  mysql_setup || fail_with_log "mysql: creating database and user hourglass failed" "$MY/logs/setup.out"
  # the way the registry connects: TCP, user hourglass
  "$client" --no-defaults -h 127.0.0.1 -P "$MYSQL_PORT" -u hourglass -phourglass \
    -e 'SELECT 1' hourglass >"$MY/logs/readiness.out" 2>&1 ||
    fail_with_log "mysql: user hourglass cannot reach database hourglass over TCP" "$MY/logs/readiness.out"
  say "mysql: ready in $((SECONDS - t0))s (mysql://hourglass:hourglass@127.0.0.1:$MYSQL_PORT/hourglass)"
}

mysql_down() {
  local pid
  pid="$(proc_pid mysql)"
  if [[ -z "$pid" ]]; then
    say "mysql: not running"
    return 0
  fi
  say "mysql: stopping MariaDB (pid $pid, clean shutdown)"
  stop_proc mysql "$STOP_GRACE"
  say "mysql: stopped"
}

# --------------------------------------------------------------------- Redis

redis_prepare() {
  ensure_debs redis redis-server redis-cli -- redis-server
  mkdir -p "$RD"/{conf,data,logs,pids}
  render "$ROOT/services/redis/redis.conf" "$RD/conf/redis.conf" \
    "DATA_DIR=$RD/data" "LOG_DIR=$RD/logs" "PORT=$REDIS_PORT"
}

redis_start() {
  if is_running redis; then
    say "redis: already running (pid $(proc_pid redis))"
    return 0
  fi
  require_free_ports "Redis" "$REDIS_PORT"
  say "redis: starting Redis on 127.0.0.1:$REDIS_PORT"
  start_native redis "$RD/logs/redis.out" "$(find_bin redis-server)" "$RD/conf/redis.conf"
}

redis_wait() {
  local deadline=$((SECONDS + REDIS_UP_TIMEOUT)) t0=$SECONDS cli
  cli="$(find_bin redis-cli)"
  say "redis: waiting for PONG on :$REDIS_PORT (timeout ${REDIS_UP_TIMEOUT}s)..."
  while :; do
    is_running redis || fail_with_log "redis: died while starting" "$RD/logs/redis.out" "$RD/logs/redis.log"
    [[ "$("$cli" -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]] && break
    ((SECONDS >= deadline)) && fail_with_log "redis: not ready after ${REDIS_UP_TIMEOUT}s" "$RD/logs/redis.log"
    sleep 0.5
  done
  say "redis: ready in $((SECONDS - t0))s (redis://127.0.0.1:$REDIS_PORT)"
}

redis_down() {
  local pid
  pid="$(proc_pid redis)"
  if [[ -z "$pid" ]]; then
    say "redis: not running"
    return 0
  fi
  say "redis: stopping (pid $pid)"
  stop_proc redis "$STOP_GRACE"
  say "redis: stopped"
}

# ------------------------------------------------------------------ commands

targets() {
  case "${1:-all}" in
  hbase) echo hbase ;;
  kafka) echo kafka ;;
  mysql) echo mysql ;;
  redis) echo redis ;;
  all) echo hbase kafka mysql redis ;;
  *) die "unknown service '${1}' (expected hbase, kafka, mysql, redis or all)" ;;
  esac
}

print_logs_hint() {
  say "logs: $HB/logs/{master,thrift1,thrift2}.log (GC: *-gc.log)  $KF/logs/server.log  $MY/logs/error.log  $RD/logs/redis.log  (scripts/services.sh logs)"
}

has() { [[ " $1 " == *" $2 "* ]]; }

cmd_up() {
  local t0=$SECONDS svcs
  svcs="$(targets "${1:-all}")"
  # resolve everything first, then start all JVMs, then wait (overlaps startups)
  if has "$svcs" hbase; then hbase_prepare; fi
  if has "$svcs" kafka; then kafka_prepare; fi
  if has "$svcs" mysql; then mysql_prepare; fi
  if has "$svcs" redis; then redis_prepare; fi
  if has "$svcs" hbase; then hbase_preflight; fi
  if has "$svcs" kafka && ! is_running kafka; then
    require_free_ports "Kafka" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"
  fi
  if has "$svcs" hbase; then
    hbase_start_master
    hbase_start_thrift 1
    hbase_start_thrift 2
  fi
  if has "$svcs" kafka; then kafka_start; fi
  if has "$svcs" mysql; then mysql_start; fi
  if has "$svcs" redis; then redis_start; fi
  if has "$svcs" redis; then redis_wait; fi
  if has "$svcs" mysql; then mysql_wait; fi
  if has "$svcs" hbase; then hbase_wait; fi
  if has "$svcs" kafka; then kafka_wait; fi
  print_logs_hint
  say "up ${1:-all}: done in $((SECONDS - t0))s"
}

cmd_down() {
  local svcs
  svcs="$(targets "${1:-all}")"
  if has "$svcs" redis; then redis_down; fi
  if has "$svcs" mysql; then mysql_down; fi
  if has "$svcs" kafka; then kafka_down; fi
  if has "$svcs" hbase; then hbase_down; fi
}

cmd_restart() {
  local t0=$SECONDS
  case "${1:-hbase}" in
  hbase)
    hbase_prepare
    find_java
    hbase_stop_master
    hbase_preflight
    hbase_start_master
    # the gateways normally survive; start any that is missing
    hbase_start_thrift 1
    hbase_start_thrift 2
    hbase_wait
    ;;
  thrift)
    hbase_prepare
    local name
    for name in hbase-thrift1 hbase-thrift2; do
      if is_running "$name"; then
        say "hbase: stopping ${name#hbase-}"
        stop_proc "$name" 15
      fi
    done
    hbase_start_thrift 1
    hbase_start_thrift 2
    hbase_wait
    ;;
  kafka)
    kafka_down
    kafka_prepare
    kafka_start
    kafka_wait
    ;;
  all)
    cmd_down all
    cmd_up all
    ;;
  *) die "restart: expected hbase, thrift, kafka or all" ;;
  esac
  say "restart ${1:-hbase}: done in $((SECONDS - t0))s"
}

cmd_status() {
  local name pid port rc=0
  printf '%-14s %-8s %-8s %-7s %s\n' PROCESS STATE PID RSS PORTS
  for name in hbase-master hbase-thrift1 hbase-thrift2 kafka mysql redis; do
    case "$name" in
    hbase-master) port="$ZK_PORT(zk) $HBASE_MASTER_INFO_PORT(ui)" ;;
    hbase-thrift1) port="$THRIFT1_PORT $THRIFT1_INFO_PORT(info)" ;;
    hbase-thrift2) port="$THRIFT2_PORT $THRIFT2_INFO_PORT(info)" ;;
    kafka) port="$KAFKA_PORT $KAFKA_CONTROLLER_PORT(controller)" ;;
    mysql) port="$MYSQL_PORT" ;;
    redis) port="$REDIS_PORT" ;;
    esac
    pid="$(proc_pid "$name")"
    if [[ -n "$pid" ]]; then
      printf '%-14s %-8s %-8s %-7s %s\n' "$name" running "$pid" "$(rss_mb "$pid")" "$port"
    else
      printf '%-14s %-8s %-8s %-7s %s\n' "$name" stopped - - "$port"
      rc=3
    fi
  done
  local p busy=""
  for p in "$THRIFT1_PORT" "$THRIFT2_PORT" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$ZK_PORT" "$MYSQL_PORT" "$REDIS_PORT"; do
    port_open "$p" && busy="$busy $p"
  done
  say "listening on 127.0.0.1:${busy:- (none of 9090 9091 9092 9093 $ZK_PORT $MYSQL_PORT $REDIS_PORT)}"
  print_logs_hint
  return "$rc"
}

cmd_logs() {
  local which="${1:-all}" n="${2:-20}" f svcs
  svcs="$(targets "$which")"
  for s in $svcs; do
    local dir="$SVC/$s/logs"
    [[ -d "$dir" ]] || {
      say "$s: no logs yet ($dir)"
      continue
    }
    say "$s logs in $dir:"
    for f in "$dir"/*.log "$dir"/*.out; do
      [[ -f "$f" ]] || continue
      printf '\n==> %s <==\n' "$f"
      tail -n "$n" "$f"
    done
  done
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

main() {
  local cmd="${1:-}"
  shift || true
  case "$cmd" in
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  restart) cmd_restart "$@" ;;
  status) cmd_status ;;
  logs) cmd_logs "$@" ;;
  kafka-tool)
    [[ $# -ge 1 ]] || die "kafka-tool CLASS [ARGS...]"
    find_java
    [[ -f "$KF/lib/.complete" ]] || kafka_prepare
    [[ -f "$KF/conf/tools-log4j.properties" ]] || kafka_prepare
    kafka_tool "$@"
    ;;
  -h | --help | help | "") usage ;;
  *)
    usage >&2
    exit 2
    ;;
  esac
}

main "$@"
