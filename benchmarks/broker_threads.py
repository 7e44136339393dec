"""Where a Pulsar broker's threads spend a saturated run: the evidence behind the model's metadata
writes queueing per broker thread (``metadata_v5.txnrecords.IO`` / ``EVENT``, issue 17)::

    .venv/bin/python -m benchmarks.broker_threads --pulsar-dir DIR
    .venv/bin/python -m benchmarks.broker_threads --pulsar-dir DIR --trace datasets/validation/many-participants-2000-s2.parquet

With the broker of ``scripts/pulsar.sh start DIR`` running, it starts a flight recording in it
(``jcmd PID JFR.start``, the JDK's ``profile`` settings with Java and native stack samples every
millisecond), replays ``--trace`` through it as fast as possible (``txnbench replay --target ...
--pacing asap``, one design), stops the recording and prints, per broker thread, its samples over
the run's txn phase (from the first new_txn issued to the last commit answered, as
``bench.replay.measure.committed_rate`` counts): the share waiting (epoll, park, accept), inside
RocksDB's ``Transaction.commit`` (a metadata store write), inside the store's child listings (the
emulated index scans), and busy otherwise. The shares are rough: JFR takes Java samples of a few
threads per period and native samples of one, so a thread's Java and native time are sampled at
different rates (``benchmarks/broker_cpu.py`` reads each thread's CPU time instead). Run it on a
warmed-up broker (one discarded run first,
as ``validate`` does), nothing else running. Not part of the tests.

``--after-end-txn`` replays at the trace's pace instead (``--pacing trace``) and prints, per broker
thread, its working samples per second of each window around the client's END_TXNs: during one,
0-5, 5-10 and 10-50 ms after the latest one's answer, and the rest (:func:`by_window`). That is how
the store's event thread was found to be the broker's busiest for 10 ms after each v5 END_TXN
(datasets/validation/README.md, session 42)::

    .venv/bin/python -m benchmarks.broker_threads --pulsar-dir DIR --trace datasets/validation/omb-slow-2000.parquet --after-end-txn

Sample counts are not core shares (a few threads a period, above). ``--after-end-txn --cpu`` reads
each broker thread's CPU time instead, every half millisecond while the run goes (the first field
of ``/proc/PID/task/TID/schedstat``: ns on a CPU), and prints the share of a core each thread
worked in each window (:func:`cpu_by_window`). That is how the store's event thread was measured
at a third to two thirds of a core for 10 ms after each v5 answer, and the client's IO thread at
36-63 % of one during an END_TXN (datasets/validation/README.md, session 43). It also prints, per
thread and window, the share it was runnable but waited for a core (schedstat's second field): how
the v5 requests queued behind an END_TXN were found waiting for a core, not for the IO thread's
queue (datasets/validation/README.md, session 47); and the same two for the trace client's JVM,
its threads together, and the machine's busy cores, for what else the broker's threads share the
cores with.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bench.pulsar.client import MAIN_CLASS
from bench.pulsar.cpu import machine_cpu_s, txn_phase as run_txn_phase

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "datasets" / "samples" / "small.parquet"
# a sample whose top frame is one of these is a thread waiting, not working
WAITING = frozenset({"epollWait0", "epollWait", "wait", "park", "sleep", "accept", "accept0", "poll", "poll0",
                     "select", "doSelect", "read0", "socketAccept"})
KINDS = ("waiting", "commit", "listing", "busy")
# windows around the client's END_TXNs (by_window): during one, then ms after the latest one's answer
WINDOWS = ("during", "0-5 ms", "5-10 ms", "10-50 ms", "rest")
_AFTER = ((5.0, "0-5 ms"), (10.0, "5-10 ms"), (50.0, "10-50 ms"))


def classify(frames: list[dict[str, Any]]) -> str:
    """One stack sample (JFR's frames, innermost first) as one of :data:`KINDS`."""
    if not frames or frames[0]["method"]["name"] in WAITING:
        return "waiting"
    names = [(f["method"]["type"]["name"], f["method"]["name"]) for f in frames]
    if any(t == "org/rocksdb/Transaction" and m == "commit" for t, m in names):
        return "commit"
    if any(m in ("getChildrenFromStore", "storeScanByIndex") or "storeScanByIndex" in m for _, m in names):
        return "listing"
    return "busy"


def _epoch_ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def txn_phase(events: Iterable[dict[str, Any]]) -> tuple[float, float]:
    """The run's txn phase in epoch milliseconds, from the trace client's events."""
    phase = run_txn_phase(events)
    if phase is None:
        raise SystemExit("broker_threads: the run's events hold no txn phase (no ready line, new_txn or commit)")
    return phase


def _thread(sample: dict[str, Any]) -> str:
    """A sample's thread name (its Java name, else the OS's)."""
    return sample["sampledThread"]["javaName"] or sample["sampledThread"].get("osName") or "?"


def tally(samples: Iterable[dict[str, Any]], lo_ms: float, hi_ms: float) -> dict[str, Counter[str]]:
    """Per thread, its samples in [lo_ms, hi_ms] by kind."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for s in samples:
        v = s["values"]
        if not lo_ms <= _epoch_ms(v["startTime"]) <= hi_ms:
            continue
        thread = _thread(v)
        out[thread][classify(v["stackTrace"]["frames"] if v.get("stackTrace") else [])] += 1
    return out


def methods(samples: Iterable[dict[str, Any]], lo_ms: float, hi_ms: float, thread: str) -> tuple[int, Counter[str]]:
    """``thread``'s working samples in [lo_ms, hi_ms], and per broker method (``org.apache.pulsar``
    classes) the samples with it anywhere on the stack (inclusive, once per sample)."""
    n, out = 0, Counter[str]()
    for s in samples:
        v = s["values"]
        if _thread(v) != thread or not lo_ms <= _epoch_ms(v["startTime"]) <= hi_ms:
            continue
        frames = v["stackTrace"]["frames"] if v.get("stackTrace") else []
        if classify(frames) == "waiting":
            continue
        n += 1
        out.update({f"{f['method']['type']['name'].rsplit('/', 1)[-1]}.{f['method']['name']}"
                    for f in frames if f["method"]["type"]["name"].startswith("org/apache/pulsar/")})
    return n, out


def end_txns(events: Iterable[dict[str, Any]]) -> list[tuple[float, float]]:
    """The run's END_TXNs answered (commits and aborts), each (asked, answered) in epoch ms."""
    t0, out = None, []
    for e in events:
        if e.get("ev") == "ready":
            t0 = e["t0_epoch_ms"]
        elif (e.get("ev") == "op" and e.get("op") in ("commit", "abort") and e.get("ok")
              and e.get("end_us") is not None and t0 is not None):
            out.append((t0 + e["start_us"] / 1000, t0 + e["end_us"] / 1000))
    return sorted(out)


