#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1.
#
#   scripts/kafka.sh start DIR     format fresh storage in DIR, start, wait until a Metadata
#                                  request succeeds, print kafka://127.0.0.1:PORT on stdout
#   scripts/kafka.sh restart DIR   stop, then start again on the same ports *keeping* the data
#   scripts/kafka.sh stop DIR      kill the broker by its pid file and wait for it to exit
#   scripts/kafka.sh status DIR    print the URL and exit 0 if it is up, else exit 1
#
# Jars come from Maven Central only (scripts/kafka/pom.xml, `mvn dependency:copy-dependencies`)
# and are cached outside the work tree in ${XDG_CACHE_HOME:-$HOME/.cache}/txnbench/kafka-VERSION,
# so only the first start on a machine downloads (~46 MB). Logs, pid and data live in DIR.
# Environment: KAFKA_HEAP (default "-Xms128m -Xmx512m"), KAFKA_START_TIMEOUT (seconds, 90),
# KAFKA_AUTO_CREATE_TOPICS (false).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
conf="$here/kafka"
say() { echo "kafka.sh: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=lib/service.sh
. "$here/lib/service.sh"

usage() { die "usage: $0 start|restart|stop|status DIR"; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
[ -n "$dir" ] || usage

version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$conf/pom.xml")
[ -n "$version" ] || die "no <kafka.version> in $conf/pom.xml"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/txnbench/kafka-$version"
libs="$cache/libs"

fetch_jars() {
  mkdir -p "$cache"
  # One download at a time per machine; a finished download is published by a rename.
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -f "$libs/.complete" ]; then
    command -v mvn >/dev/null || die "mvn not found (needed once to fetch Kafka $version jars)"
    say "fetching Kafka $version jars from Maven Central into $cache (first start only)"
    local tmp="$cache/libs.tmp.$$"
    rm -rf "$tmp"
    if ! mvn -q -B -f "$conf/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" \
        -Dmaven.repo.local="$cache/m2" >"$cache/mvn.log" 2>&1; then
      tail -20 "$cache/mvn.log" >&2
      rm -rf "$tmp"
      die "mvn failed; full log in $cache/mvn.log"
    fi
    touch "$tmp/.complete"
    rm -rf "$libs"
    mv "$tmp" "$libs"
    rm -rf "$cache/m2"  # the jars are all we need; keep the cache small
  fi
  flock -u 9
}

pid_alive() { [ -f "$dir/kafka.pid" ] && pid_running "$(cat "$dir/kafka.pid")"; }

# ours PID -> 0 if PID is the broker this script started from DIR (its command line runs
# kafka.Kafka on DIR/server.properties): a reused PID must not get another process killed.
ours() {
  local pid=$1 args
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  args=$(ps -ww -o args= -p "$pid" 2>/dev/null) || return 1
  [[ "$args" == *"kafka.Kafka $dir/server.properties"* ]]
}

probe() { python3 "$conf/probe.py" "$1"; }

java_cmd() {  # [tool]: sets the array JAVA (the broker's JVM, or a short-lived tool's)
  if [ "${1:-}" = tool ]; then
    # Skip the optimising JIT and G1 set-up: saves ~0.3 s per tool run.
    JAVA=(java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC)
  else
    # shellcheck disable=SC2206
    JAVA=(java ${KAFKA_HEAP:--Xms128m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20)
  fi
  JAVA+=(-Djava.awt.headless=true "-Dkafka.logs.dir=$dir"
    "-Dlog4j.configuration=file:$conf/log4j.properties" -cp "$libs/*")
}

write_config() {  # PORT CONTROLLER_PORT
  sed -e "s|@PORT@|$1|g" -e "s|@CONTROLLER_PORT@|$2|g" -e "s|@DATA_DIR@|$dir/data|g" \
      -e "s|@AUTO_CREATE@|${KAFKA_AUTO_CREATE_TOPICS:-false}|g" \
      "$conf/server.properties.in" >"$dir/server.properties"
  echo "$1" >"$dir/port"
}

format_storage() {
  local id
  java_cmd tool
  id=$("${JAVA[@]}" kafka.tools.StorageTool random-uuid 2>>"$dir/kafka.out") \
    || { tail -5 "$dir/kafka.out" >&2; die "kafka.tools.StorageTool random-uuid failed"; }
  "${JAVA[@]}" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" \
    >>"$dir/kafka.out" 2>&1 || { tail -20 "$dir/kafka.out" >&2; die "storage format failed"; }
}

launch() {
  local port t0 deadline
  port=$(cat "$dir/port")
  t0=$(date +%s.%N)
  java_cmd
  # Its own session: a Ctrl-C or job kill aimed at the caller does not take the broker down.
  setsid "${JAVA[@]}" kafka.Kafka "$dir/server.properties" >>"$dir/kafka.out" 2>&1 </dev/null &
  echo $! >"$dir/kafka.pid"
  deadline=$(( $(date +%s) + ${KAFKA_START_TIMEOUT:-90} ))
  until probe "$port"; do
    if ! pid_alive; then
      tail -30 "$dir/kafka.out" >&2
      die "broker exited during start-up; see $dir/server.log"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      stop_broker
      die "broker not ready after ${KAFKA_START_TIMEOUT:-90}s; see $dir/server.log"
    fi
    sleep 0.2
  done
  say "broker up on 127.0.0.1:$port in $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")s (pid $(cat "$dir/kafka.pid"), logs in $dir)"
  echo "kafka://127.0.0.1:$port"
}

stop_broker() {
  pid_alive || { rm -f "$dir/kafka.pid"; return 0; }
  local pid
  pid=$(cat "$dir/kafka.pid")
  if ! ours "$pid"; then
    rm -f "$dir/kafka.pid"
    exiting "$pid" && return 0  # ours, killed: its command line is gone as it exits
    die "not stopping pid $pid: it is not the broker started from $dir ($(ps -o args= -p "$pid" 2>/dev/null | cut -c1-80)); stale pid file removed"
  fi
  terminate "$pid" 30  # controlled shutdown normally takes 1-3 s
  rm -f "$dir/kafka.pid"
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if pid_alive && ours "$(cat "$dir/kafka.pid")"; then die "a broker is already running from $dir (pid $(cat "$dir/kafka.pid")); stop it first"; fi
    command -v java >/dev/null || die "java not found (Kafka $version needs Java 11+; 17 is tested)"
    fetch_jars
    rm -rf "$dir/data" "$dir/kafka.out" "$dir"/server.log*
    port=$(free_port)
    cport=$(free_port)
    while [ "$cport" = "$port" ]; do cport=$(free_port); done
    write_config "$port" "$cport"
    format_storage
    launch
    ;;
  restart)
    [ -f "$dir/server.properties" ] || die "nothing to restart in $dir (run start first)"
    dir="$(cd "$dir" && pwd)"
    stop_broker
    fetch_jars
    launch
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    dir="$(cd "$dir" && pwd)"
    stop_broker
    ;;
  status)
    if pid_alive && probe "$(cat "$dir/port")"; then echo "kafka://127.0.0.1:$(cat "$dir/port")"; else exit 1; fi
    ;;
  *) usage ;;
esac
