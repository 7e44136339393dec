"""Who held the cores while a v5 new-txn queued behind an END_TXN waited, gap by gap, from the
kernel's scheduler events (issue 17; datasets/validation/README.md, session 48). Not part of the
tests. With the broker of ``scripts/pulsar.sh start DIR`` running and warmed::

    python3 -c 'import time; print(time.time() - time.monotonic())' > OFFSET
    perf record -k CLOCK_MONOTONIC -e sched:sched_switch -e sched:sched_wakeup \\
        -e syscalls:sys_enter_fdatasync -e syscalls:sys_exit_fdatasync -a -o perf.data -- sleep 50 &
    scripts/txnbench replay --trace datasets/validation/omb-slow-2000.parquet --engine v5 \\
        --target URL --admin-url ADMIN --pulsar-dir DIR --pacing trace --out RUN --no-progress
    for t in /proc/$(cat DIR/pulsar.pid)/task/*; do echo "$(basename $t) $(cat $t/comm)"; done > THREADS
    perf script -i perf.data -F tid,cpu,time,event,trace > PERF
    .venv/bin/python -m benchmarks.gap_cores --perf-script PERF --events RUN/pulsar-events-v5.jsonl \\
        --threads THREADS --clock-offset "$(cat OFFSET)"

A gap runs from an END_TXN's answer to the answer of a new-txn the client sent while it was in
flight (both as the trace client timed them). Each gap's window starts 0.3 ms before the first and
ends 0.2 ms before the second, as session 47's reading did. The table gives, in ms of a core
within it:

- the broker's JIT (its compiler threads and code cache sweeper), the store's event thread
  (``metadata-store-event``, its name cut to ``metadata-store-`` in ``comm``: the one of those
  that syncs most), the broker's other threads, and other processes (the trace client's JVM,
  ``perf``);
- the connection's IO thread (the ``pulsar-io`` thread that syncs most, or ``--io-thread``) on a
  core, and runnable but waiting for one;
- the cores idle, of both cores' window.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from bench.pulsar.cpu import JIT_THREADS
from bench.report.client_events import events

JIT = (*JIT_THREADS, "Sweeper thread")  # HotSpot's compilers (as the broker runs count them) and code cache sweeper
EVENT = "metadata-store-"  # AbstractMetadataStore's notification executor, cut to 15
IO = "pulsar-io"
LEAD_US, TAIL_US = 300, 200  # the window: from before the END_TXN's answer to before the new-txn's

_LINE = re.compile(r"\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)")


@dataclass
class Schedule:
    """Per thread, its intervals on a core (``run``), runnable (``wait``) and in fdatasync, in µs of
    the recording's clock; and each CPU's intervals running the idle task (tid 0)."""
    run: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    wait: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    sync: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))


def parse(lines: Iterable[str]) -> Schedule:
    """``perf script -F tid,cpu,time,event,trace`` of the four events above: a thread is on a core
    from the switch to it to the switch away on that CPU, runnable from a wakeup (or a switch away
    in state R) to its next switch in, in fdatasync from its enter to its exit."""
    s = Schedule()
    since: dict[int, float] = {}  # CPU -> when its last switch was (what ran since is that switch's next)
    running: set[int] = set()  # threads on a core now (the idle task, tid 0, is never among them)
    ready: dict[int, float] = {}  # tid -> since when runnable
    syncing: dict[int, float] = {}
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        tid, cpu, t, event, rest = int(m[1]), int(m[2]), float(m[3]) * 1e6, m[4], m[5]
        if event == "sched:sched_switch":
            # a CPU runs one task from one switch to the next: each interval goes to the task it
            # switched from (the idle task runs as tid 0 on every idle CPU at once)
            prev, state = int(_field(rest, "prev_pid")), _field(rest, "prev_state")
            nxt = int(_field(rest, "next_pid"))
            if cpu in since:
                s.run[prev].append((since[cpu], t))
            since[cpu] = t
            running.discard(prev)
            if prev and state.startswith("R"):  # preempted: still runnable
                ready[prev] = t
            if nxt in ready:
                s.wait[nxt].append((ready.pop(nxt), t))
            if nxt:
                running.add(nxt)
        elif event == "sched:sched_wakeup":
            woken = int(_field(rest, " pid"))
            if woken not in running:
                ready.setdefault(woken, t)
        elif event.endswith("sys_enter_fdatasync"):
            syncing[tid] = t
        elif event.endswith("sys_exit_fdatasync") and tid in syncing:
            s.sync[tid].append((syncing.pop(tid), t))
    return s


def _field(trace: str, name: str) -> str:
    m = re.search(re.escape(name) + r"=(\S+)", trace)
    if m is None:
        raise ValueError(f"perf script: no {name.strip()}= in {trace!r}")
    return m[1]


def gaps(events: Iterable[dict]) -> tuple[float, list[tuple[int, int]]]:
    """(the client's t0, epoch ms; each gap as (its END_TXN's answer, the new-txn's answer) in µs
    after t0): a new-txn sent while one of the client's END_TXNs was in flight and answered after
    it, against the latest such END_TXN."""
    t0, ops = None, []
    for e in events:
        if e.get("ev") == "ready":
            t0 = e["t0_epoch_ms"]
        elif e.get("ev") == "op" and e.get("ok"):
            ops.append(e)
    if t0 is None:
        raise ValueError("pulsar events: no 'ready' event (the client's t0)")
    ends = [e for e in ops if e["op"] in ("commit", "abort")]
    out = []
    for n in (e for e in ops if e["op"] == "new_txn"):
        over = [c for c in ends if c["start_us"] <= n["start_us"] < c["end_us"] < n["end_us"]]
        if over:
            out.append((max(c["end_us"] for c in over), n["end_us"]))
    return t0, out


def _within(intervals: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)


def thread_of(names: dict[int, str], sched: Schedule, prefix: str) -> int | None:
    """The thread named ``prefix``... that made the most fdatasyncs (None: none of them did)."""
    synced = Counter({t: len(sched.sync.get(t, ())) for t, n in names.items() if n.startswith(prefix)})
    best = synced.most_common(1)
    return best[0][0] if best and best[0][1] > 0 else None


def breakdown(sched: Schedule, names: dict[int, str], io: int, event: int | None, lo: float,
              hi: float) -> dict[str, float]:
    """µs of a core within [lo, hi] per kind of thread (see the module doc), and the idle cores'."""
    out: defaultdict[str, float] = defaultdict(float)
    for tid, spans in sched.run.items():
        took = _within(spans, lo, hi)
        if not took:
            continue
        if tid == 0:
            kind = "idle"
        elif tid == io:
            kind = "io_run"
        elif tid == event:
            kind = "event"
        elif tid in names:
            kind = "jit" if names[tid].startswith(JIT) else "broker_rest"
        else:
            kind = "other_processes"
        out[kind] += took
    out["io_runnable"] = _within(sched.wait.get(io, ()), lo, hi)
    out["window"] = hi - lo
    return dict(out)