class Windows:
    """Which of :data:`WINDOWS` an instant falls in, given a run's END_TXNs (each from its asking
    up to its answer), by bisection: the union of their spans, and their answers, sorted."""

    def __init__(self, ends: list[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(ends):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self._starts = [a for a, _ in merged]
        self._stops = [b for _, b in merged]
        self._answers = sorted(b for _, b in ends)

    def of(self, t_ms: float) -> str:
        i = bisect.bisect_right(self._starts, t_ms)
        if i and t_ms < self._stops[i - 1]:
            return "during"
        j = bisect.bisect_right(self._answers, t_ms)
        if j:
            after = t_ms - self._answers[j - 1]
            for limit, name in _AFTER:
                if after < limit:
                    return name
        return "rest"


def by_window(samples: Iterable[dict[str, Any]], ends: list[tuple[float, float]], lo_ms: float, hi_ms: float,
              step_us: int = 100) -> tuple[dict[str, float], dict[str, Counter[str]]]:
    """(each window's length in ms over [lo_ms, hi_ms), measured on a grid of ``step_us``; per
    thread, its working samples in each window)."""
    windows = Windows(ends)
    lo_us, hi_us = round(lo_ms * 1000), round(hi_ms * 1000)
    length = Counter(windows.of(t_us / 1000) for t_us in range(lo_us, hi_us, step_us))
    lengths = {w: length[w] * step_us / 1000 for w in WINDOWS}
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for s in samples:
        v = s["values"]
        t = _epoch_ms(v["startTime"])
        if not lo_ms <= t <= hi_ms or classify(v["stackTrace"]["frames"] if v.get("stackTrace") else []) == "waiting":
            continue
        out[_thread(v)][windows.of(t)] += 1
    return lengths, out


# CPU time samples: (epoch ms, per thread id its ns on a CPU so far)
CpuSample = tuple[float, dict[str, int]]
CPU_PERIOD_S = 0.0005
# the threads --cpu reads (name prefixes): reading all of a broker's 170 every half millisecond
# would take a core of the two; these are the store's, the connections', the bookie's, the managed
# ledgers', the transaction components', the broker's own client's, the JIT's and the GC's
CPU_THREADS = ("metadata-store", "pulsar-io", "BookieJournal", "ForceWrite", "bookie-io", "BookKeeperClien",
               "bookkeeper-ml", "pulsar-ordered", "pulsar-transact", "pulsar-txn", "broker-client", "scalable-segmen",
               "SyncThread", "rocksdb:high", "C1 ", "C2 ", "GC Thread")


# the whole machine's busy time in a CpuSample: /proc/stat counts it in ticks of 10 ms, so a window's
# share is the ticks its intervals met, a rough figure over a short run
MACHINE = "(the machine)"
# the trace client's JVM, its threads together, read less often than the broker's: it has ~40, and the
# readings take the cores they measure (read every 2 ms, the machine was 1.32 of a core busy away from
# END_TXNs, against 1.09 every 10 ms)
CLIENT = "(the trace client's JVM)"
CLIENT_PERIOD_S = 0.01


def cpu_by_window(samples: list[CpuSample], names: dict[str, str], ends: list[tuple[float, float]],
                  lo_ms: float, hi_ms: float) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(each window's length in ms over [lo_ms, hi_ms]; per thread name, the ms it worked on a CPU
    in each window). Between two samples, each thread's CPU time and the interval's length go to
    the window of the interval's midpoint; threads of one name (``names``: id -> name) add up."""
    windows = Windows(ends)
    lengths: dict[str, float] = {w: 0.0 for w in WINDOWS}
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        mid = (t0 + t1) / 2
        if not lo_ms <= mid <= hi_ms:
            continue
        w = windows.of(mid)
        lengths[w] += t1 - t0
        for tid, ns in b.items():
            if tid in a and ns > a[tid]:
                per[names.get(tid, tid)][w] += (ns - a[tid]) / 1e6
    return lengths, {n: dict(c) for n, c in per.items()}


def _thread_names(pid: str) -> dict[str, str]:
    """The broker's threads: id -> name (the kernel's 15 characters, numbers left out)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = re.sub(r"[-#]?\d+$", "", Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
        except OSError:
            continue  # ended meanwhile
    return out


def _sample_cpu(pid: str, tids: Iterable[str], into: list[CpuSample], waits: list[CpuSample],
                stop: threading.Event) -> None:
    """Append a :data:`CpuSample` of ``tids`` every :data:`CPU_PERIOD_S` until ``stop``: to ``into``
    their time on a CPU, to ``waits`` their time runnable but waiting for one (schedstat's first
    two fields: ns on a CPU, ns waiting on a run queue); and in ``into`` the whole machine's busy
    time as :data:`MACHINE` (``/proc/stat``: the trace client's JVM and the threads not read too)."""
    files = {}
    for tid in tids:
        try:
            files[tid] = open(f"/proc/{pid}/task/{tid}/schedstat", "rb", buffering=0)
        except OSError:
            continue
    try:
        while not stop.is_set():
            row, waited = {}, {}
            for tid, f in list(files.items()):
                try:
                    f.seek(0)
                    on_cpu, queued = f.read().split()[:2]
                    row[tid], waited[tid] = int(on_cpu), int(queued)
                except (OSError, ValueError):
                    files.pop(tid).close()  # the thread ended
            row[MACHINE] = round(machine_cpu_s()[0] * 1e9)
            now = time.time() * 1000
            into.append((now, row))
            waits.append((now, waited))
            time.sleep(CPU_PERIOD_S)
    finally:
        for f in files.values():
            f.close()


def client_pid(main_class: str = MAIN_CLASS) -> str | None:
    """The trace client's JVM (the process whose command line holds ``main_class``), or None."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if main_class.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue  # ended meanwhile
    return None


def process_schedstat(pid: str) -> tuple[int, int] | None:
    """A process's threads together: (ns on a CPU, ns waiting on a run queue), or None once it ended."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    on_cpu = queued = 0
    for tid in tids:
        try:
            a, b = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:2]
        except (OSError, ValueError):
            continue  # a thread that ended between the listing and the read
        on_cpu, queued = on_cpu + int(a), queued + int(b)
    return on_cpu, queued


def _sample_client(into: list[CpuSample], waits: list[CpuSample], stop: threading.Event,
                   main_class: str = MAIN_CLASS) -> None:
    """Until ``stop``: once the trace client's JVM has started (:func:`client_pid`), append its
    threads' time on a CPU and waiting for one, together, as :data:`CLIENT`, every
    :data:`CLIENT_PERIOD_S` (its threads are many and come and go: each reading lists them)."""
    pid = None
    while pid is None and not stop.wait(0.02):
        pid = client_pid(main_class)
    while pid is not None and not stop.is_set():
        read = process_schedstat(pid)
        if read is None:
            return
        now = time.time() * 1000
        into.append((now, {CLIENT: read[0]}))
        waits.append((now, {CLIENT: read[1]}))
        time.sleep(CLIENT_PERIOD_S)


def running_broker(d: Path, prog: str) -> tuple[str, str, str]:
    """The broker of ``scripts/pulsar.sh start DIR``: its pid, service URL and admin URL."""
    try:
        pid, url, admin = ((d / f).read_text().strip() for f in ("pulsar.pid", "url", "admin-url"))
    except OSError as e:
        raise SystemExit(f"{prog}: no running broker in {d} ({e}); start one with scripts/pulsar.sh start DIR")
    return pid, url, admin


def _settings(into: Path) -> Path:
    """The JDK's ``profile`` settings with stack samples every millisecond."""
    home = re.search(r"java\.home = (\S+)", subprocess.run(["java", "-XshowSettings:properties", "-version"],
                                                          capture_output=True, text=True).stderr)
    if home is None:
        raise SystemExit("broker_threads: java.home not found (is a JDK on PATH?)")
    text = (Path(home.group(1)) / "lib" / "jfr" / "profile.jfc").read_text()
    for event in ("jdk.ExecutionSample", "jdk.NativeMethodSample"):
        text = re.sub(rf'(<event name="{event}">.*?<setting name="period"[^>]*>)[^<]*(</setting>)', r"\g<1>1 ms\2",
                      text, flags=re.S)
    path = into / "samples-1ms.jfc"
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.broker_threads", description=__doc__.split("\n")[0])
    ap.add_argument("--pulsar-dir", required=True, type=Path, help="the broker's scripts/pulsar.sh DIR (running)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="the trace to replay as fast as possible")
    ap.add_argument("--design", choices=("v4", "v5"), default="v5")
    ap.add_argument("--top", type=int, default=8, help="threads shown, the busiest first (default 8)")
    ap.add_argument("--methods", type=int, default=0, metavar="N",
                    help="also the N broker methods most often on the two busiest threads' working stacks")
    ap.add_argument("--keep", type=Path, help="copy the recording (.jfr) here")
    ap.add_argument("--after-end-txn", action="store_true",
                    help="replay at the trace's pace and show each thread's working samples per second around "
                         "the END_TXNs: during one, 0-5, 5-10, 10-50 ms after the latest answer, the rest")
    ap.add_argument("--cpu", action="store_true",
                    help="with --after-end-txn: the CPU time (schedstat, every 0.5 ms) of the broker's threads in "
                         "CPU_THREADS instead of the flight recording's samples: the share of a core each worked, "
                         "and waited for one, in each window; the same for the trace client's JVM, and the "
                         "machine's busy cores")
    args = ap.parse_args(argv)
    if args.cpu and not args.after_end_txn:
        ap.error("--cpu goes with --after-end-txn")
    pid, url, admin = running_broker(args.pulsar_dir, "broker_threads")
    if args.cpu:
        return _cpu_windows(args, pid, url, admin)
    with tempfile.TemporaryDirectory(prefix="txnbench-threads-") as tmp_s:
        tmp = Path(tmp_s)
        recording = tmp / "broker.jfr"
        subprocess.run(["jcmd", pid, "JFR.start", "name=txnbench-threads", f"settings={_settings(tmp)}"],
                       check=True, capture_output=True)
        try:
            run_events = _replay(args, url, admin, tmp / "run", "trace" if args.after_end_txn else "asap")
        finally:
            subprocess.run(["jcmd", pid, "JFR.stop", "name=txnbench-threads", f"filename={recording}"],
                           check=True, capture_output=True)
        lo, hi = txn_phase(run_events)
        printed = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample,jdk.NativeMethodSample",
                                  str(recording)], check=True, capture_output=True, text=True).stdout
        if args.keep:
            shutil.copyfile(recording, args.keep)
    events = json.loads(printed)["recording"]["events"]
    if args.after_end_txn:
        return _print_windows(args, events, end_txns(run_events), lo, hi)
    per = tally(events, lo, hi)
    print(f"{args.trace.name}, {args.design}, as fast as possible: txn phase {hi - lo:.0f} ms; broker threads by "
          "share of their samples in it")
    print(f"{'thread':<48} {'samples':>7}  " + "  ".join(f"{k:>8}" for k in KINDS))
    for thread, c in sorted(per.items(), key=lambda kv: -(sum(kv[1].values()) - kv[1]["waiting"]))[:args.top]:
        n = sum(c.values())
        print(f"{thread[:48]:<48} {n:>7}  " + "  ".join(f"{100 * c[k] / n:>7.0f}%" for k in KINDS))
    busiest = sorted(per, key=lambda t: per[t]["waiting"] - sum(per[t].values()))[:2]
    for thread in busiest if args.methods else ():
        n, c = methods(events, lo, hi, thread)
        print(f"\n{thread}: broker methods on its {n} working samples (inclusive)")
        for name, k in c.most_common(args.methods):
            print(f"  {100 * k / max(n, 1):5.1f}%  {name}")
    return 0


def _print_windows(args: argparse.Namespace, events: list[dict[str, Any]], ends: list[tuple[float, float]],
                   lo: float, hi: float) -> int:
    lengths, per = by_window(events, ends, lo, hi)
    print(f"{args.trace.name}, {args.design}, at the trace's pace: txn phase {hi - lo:.0f} ms, {len(ends)} END_TXNs; "
          "broker threads' working samples per second of each window (ms of it)")
    _window_table(lengths, sorted(per.items(), key=lambda kv: -sum(kv[1].values()))[:args.top], 1000, ".1f")
    return 0


def _replay(args: argparse.Namespace, url: str, admin: str, out: Path, pacing: str) -> list[dict[str, Any]]:
    """Replay ``--trace`` through the broker (one design, at ``pacing``) into ``out``: the trace
    client's events."""
    subprocess.run([str(ROOT / "scripts" / "txnbench"), "replay", "--trace", str(args.trace), "--engine", args.design,
                    "--target", url, "--admin-url", admin, "--pacing", pacing, "--out", str(out), "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in (out / f"pulsar-events-{args.design}.jsonl").read_text().splitlines()]


def _window_table(lengths: dict[str, float], rows: Sequence[tuple[str, Mapping[str, float]]], per_ms: float,
                  fmt: str) -> None:
    """The windows' lengths (ms), then each row's amount per ms of each window times ``per_ms``."""
    print(f"{'thread':<48} " + "  ".join(f"{w:>8}" for w in WINDOWS))
    print(f"{'':<48} " + "  ".join(f"{lengths[w]:>8.0f}" for w in WINDOWS))
    for name, c in rows:
        print(f"{name[:48]:<48} " + "  ".join(
            f"{per_ms * c.get(w, 0) / lengths[w]:>8{fmt}}" if lengths[w] else f"{'-':>8}" for w in WINDOWS))


def _on_grid(readings: list[CpuSample], ends: list[tuple[float, float]], lo: float, hi: float,
             lengths: dict[str, float]) -> dict[str, float]:
    """:data:`CLIENT`'s ms per window from its own ``readings``, scaled to the windows' ``lengths``
    of the broker's readings (the client is read on a grid of its own, less often), so that
    :func:`_window_table` divides it back into the share of the time its readings spanned."""
    own, per = cpu_by_window(readings, {CLIENT: CLIENT}, ends, lo, hi)
    return {w: v * lengths[w] / own[w] for w, v in per.get(CLIENT, {}).items() if own[w]}


def _cpu_windows(args: argparse.Namespace, pid: str, url: str, admin: str) -> int:
    names = {tid: n for tid, n in _thread_names(pid).items() if n.startswith(CPU_THREADS)} | {MACHINE: MACHINE}
    samples: list[CpuSample] = []
    waits: list[CpuSample] = []
    stop = threading.Event()
    tids = [t for t in names if t != MACHINE]
    sampler = threading.Thread(target=_sample_cpu, args=(pid, tids, samples, waits, stop), daemon=True)
    client: list[CpuSample] = []
    client_waits: list[CpuSample] = []
    client_sampler = threading.Thread(target=_sample_client, args=(client, client_waits, stop), daemon=True)
    with tempfile.TemporaryDirectory(prefix="txnbench-threads-") as tmp_s:
        sampler.start()
        client_sampler.start()
        try:
            run_events = _replay(args, url, admin, Path(tmp_s) / "run", "trace")
        finally:
            stop.set()
            sampler.join()
            client_sampler.join()
    lo, hi = txn_phase(run_events)
    ends = end_txns(run_events)
    lengths, per = cpu_by_window(samples, names, ends, lo, hi)
    print(f"{args.trace.name}, {args.design}, at the trace's pace: txn phase {hi - lo:.0f} ms, {len(ends)} END_TXNs, "
          f"{len(samples)} CPU samples; the share of a core each broker thread worked in each window (ms of it)")
    machine = per.pop(MACHINE, {})
    total = {w: sum(c.get(w, 0.0) for c in per.values()) for w in WINDOWS}
    rows = sorted(per.items(), key=lambda kv: -sum(kv[1].values()))[:args.top]
    client_share, client_wait = (_on_grid(readings, ends, lo, hi, lengths) for readings in (client, client_waits))
    _window_table(lengths, [*rows, ("(the threads read, together)", total), (CLIENT, client_share),
                            ("(the machine, all cores: /proc/stat's ticks)", machine)], 1, ".3f")
    _, waited = cpu_by_window(waits, names, ends, lo, hi)
    print("\nthe share of each window the same threads were runnable but waited for a core (the run "
          "queue's wait, schedstat's second field)")
    _window_table(lengths, [*((name, waited.get(name, {})) for name, _ in rows), (CLIENT, client_wait)], 1, ".3f")
    return 0


if __name__ == "__main__":
    sys.exit(main())
