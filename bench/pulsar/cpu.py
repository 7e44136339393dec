"""Who used the machine's CPU while the trace client ran: the broker's process against the rest.

On one machine the trace client (a JVM started for each run) shares the cores with the broker, so
an as-fast-as-possible run is limited by whichever runs out first: the broker, or the client. A
run records, over its txn phase (the first new_txn issued to the last commit or abort answered,
as ``bench.replay.measure.committed_rate`` counts the rate), how many cores the machine kept busy
and how many of them were the broker's process (``/proc/PID/stat``: user + system ticks; the
broker's pid from ``scripts/pulsar.sh``'s DIR), and of those the v5 coordinator's sweep thread's.
Sampled every 20 ms by a thread beside the client; the ticks are 10 ms, so a phase of a few
hundred ms reads to about 10 %.

The sweep thread is the broker's own background work that lands in runs at random. Its timeout
sweep (every 60 s) and GC sweep (every 300 s after the last one ended, retention 900 s) scan the
store by listing (``TransactionCoordinatorV5.sweepTimeouts``/``sweepGc``/``gcOneTxn``; on RocksDB
``AbstractMetadataStore.storeScanByIndex`` lists every key under ``/txn/op``, the never-deleted
sequence counters included, once per GC candidate). Once finalized txns outlived the retention,
a GC sweep used 12-56 s of CPU, up to a minute of one core (2026-11-27, a broker whose v5
coordinator had run some 6,500 txns). So a broker run first waits for that thread to be idle
(:func:`await_sweep_idle`), and records its cores.

So is the broker's JIT compiler (HotSpot's C1 and C2 compiler threads, which it starts and stops as
its queue needs). On a fresh broker they took most of its CPU in the first asap runs of small's
saturation trace, and its v4 rate rose as they fell: 396 txn/s with 1,123 µs of a compiler core
per txn, 1,808 with none, 1,162 again when they came back for 292 (2026-11-28, twelve runs;
datasets/validation/README.md, session 34). A run records their cores beside the broker's.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable

PERIOD_S = 0.02
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
# TransactionCoordinatorV5's sweeps run on one thread, DefaultThreadFactory("pulsar-txn-v5-sweep");
# Linux keeps the first 15 bytes of a thread's name
SWEEP_THREAD = "pulsar-txn-v5-sweep"[:15]
SWEEP_WINDOW_S = 0.25  # an idle sweep thread: under IDLE_SHARE of a core over one such window
IDLE_SHARE = 0.3
SWEEP_WAIT_LIMIT_S = 300.0  # a GC sweep took up to 62 s; past this a run goes ahead and says how long it waited
# HotSpot's compiler threads ("C1 CompilerThread0", "C2 CompilerThread1", ...), as Linux truncates them
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
RESCAN_EVERY = 25  # samples between looks for compiler threads started since (about every 0.5 s)


def stat_cpu_s(stat: str) -> float:
    """User + system CPU seconds from a ``/proc/PID/stat`` or ``/proc/PID/task/TID/stat`` line."""
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime (fields 14 and 15 of proc(5))


def process_cpu_s(pid: str) -> float | None:
    """CPU seconds (user + system, all threads) of process ``pid`` so far; None once it is gone."""
    try:
        return stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def threads_cpu_s(pid: str) -> dict[str, float]:
    """Per thread name (same-named threads summed), the CPU seconds of process ``pid``'s threads so
    far; empty once it is gone."""
    out: dict[str, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        out[name] = out.get(name, 0.0) + stat_cpu_s(stat)
    return out


def threads(pid: str) -> list[tuple[str, str]]:
    """(id, name) of process ``pid``'s threads, by id; none once it is gone."""
    try:
        tasks = sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name))
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            found.append((task.name, (task / "comm").read_text().strip()))
        except OSError:
            continue  # the thread ended
    return found


def thread_id(pid: str, name: str) -> str | None:
    """The id of process ``pid``'s (first) thread named ``name``; None if it has none, or is gone."""
    return next((tid for tid, comm in threads(pid) if comm == name), None)


def task_cpu_s(pid: str, tid: str) -> float | None:
    """CPU seconds of one thread so far; None once it is gone."""
    try:
        return stat_cpu_s(Path(f"/proc/{pid}/task/{tid}/stat").read_text())
    except OSError:
        return None


def await_sweep_idle(pid: str | None, limit_s: float = SWEEP_WAIT_LIMIT_S,
                     window_s: float = SWEEP_WINDOW_S) -> float | None:
    """Wait until the broker's sweep thread (:data:`SWEEP_THREAD`) used under :data:`IDLE_SHARE` of
    a core over a window, or ``limit_s`` passed; returns the seconds waited beyond the first
    window (0.0: idle at once), None without a broker pid or a sweep thread."""
    tid = thread_id(pid, SWEEP_THREAD) if pid else None
    if pid is None or tid is None:
        return None
    start = time.monotonic()
    while True:
        before = task_cpu_s(pid, tid)
        time.sleep(window_s)
        after = task_cpu_s(pid, tid)
        waited = time.monotonic() - start - window_s
        if before is None or after is None or after - before < IDLE_SHARE * window_s or waited >= limit_s:
            return round(max(waited, 0.0), 2)


