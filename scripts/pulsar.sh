#!/usr/bin/env bash
# A real Apache Pulsar 5.0.0-M1 standalone broker (one broker, one bookie, RocksDB metadata) on
# 127.0.0.1, with both transaction designs on (shared/PULSAR.md): persistent:// topics take v4,
# topic:// scalable topics v5.
#
#   scripts/pulsar.sh start DIR     fresh data in DIR, start, wait for /admin/v2/brokers/health,
#                                   print pulsar://127.0.0.1:PORT (line 1) and http://127.0.0.1:WEBPORT (line 2)
#   scripts/pulsar.sh restart DIR   stop, then start again on the same ports *keeping* the data
#   scripts/pulsar.sh fresh DIR     stop, then start again on the same ports with fresh data (validate --fresh-broker)
#   scripts/pulsar.sh stop DIR      SIGTERM the broker this script started from DIR, wait, SIGKILL after a bound
#   scripts/pulsar.sh status DIR    print the two URLs and exit 0 if it is up, else exit 1
#   scripts/pulsar.sh client-cp     compile jvm/src (the trace client) if its sources changed, print its class path
#
# Jars come from Maven Central only (jvm/pom.xml, `mvn dependency:copy-dependencies`) and are cached
# outside the work tree in ${XDG_CACHE_HOME:-$HOME/.cache}/txnbench/pulsar-5.0.0-M1; Maven's own
# repository (~/.m2) is kept, so a re-fetch after the cache is emptied takes seconds.
# Environment: PULSAR_HEAP (default "-Xms1g -Xmx1g -XX:MaxDirectMemorySize=512m"; any JVM flags may
# follow, e.g. "-Xlog:gc:file=F:time,uptimemillis" for the GC pauses or
# "-XX:StartFlightRecording=filename=F,dumponexit=true,settings=S" for Java Flight Recorder, as
# datasets/validation/README.md's session 40 used them), PULSAR_START_TIMEOUT (seconds, 180).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
jvm="$(cd "$here/../jvm" && pwd)"
say() { echo "pulsar.sh: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=lib/service.sh
. "$here/lib/service.sh"

usage() { die "usage: $0 start|restart|fresh|stop|status DIR | client-cp"; }
[ $# -ge 1 ] || usage
cmd=$1
if [ "$cmd" = client-cp ]; then [ $# -eq 1 ] || usage; dir=""; else [ $# -eq 2 ] || usage; dir=$2; [ -n "$dir" ] || usage; fi

version=$(sed -n 's:.*<pulsar.version>\(.*\)</pulsar.version>.*:\1:p' "$jvm/pom.xml")
[ -n "$version" ] || die "no <pulsar.version> in $jvm/pom.xml"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/txnbench/pulsar-$version"
libs="$cache/libs"

need_java() {
  command -v java >/dev/null || die "java not found (Pulsar $version needs Java 17)"
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ "${v:-0}" -ge 17 ] || die "java is version ${v:-unknown}; Pulsar $version needs Java 17 or newer"
}

fetch_jars() {
  mkdir -p "$cache"
  # One download at a time per machine; a finished download is marked by the stamp file.
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -f "$libs/.complete" ]; then
    command -v mvn >/dev/null || die "mvn not found (needed once to fetch the Pulsar $version jars)"
    say "fetching Pulsar $version jars from Maven Central into $libs (first use only)"
    # Emptied first: a second jackson-annotations left over from another copy kills the broker
    # in JSONMetadataSerdeSimpleType.<init> (shared/PULSAR.md, "Jackson clash").
    rm -rf "$libs"
    if ! mvn -q -B -f "$jvm/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$libs" >"$cache/mvn.log" 2>&1; then
      rm -rf "$libs"
      die "fetching the Pulsar $version jars failed ($(grep -m1 -E 'ERROR' "$cache/mvn.log" | cut -c1-200)); full log in $cache/mvn.log"
    fi
    touch "$libs/.complete"
  fi
  flock -u 9
}

# --- the trace client -------------------------------------------------------------------------

client_cp() {
  command -v javac >/dev/null || die "javac not found (the trace client needs a Java 17 JDK)"
  local hash out tmp
  # Keyed by the sources, the resources and the jar set, so an edit or a new fetch recompiles.
  hash=$( (cd "$jvm" && find src resources -type f | LC_ALL=C sort | xargs sha256sum; echo "$version") \
    | sha256sum | cut -c1-16)
  out="$cache/client-$hash"
  exec 9>"$cache/.lock"
  flock 9  # one compile at a time: a second caller finds the first one's classes
  if [ ! -f "$out/.complete" ]; then
    tmp="$out.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    find "$jvm/src" -name '*.java' >"$tmp.sources"
    if ! javac --release 17 -encoding UTF-8 -Xlint:-options -nowarn -cp "$libs/*" -d "$tmp" "@$tmp.sources" \
        >"$cache/javac.log" 2>&1; then
      rm -rf "$tmp" "$tmp.sources"
      cat "$cache/javac.log" >&2
      die "compiling the trace client failed (log above, also in $cache/javac.log)"
    fi
    cp "$jvm"/resources/* "$tmp/"
    touch "$tmp/.complete"
    rm -f "$tmp.sources"
    rm -rf "$out"
    mv "$tmp" "$out"
  fi
  flock -u 9
  echo "$out:$libs/*"
}

# --- the broker -------------------------------------------------------------------------------

# The pid in DIR/pulsar.pid, only if it is alive *and* is the java process started from DIR
# (its command line names DIR): a stale pid file never gets another process killed.
our_pid() {
  [ -f "$dir/pulsar.pid" ] || return 1
  local pid
  pid=$(cat "$dir/pulsar.pid")
  pid_running "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -F -- "-Dpulsar.log.dir=$dir " || return 1
  echo "$pid"
}

healthy() {  # WEBPORT
  python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/admin/v2/brokers/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

write_config() {  # PORT WEBPORT
  sed -e "s|@PORT@|$1|g" -e "s|@WEBPORT@|$2|g" "$jvm/conf/standalone.conf.in" >"$dir/standalone.conf"
  echo "pulsar://127.0.0.1:$1" >"$dir/url"
  echo "http://127.0.0.1:$2" >"$dir/admin-url"
}

launch() {
  local webport t0 deadline pid
  webport=$(sed 's/.*://' "$dir/admin-url")
  t0=$(date +%s.%N)
  # shellcheck disable=SC2206
  local java=(java ${PULSAR_HEAP:--Xms1g -Xmx1g -XX:MaxDirectMemorySize=512m} -XX:+UseG1GC
    --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED
    --add-opens java.base/java.util=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
    --add-opens java.base/sun.net=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED
    --add-opens java.management/sun.management=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
    -Djava.net.preferIPv4Stack=true -Djava.awt.headless=true
    "-Dpulsar.log.dir=$dir" "-Dlog4j.configurationFile=$jvm/conf/log4j2.properties"
    -cp "$libs/*" org.apache.pulsar.PulsarStandaloneStarter
    -c "$dir/standalone.conf" -nfw -nss
    --metadata-dir "$dir/data/metadata" --bookkeeper-dir "$dir/data/bookkeeper"
    --zookeeper-dir "$dir/data/no-zookeeper")
  # Its own session and cwd DIR: a Ctrl-C aimed at the caller does not take the broker down, and
  # anything it writes relative to its cwd stays in DIR.
  (cd "$dir" && exec setsid "${java[@]}" >>"$dir/pulsar.out" 2>&1 </dev/null) &
  pid=$!
  echo "$pid" >"$dir/pulsar.pid"
  deadline=$(( $(date +%s) + ${PULSAR_START_TIMEOUT:-180} ))
  until healthy "$webport"; do
    if ! pid_running "$pid"; then
      rm -f "$dir/pulsar.pid"
      local gist
      gist=$(grep -s -h -E 'ERROR|Exception|Error' "$dir/pulsar.out" "$dir/pulsar.log" | tail -1 | cut -c1-300 || true)
      die "broker exited during start-up (${gist:-no error logged}); see $dir/pulsar.log and $dir/pulsar.out"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      stop_broker
      die "broker not healthy after ${PULSAR_START_TIMEOUT:-180}s; see $dir/pulsar.log"
    fi
    sleep 0.25
  done
  say "broker up in $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")s (pid $pid, logs in $dir)"
  cat "$dir/url" "$dir/admin-url"
}

stop_broker() {
  local pid
  if ! pid=$(our_pid); then rm -f "$dir/pulsar.pid"; return 0; fi
  terminate "$pid" 30  # the shutdown hook normally takes 2-3 s
  rm -f "$dir/pulsar.pid"
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if pid=$(our_pid); then die "a broker is already running from $dir (pid $pid); stop it first"; fi
    need_java
    fetch_jars
    rm -rf "$dir/data" "$dir/pulsar.out" "$dir/pulsar.log"
    port=$(free_port)
    webport=$(free_port)
    while [ "$webport" = "$port" ]; do webport=$(free_port); done
    write_config "$port" "$webport"
    launch
    ;;
  restart|fresh)
    [ -f "$dir/standalone.conf" ] || die "nothing to restart in $dir (run start first)"
    dir="$(cd "$dir" && pwd)"
    stop_broker
    need_java
    fetch_jars
    if [ "$cmd" = fresh ]; then rm -rf "$dir/data" "$dir/pulsar.out" "$dir/pulsar.log"; fi
    launch
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    dir="$(cd "$dir" && pwd)"
    stop_broker
    ;;
  status)
    dir="$(cd "$dir" 2>/dev/null && pwd)" || exit 1
    if our_pid >/dev/null && healthy "$(sed 's/.*://' "$dir/admin-url")"; then cat "$dir/url" "$dir/admin-url"; else exit 1; fi
    ;;
  client-cp)
    need_java
    fetch_jars
    client_cp
    ;;
  *) usage ;;
esac
