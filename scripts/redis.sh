#!/usr/bin/env bash
# Start or stop a throwaway redis-server for tests and real-backend runs.
#
#   scripts/redis.sh start DIR   start redis-server on 127.0.0.1 on a free port (no persistence),
#                                wait until it answers PING, print redis://127.0.0.1:PORT on stdout
#   scripts/redis.sh stop DIR    stop the server started in DIR (by its pid file)
#
# DIR holds redis.pid, redis.log and url. Starting twice in the same DIR prints the running
# server's URL. If redis-server is missing it is installed with apt-get (Debian 12: 7.0.x).
# Only the URL goes to stdout; everything else goes to stderr.
set -euo pipefail

die() { echo "redis.sh: $*" >&2; exit 1; }
# shellcheck source=lib/service.sh
. "$(dirname "$0")/lib/service.sh"

ensure_installed() {
  command -v redis-server >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "redis-server is not installed and apt-get is unavailable; install redis-server (>= 7.0) yourself"
  echo "redis.sh: installing redis-server with apt-get" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } >&2 \
    || die "apt-get install redis-server failed"
  command -v redis-server >/dev/null 2>&1 || die "redis-server still not on PATH after apt-get install"
}

ping() {  # ping PORT -> 0 when the server answers PONG
  local port=$1 reply=""
  if command -v redis-cli >/dev/null 2>&1; then
    reply=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null || true)
  else
    exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null || return 1
    printf 'PING\r\n' >&3
    read -r -t 1 reply <&3 || true
    exec 3<&- 3>&-
    reply=${reply%$'\r'}; reply=${reply#+}
  fi
  [ "$reply" = "PONG" ]
}

alive() { [ -f "$1/redis.pid" ] && pid_running "$(cat "$1/redis.pid")"; }

# ours DIR PID -> 0 if PID is the redis-server this script started in DIR: a reused PID (or an
# edited pid file) must not get some other process killed. redis-server sets its title to
# "redis-server 127.0.0.1:PORT", and PORT is in DIR/url.
ours() {
  local dir=$1 pid=$2 args port
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  args=$(ps -o args= -p "$pid" 2>/dev/null) || return 1
  [ -f "$dir/url" ] || return 1
  port=$(sed 's/.*://' "$dir/url")
  [[ "$args" == redis-server*":$port"* ]]
}

start() {
  local dir=$1
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if alive "$dir" && ours "$dir" "$(cat "$dir/redis.pid")" && ping "$(sed 's/.*://' "$dir/url")"; then
    cat "$dir/url"
    return 0
  fi
  ensure_installed
  rm -f "$dir/redis.pid" "$dir/url"
  local attempt port
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" >&2 || continue
    for _ in $(seq 1 100); do
      if ping "$port"; then
        echo "redis://127.0.0.1:$port" | tee "$dir/url"
        return 0
      fi
      sleep 0.05
    done
    # not answering (port taken by a racing process?): stop whatever we started and retry
    alive "$dir" && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    rm -f "$dir/redis.pid"
  done
  die "redis-server did not answer PING; see $dir/redis.log"
}

stop() {
  local dir=$1 pid
  [ -f "$dir/redis.pid" ] || { echo "redis.sh: no redis.pid in $dir (not running)" >&2; return 0; }
  pid=$(cat "$dir/redis.pid")
  if pid_running "$pid"; then
    if ! ours "$dir" "$pid"; then
      rm -f "$dir/redis.pid" "$dir/url"
      exiting "$pid" && return 0  # ours, killed: its command line is gone as it exits
      die "not stopping pid $pid: it is not the redis-server started in $dir ($(ps -o args= -p "$pid" 2>/dev/null | cut -c1-80)); stale pid file removed"
    fi
    terminate "$pid" 5
  fi
  rm -f "$dir/redis.pid" "$dir/url"
}

case "${1:-}" in
  start) [ $# -eq 2 ] || die "usage: redis.sh start DIR"; start "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: redis.sh stop DIR"; stop "$2" ;;
  *) die "usage: redis.sh start DIR | redis.sh stop DIR" ;;
esac