def machine_cpu_s() -> tuple[float, float]:
    """The machine's CPU seconds so far, over all cores: (busy, all); from ``/proc/stat``."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) * TICK_S, sum(ticks) * TICK_S


def txn_phase(events: Iterable[dict[str, Any]], first: Iterable[str] = ("new_txn",),
              last: Iterable[str] = ("commit", "abort"), deliveries: bool = False) -> tuple[float, float] | None:
    """The run's txn phase in epoch milliseconds, from the trace client's events: from the first op
    of a kind in ``first`` issued to the last of a kind in ``last`` answered (other kinds: another
    phase, as a run's sends), or with ``deliveries`` to the last delivery when that is later (a
    backlog the subscriptions still work off); None without one."""
    firsts, lasts = frozenset(first), frozenset(last)
    t0, starts, ends, delivered = None, [], [], 0
    for e in events:
        ev = e.get("ev")
        if ev == "ready":
            t0 = e["t0_epoch_ms"]
        elif ev == "op":
            if e.get("op") in firsts:
                starts.append(e["start_us"])
            if e.get("op") in lasts:
                ends.append(e["end_us"])
        elif ev == "deliver" and deliveries:
            delivered = max(delivered, e["t_us"])
    if t0 is None or not starts or not ends:
        return None
    return t0 + min(starts) / 1000, t0 + max(max(ends), delivered) / 1000


class CpuSampler:
    """Samples (epoch ms, the broker's CPU s or None, machine busy s, machine all s, the broker's
    sweep thread's CPU s or None, its compiler threads' CPU s or None) every :data:`PERIOD_S` from
    ``start`` to ``stop``; :meth:`over` gives a window's use."""

    def __init__(self, broker_pid: str | None) -> None:
        self.pid = broker_pid
        self.sweep = thread_id(broker_pid, SWEEP_THREAD) if broker_pid else None
        self.samples: list[tuple[float, float | None, float, float, float | None, float | None]] = []
        # the compiler threads seen and running: their CPU s when last read; and what the ones gone had
        self._jit: dict[str, float] = {}
        self._jit_gone = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txnbench-cpu", daemon=True)

    def __enter__(self) -> "CpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        n = 0
        while True:
            busy, every = machine_cpu_s()
            self.samples.append((time.time() * 1000, process_cpu_s(self.pid) if self.pid else None, busy, every,
                                 task_cpu_s(self.pid, self.sweep) if self.pid and self.sweep else None,
                                 self._jit_cpu_s(rescan=n % RESCAN_EVERY == 0)))
            n += 1
            if self._stop.wait(PERIOD_S):
                return

    def _jit_cpu_s(self, rescan: bool) -> float | None:
        """The CPU seconds of the broker's compiler threads seen so far; None without a pid. One
        found at a later look counts in full there (it started since the look before); one that is
        gone, or whose id a new thread took (its CPU went down), keeps what it had."""
        if not self.pid:
            return None
        if rescan:
            for tid, comm in threads(self.pid):
                if comm.startswith(JIT_THREADS):
                    self._jit.setdefault(tid, 0.0)
        for tid, was in list(self._jit.items()):
            now = task_cpu_s(self.pid, tid)
            if now is None or now < was:
                del self._jit[tid]
                self._jit_gone += was
            else:
                self._jit[tid] = now
        return self._jit_gone + sum(self._jit.values())

    def over(self, lo_ms: float, hi_ms: float) -> dict[str, Any] | None:
        """Cores used over [lo_ms, hi_ms] (the samples inside it): ``machine_busy_cores``,
        ``broker_cores`` (None without the broker's pid), ``sweep_cores`` (of the broker's, its
        sweep thread's; None without one), ``jit_cores`` (of the broker's, its compiler threads';
        None without the broker's pid), ``cores`` and ``span_ms``; None when fewer than two
        samples fall inside."""
        inside = [s for s in self.samples if lo_ms <= s[0] <= hi_ms]
        if len(inside) < 2:
            return None
        (t0, b0, busy0, all0, s0, j0), (t1, b1, busy1, all1, s1, j1) = inside[0], inside[-1]
        cores = os.cpu_count() or 1
        wall_s = (all1 - all0) / cores  # the machine's clock, in the same ticks as the rest
        if wall_s <= 0:
            return None
        return {"span_ms": round(t1 - t0, 1), "cores": cores,
                "machine_busy_cores": round((busy1 - busy0) / wall_s, 2),
                "broker_cores": None if b0 is None or b1 is None else round((b1 - b0) / wall_s, 2),
                "sweep_cores": None if s0 is None or s1 is None else round((s1 - s0) / wall_s, 2),
                "jit_cores": None if j0 is None or j1 is None else round((j1 - j0) / wall_s, 2)}


def broker_pid(pulsar_dir: Path | None) -> str | None:
    """The pid ``scripts/pulsar.sh`` wrote in DIR, if that process is running; else None."""
    if pulsar_dir is None:
        return None
    try:
        pid = (Path(pulsar_dir) / "pulsar.pid").read_text().strip()
    except OSError:
        return None
    return pid if pid.isdigit() and process_cpu_s(pid) is not None else None