COLUMNS = ("jit", "event", "other_processes", "broker_rest", "io_run", "io_runnable", "idle")  # HEADER's order
HEADER = ("| gap, ms | the broker's JIT | the store's event thread | other processes | the broker's other threads "
          "| the IO thread on a core | the IO thread runnable | the cores idle, of both cores' window |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")


def table(sched: Schedule, names: dict[int, str], t0_epoch_ms: float, clock_offset_s: float,
          spans: list[tuple[int, int]], io: int, event: int | None) -> list[str]:
    """One markdown row per gap, shortest first (the recording's clock is the epoch less the offset)."""
    base = t0_epoch_ms * 1000 - clock_offset_s * 1e6
    rows = []
    for end_txn, new_txn in sorted(spans, key=lambda g: g[1] - g[0]):
        b = breakdown(sched, names, io, event, base + end_txn - LEAD_US, base + new_txn - TAIL_US)
        ms = {k: v / 1000 for k, v in b.items()}
        cells = [(new_txn - end_txn) / 1000] + [ms.get(k, 0.0) for k in COLUMNS]
        rows.append("| " + " | ".join(f"{c:.2f}" for c in cells) + f" of {2 * ms['window']:.2f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gap_cores", description=__doc__.split("\n\n")[0])
    ap.add_argument("--perf-script", type=Path, required=True, help="perf script -F tid,cpu,time,event,trace output")
    ap.add_argument("--events", type=Path, required=True, help="the paced run's pulsar-events-v5.jsonl")
    ap.add_argument("--threads", type=Path, required=True, help='the broker\'s "tid comm" lines, as /proc gives them')
    ap.add_argument("--clock-offset", type=float, required=True,
                    help="time.time() - time.monotonic() when perf recorded (perf record -k CLOCK_MONOTONIC)")
    ap.add_argument("--io-thread", type=int,
                    help="the connection's IO thread (default: the pulsar-io thread that synced most)")
    args = ap.parse_args(argv)
    try:
        names = {int(t): n.strip() for t, n in (line.split(" ", 1) for line in args.threads.read_text().splitlines()
                                                if line.strip())}
        with args.perf_script.open() as f:
            sched = parse(f)
        if not args.events.is_file():
            raise ValueError(f"{args.events}: no such events file")
        t0, spans = gaps(events(args.events, '"ev"'))
    except (OSError, ValueError) as e:
        print(f"gap_cores: {e}", file=sys.stderr)
        return 2
    io = args.io_thread or thread_of(names, sched, IO)
    if io is None:
        print(f"gap_cores: no {IO} thread of {args.threads} made an fdatasync in {args.perf_script}", file=sys.stderr)
        return 2
    print(HEADER)
    print("\n".join(table(sched, names, t0, args.clock_offset, spans, io, thread_of(names, sched, EVENT))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
