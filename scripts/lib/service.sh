# Shell helpers shared by the service scripts (redis.sh, kafka.sh, pulsar.sh); source it.

# A free TCP port on the loopback interface, below the kernel's ephemeral range: a port from that
# range (what binding port 0 gives) can be taken before the service binds it by any socket bound to
# port 0 meanwhile. It happened: the standalone's own bookie took the web port pulsar.sh had picked,
# and the broker failed to start ("Failed to bind to /127.0.0.1:35209").
free_port() {
  python3 - <<'EOF'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
tries = [random.randint(max(1024, low - 20000), low - 1) for _ in range(100)] if low > 2048 else []
for port in tries + [0]:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
EOF
}

# pid_running PID: the process exists and is not a zombie (a killed child its parent has not reaped
# still answers kill -0).
pid_running() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ "$stat" != Z* ]]
}

# exiting PID: the process stops running within 2 s (a SIGKILLed JVM tears its threads down for a
# while and then shows as "[java] <defunct>", no longer the command line that was checked).
exiting() {
  local i
  for i in $(seq 1 10); do
    pid_running "$1" || return 0
    sleep 0.2
  done
  return 1
}

# terminate PID SECONDS: SIGTERM (the service's own shutdown), wait up to SECONDS, then SIGKILL and
# wait for it to be gone. The caller has checked that PID is the process it started.
terminate() {
  local pid=$1 secs=$2 i
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 $((secs * 5))); do
    pid_running "$pid" || break
    sleep 0.2
  done
  if pid_running "$pid"; then
    echo "$(basename "$0"): pid $pid did not stop in $secs s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while pid_running "$pid"; do sleep 0.1; done
  fi
  # dead now; give its parent a moment to reap it (a zombie still answers kill -0), but never hang
  for i in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}
