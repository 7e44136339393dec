"""What one metadata store write costs a Pulsar broker, trace by trace: the evidence for the model's
per-write service time (``resources.metadata`` of a latency profile, issue 17)::

    .venv/bin/python -m benchmarks.broker_cpu --pulsar-dir DIR --trace T [--trace T2 ...] [--client-warm-up]

With the broker of ``scripts/pulsar.sh start DIR`` running, each trace is replayed through it as
fast as possible (``txnbench replay --target ... --pacing asap``, one design) while this program
reads, every 20 ms, each broker thread's CPU time (``/proc/PID/task/TID/stat``: user + system
ticks). It prints, over the run's txn phase (as ``bench.replay.measure.committed_rate`` counts
it), the committed txns per second, the machine's and the broker's CPU use, the busiest broker
threads' CPU share, the trace client's (a JVM started for the run; ``--client-warm-up`` warms it
up first, as ``validate --client-warm-up`` does) with its JIT compiler threads apart, and from the broker's
``pulsar_metadata_store_ops_latency_ms`` (``MetadataStoreStats``: the time from ``put()`` to its
completion, which RocksdbMetadataStore runs on the caller's thread, fsync of its WAL included) the
mean time of a put, a get and a delete over the whole run. Run it on a warmed-up broker, nothing
else running. Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from bench.pulsar.client import MAIN_CLASS
from bench.pulsar.cpu import machine_cpu_s as machine_cpu, threads_cpu_s as thread_cpu
from benchmarks.broker_threads import ROOT, running_broker, txn_phase

PERIOD_S = 0.02
MACHINE_BUSY, MACHINE_ALL = " machine busy", " machine all"  # not thread names (those have no leading space)
CLIENT = "client:"  # the trace client's threads, beside the broker's
_OPS = re.compile(r'^pulsar_metadata_store_ops_latency_ms_(sum|count)\{[^}]*type="(\w+)",status="success"\} (\S+)$',
                  re.M)


def store_ops(admin: str) -> dict[tuple[str, str], float]:
    """The broker's metadata store op counters: (``sum``|``count``, get|put|del) -> value."""
    try:
        with urllib.request.urlopen(f"{admin}/metrics/", timeout=30) as r:
            text = r.read().decode()
    except OSError as e:  # URLError, a refused connection, a timeout
        raise SystemExit(f"broker_cpu: the broker's metrics at {admin}/metrics/ did not answer ({e})")
    out: dict[tuple[str, str], float] = defaultdict(float)
    for what, kind, value in _OPS.findall(text):
        out[(what, kind)] += float(value)
    return out


def client_pid() -> str | None:
    """The running trace client's pid (the JVM of ``bench.pulsar.client``), if any."""
    found = subprocess.run(["pgrep", "-f", MAIN_CLASS], capture_output=True, text=True).stdout.split()
    return found[0] if found else None


def sample(pid: str, into: list[tuple[float, dict[str, float]]], stop: threading.Event) -> None:
    """Every PERIOD_S: the broker's threads, the trace client's (as ``client:NAME``, once it has
    started) and the machine's."""
    client = None
    while not stop.is_set():
        cpu = thread_cpu(pid)
        client = client or client_pid()
        if client is not None:
            client_cpu = thread_cpu(client)
            if not client_cpu:  # it ended
                client = None
            cpu.update({CLIENT + name: s for name, s in client_cpu.items()})
        cpu[MACHINE_BUSY], cpu[MACHINE_ALL] = machine_cpu()
        into.append((time.time() * 1000, cpu))
        stop.wait(PERIOD_S)


def measure(trace: Path, design: str, pid: str, url: str, admin: str, top: int, warm_up: bool = False) -> None:
    series: list[tuple[float, dict[str, float]]] = []
    stop = threading.Event()
    before = store_ops(admin)
    sampler = threading.Thread(target=sample, args=(pid, series, stop), daemon=True)
    sampler.start()
    with tempfile.TemporaryDirectory(prefix="txnbench-cpu-") as tmp:
        try:
            subprocess.run([str(ROOT / "scripts" / "txnbench"), "replay", "--trace", str(trace), "--engine", design,
                            "--target", url, "--admin-url", admin, "--pacing", "asap", "--out", f"{tmp}/run",
                            "--no-progress", *(["--client-warm-up"] if warm_up else [])],
                           check=True, stdout=subprocess.DEVNULL)
        finally:
            stop.set()
            sampler.join()
        lines = Path(f"{tmp}/run/pulsar-events-{design}.jsonl").read_text().splitlines()
        txns = json.loads(Path(f"{tmp}/run/counts.json").read_text())[design].get("txns.committed", 0)
    after = store_ops(admin)
    lo, hi = txn_phase(json.loads(line) for line in lines)
    inside = [(t, c) for t, c in series if lo <= t <= hi]
    if len(inside) < 2:
        raise SystemExit(f"broker_cpu: too few CPU samples in the txn phase of {trace.name} ({len(inside)})")
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    span_s = (t1 - t0) / 1000
    print(f"\n{trace.name}, {design}, as fast as possible: txn phase {hi - lo:.0f} ms, {txns} committed "
          f"({txns / ((hi - lo) / 1000):.1f} txn/s); CPU over {span_s:.2f} s of it")
    busy, every = (c1[k] - c0[k] for k in (MACHINE_BUSY, MACHINE_ALL))
    broker = [n for n in c1 if not n.startswith((" ", CLIENT))]
    client = [n for n in c1 if n.startswith(CLIENT)]
    print(f"  machine: {100 * busy / every:.0f} % of its {os.cpu_count()} cores busy; the broker's process "
          f"{100 * sum(c1[n] - c0.get(n, 0.0) for n in broker) / every:.0f} % of them")
    if client:  # the JVM started for the run: how much of it is its JIT still compiling
        used = {n: (c1[n] - c0.get(n, 0.0)) / span_s for n in client}
        print(f"  trace client: {sum(used.values()):.2f} cores, its compiler threads "
              f"{sum(v for n, v in used.items() if 'Compiler' in n):.2f}")
    shares = sorted(((c1.get(n, 0.0) - c0.get(n, 0.0)) / span_s, n) for n in broker)
    for share, name in reversed(shares[-top:]):
        print(f"  {100 * share:5.1f}%  {name}")
    for kind in ("put", "get", "del"):
        n = after[("count", kind)] - before[("count", kind)]
        ms = after[("sum", kind)] - before[("sum", kind)]
        print(f"  metadata {kind}: {n:.0f} over the run, mean {1000 * ms / n if n else 0:.0f} µs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.broker_cpu", description=__doc__.split("\n")[0])
    ap.add_argument("--pulsar-dir", required=True, type=Path, help="the broker's scripts/pulsar.sh DIR (running)")
    ap.add_argument("--trace", type=Path, action="append", required=True, help="a trace to replay (repeatable)")
    ap.add_argument("--design", choices=("v4", "v5"), default="v5")
    ap.add_argument("--top", type=int, default=6, help="threads shown, the busiest first (default 6)")
    ap.add_argument("--client-warm-up", action="store_true", help="the trace client runs the trace first, unmeasured")
    args = ap.parse_args(argv)
    pid, url, admin = running_broker(args.pulsar_dir, "broker_cpu")
    for trace in args.trace:
        measure(trace, args.design, pid, url, admin, args.top, args.client_warm_up)
    return 0


if __name__ == "__main__":
    sys.exit(main())
