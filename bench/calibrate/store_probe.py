"""The emulated store's scan, timed with the broker's own classes outside the broker.

An END_TXN's ``listOpsByTxn`` on the RocksDB store a standalone broker runs is a listing of every
key under ``/txn/op`` (``RocksdbMetadataStore.getChildrenFromStore`` L494 on) and then one
``storeGet`` per op record, serially (``AbstractMetadataStore.storeScanByIndex`` M1 L624-660).
Those GETs bypass ``MetadataStoreStats``, so no broker metric times them; the model billed each as
a ``meta.read`` (the metric's ``get``: 21 µs p50 in the default profile). The JVM program
``txnbench.probe.StoreProbe`` (jvm/src/txnbench/probe) opens a ``RocksdbMetadataStore`` in a scratch
folder, writes op records with ``TxnMetadataStore.appendOp`` for ``history`` txns, deletes all but
``live`` of them (their sequence counters stay, as in the broker), and times the scan, the listing
alone, and each ``storeGet``, with the JIT warmed first.

``meta.scan_get`` is the quantiles of single ``storeGet`` calls at the largest (history, live)
measured with one op per txn. The listing's walk is recorded beside it but not billed from here
(``meta.list_keys`` stays fitted to the broker's saturated rates, bench.calibrate.saturation):
per thousand keys it returns with one op per txn (``walk_us_per_thousand``), per thousand keys
at each ops per txn measured (``walk_us_per_thousand_by_ops``), and split by least squares into
a cost per key returned and one per hidden entry (``walk_fit``). The iterator passes every entry
RocksDB's memtable holds under ``/txn/op``: each txn's counter, created and then updated once per
further op, and each deleted record's put and tombstone (the broker's memtable never flushed in
a session here: validation/README.md), so a history of txns with many ops walks slower per key.

Two costs on the store's notification thread are measured beside it:

* ``decode_us_per_record``: a transaction buffer's cleanup scan (``listWritesBySegment``) decodes
  each record's JSON in its filter (``TxnMetadataStore`` L142-151), where the END_TXN's
  (``listOpsByTxn``) matches the path; the difference of the two scans per record. Recorded, not
  billed: it is about one ``storeGet`` (validation/README.md, session 29).
* ``notify``: ``txnbench.probe.NotifyProbe`` times the store's notification fan-out. Each put and
  delete queues a notification on the single event thread, and a create or delete one
  ``ChildrenChanged`` per ancestor (``RocksdbMetadataStore`` L579-580, L640-643;
  ``AbstractMetadataStore.notifyParentChildrenChanged`` L1044-1049), and each runs every listener
  the store holds (``receivedNotification`` L421-437): a broker holds one ``subscribeSequence``
  watcher per transaction buffer and pending-ack store it has loaded. ``notify_fit``: µs per
  notification as a base plus a cost per listener, and the notifications a key created or
  deleted under ``/txn/op`` queues; the cost per listener is ``meta.notify`` (:func:`notify_spec`).
* ``handoff``: the same program puts keys one at a time on the idle store and times each from its
  call to its return (``put_us``) and to the start of its listener (``listener_us``).
  ``RocksdbMetadataStore.storePut`` calls ``receivedNotification`` right after its transaction
  commits, which hands the listeners to the store's executor (``supplyAsync``), so on this
  fsync-less store ``listener_us`` bounds what a notification adds after its write's commit: the
  model's ``meta.watch`` (:func:`watch_spec`; the hand-written constants' is 500 µs).
  :func:`measure_handoff` times it alone (``calibrate --refit PROFILE --watch-only``).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from engine.errors import BackendUnavailable

MAIN_CLASS = "txnbench.probe.StoreProbe"
NOTIFY_CLASS = "txnbench.probe.NotifyProbe"
LISTENERS = (0, 250, 1_000, 2_000)  # subscribeSequence watchers (a broker after its warm-ups held 1,152)
NOTIFY_WRITES = 500  # keys created and then deleted under /txn/op per timed round
HANDOFFS = 4_000  # puts timed one at a time for the hand-off (the first half warm the JIT)
HISTORIES = (1_000, 4_000)  # txns whose op records the store has held (their counters stay)
LIVES = (1, 200)  # txns whose op records are still there when the scan runs
OPS = (1, 10)  # op records per txn (the small and omb mixes have 4.1-4.4, many-participants 10.4)
REPEATS = 100  # timed scans per (ops, history, live), after as many again to warm the JIT
# the broker's JVM's (scripts/pulsar.sh): C2 and G1, as the broker's IO thread runs the scan
JVM_OPTIONS = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC")
KIND = "meta.scan_get"
NOTE = ("single storeGet calls of an emulated scan (RocksdbMetadataStore, outside MetadataStoreStats), "
        "timed by bench/calibrate/store_probe.py with the broker's classes in a JVM of their own")


def measure(progress: Callable[[str], None] = lambda s: None, *, java: str = "java",
            histories: tuple[int, ...] = HISTORIES, lives: tuple[int, ...] = LIVES,
            ops: tuple[int, ...] = OPS, repeats: int = REPEATS,
            listeners: tuple[int, ...] = LISTENERS, notify_writes: int = NOTIFY_WRITES,
            handoffs: int = HANDOFFS) -> dict[str, Any]:
    """Run the probes; what they measured: ``runs`` (one object per (ops, history, live)),
    ``notify_runs`` (one per listener count), ``handoff`` and :func:`summarise`'s figures. Raises
    BackendUnavailable when the JVM cannot run them (no Java, no jars, a failed run)."""
    from bench.pulsar.client import class_path

    cp = class_path()
    progress(f"store probe: the emulated scan with the broker's classes (history {histories}, live {lives}, "
             f"ops per txn {ops})")
    runs = _probe(java, cp, MAIN_CLASS, "--history", ",".join(map(str, histories)), "--live",
                  ",".join(map(str, lives)), "--ops", ",".join(map(str, ops)), "--repeats", str(repeats))
    progress(f"store probe: the notification fan-out ({', '.join(map(str, listeners))} listeners)")
    notify = _probe(java, cp, NOTIFY_CLASS, "--listeners", ",".join(map(str, listeners)),
                    "--writes", str(notify_writes), "--repeats", str(max(5, repeats // 5)),
                    "--handoffs", str(handoffs))
    return summarise(runs, notify)


def measure_handoff(progress: Callable[[str], None] = lambda s: None, *, java: str = "java",
                    handoffs: int = HANDOFFS) -> dict[str, Any]:
    """The hand-off alone (``NotifyProbe`` without its fan-out rounds): :func:`handoff`'s line.
    Raises BackendUnavailable as :func:`measure` does."""
    from bench.pulsar.client import class_path

    progress(f"store probe: the notification hand-off ({handoffs:,} puts, the last {handoffs // 2:,} timed)")
    found = handoff(_probe(java, class_path(), NOTIFY_CLASS, "--listeners", "", "--handoffs", str(handoffs)))
    if not found:
        raise BackendUnavailable(f"store probe: {NOTIFY_CLASS} printed no hand-off line")
    return dict(found["handoff"])


def _probe(java: str, cp: str, main: str, *args: str) -> list[dict[str, Any]]:
    """The JSON lines ``main`` prints, run on a RocksDB store in a scratch folder."""
    scratch = Path(tempfile.mkdtemp(prefix="txnbench-store-probe-"))
    cmd = [java, *JVM_OPTIONS, "-cp", cp, main, "--dir", str(scratch), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except FileNotFoundError:
        raise BackendUnavailable(f"store probe: {java!r} not found (it needs a Java 17 runtime)") from None
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"store probe: {main} took more than 600 s") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackendUnavailable(f"store probe: {main} exited {done.returncode}: {last}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def hidden_entries(run: dict[str, Any]) -> int:
    """The memtable entries under ``/txn/op`` a run's listing passes without returning a key: per
    deleted txn its counter's K versions and its K records' puts and tombstones, less the
    counter it returns (3K - 1); per live txn its counter's older versions (K - 1)."""
    k = run.get("ops", 1)
    return (run["history"] - run["live"]) * (3 * k - 1) + run["live"] * (k - 1)


def summarise(runs: list[dict[str, Any]], notify: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The probes' lines as the profile records them (see the module docstring)."""
    one = min((r.get("ops", 1) for r in runs), default=1)
    timed = [r for r in runs if r.get("store_get_us") and r.get("ops", 1) == one]
    if not timed:
        raise BackendUnavailable("store probe: no run timed a storeGet")
    last = max(timed, key=lambda r: (r["live"], r["history"]))
    by_ops: dict[int, list[float]] = {}
    for r in runs:  # µs per thousand keys the listing returned (its children)
        by_ops.setdefault(r.get("ops", 1), []).append(r["list_us"] * 1000 / r["children"])
    return {"runs": runs, "scan_get_us": dict(last["store_get_us"]), "scan_get_from": {
        "history": last["history"], "live": last["live"]},
        "walk_us_per_thousand": round(statistics.median(by_ops[one]), 1),
        "walk_us_per_thousand_by_ops": {str(k): round(statistics.median(v), 1) for k, v in sorted(by_ops.items())},
        "walk_fit": walk_fit(runs), **decode_cost(runs),
        **notify_cost([line for line in notify or [] if "listeners" in line]), **handoff(notify or [])}


def decode_cost(runs: list[dict[str, Any]]) -> dict[str, float]:
    """µs per record the cleanup scan's filter decodes: the median over the runs with at least
    100 live records of (``writes_scan_us`` - ``scan_us``) per record; nothing when no run timed it."""
    per = [(r["writes_scan_us"] - r["scan_us"]) / (r["live"] * r.get("ops", 1)) for r in runs
           if "writes_scan_us" in r and r["live"] * r.get("ops", 1) >= 100]
    return {"decode_us_per_record": round(statistics.median(per), 2)} if per else {}


def notify_cost(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The fan-out probe's lines and their fit: µs per notification = base (the fewest listeners
    timed) + per listener x listeners (the slope to the most listeners timed: the cost per
    listener grows with their number), and the notifications one key created or deleted queues."""
    if len({r["listeners"] for r in lines}) < 2:
        return {"notify_runs": lines} if lines else {}
    lo, hi = min(lines, key=lambda r: r["listeners"]), max(lines, key=lambda r: r["listeners"])
    slope = (hi["us_per_notification"] - lo["us_per_notification"]) / (hi["listeners"] - lo["listeners"])
    base = lo["us_per_notification"] - slope * lo["listeners"]
    return {"notify_runs": lines, "notify_fit": {
        "us_per_notification": round(base, 3), "us_per_listener": round(slope, 5), "up_to": hi["listeners"],
        "notifications_per_key": round((lo["notifications"] - 1) / (2 * lo["writes"]), 2)}}  # less the marker's


def handoff(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The hand-off pass's line (``handoffs`` puts timed, ``put_us`` and ``listener_us``), as
    ``handoff``; nothing when the probe did not run it."""
    found = [line for line in lines if "handoffs" in line]
    return {"handoff": found[-1]} if found else {}


def walk_fit(runs: list[dict[str, Any]]) -> dict[str, float] | None:
    """The listing's time as a cost per key it returns plus one per hidden entry (µs; least
    squares through the origin over the runs); None when the runs cannot separate the two."""
    xs = [(float(r["children"]), float(hidden_entries(r)), float(r["list_us"])) for r in runs]
    saa, sab, sbb = (sum(a * a for a, _, _ in xs), sum(a * b for a, b, _ in xs), sum(b * b for _, b, _ in xs))
    say, sby = sum(a * y for a, _, y in xs), sum(b * y for _, b, y in xs)
    det = saa * sbb - sab * sab
    if det <= 1e-9 * saa * sbb:
        return None
    return {"us_per_key": round((say * sbb - sby * sab) / det, 3),
            "us_per_hidden_entry": round((sby * saa - say * sab) / det, 4)}


def note(probe: dict[str, Any]) -> str:
    """What ``meta.scan_get`` is and what the probe measured beside it."""
    at = probe["scan_get_from"]
    walk = (f"{probe['walk_us_per_thousand']} µs per thousand keys" if "walk_us_per_thousand_by_ops" not in probe else
            "µs per thousand keys at " + ", ".join(f"{k} op(s) per txn {v}" for k, v in
                                                  probe["walk_us_per_thousand_by_ops"].items()))
    fit = probe.get("walk_fit")
    if fit:
        walk += (f" ({fit['us_per_key']} µs per key returned + {fit['us_per_hidden_entry']} per entry passed: "
                 "each counter update and deleted record stays in the memtable)")
    beside = []
    if "decode_us_per_record" in probe:
        beside.append(f"the cleanup scan's decoding filter {probe['decode_us_per_record']} µs per record")
    nf = probe.get("notify_fit")
    if nf:
        beside.append(f"the notification fan-out {nf['us_per_notification']} µs + {nf['us_per_listener']} per "
                      f"listener per notification, {nf['notifications_per_key']} notifications per key created "
                      "or deleted under /txn/op")
    ho = probe.get("handoff")
    if ho:
        beside.append(f"{_listener_start(ho)}, its commit without fsync and the hand-off to the event thread "
                      "included")
    also = f"; recorded beside it: {'; '.join(beside)}" if beside else ""
    return (f"{NOTE} ({at['live']} live txns' op records among {at['history']:,} txns' history, each scan's GETs "
            f"over its timed rounds: {probe['scan_get_us']} µs), and the listing's walk alone, on that idle JVM: "
            f"{walk}{also} (provenance.extra[\"pulsar.store_probe\"])")


NOTIFY_KIND = "meta.notify"


def notify_spec(probe: dict[str, Any]) -> dict[str, int] | None:
    """``meta.notify`` as a profile gives it, µs per thousand listener calls (whole, at least 1;
    one point, a constant): the fan-out's cost per listener; None when the probe did not time
    the fan-out."""
    fit = probe.get("notify_fit")
    if not fit:
        return None
    return {"p50": max(1, round(fit["us_per_listener"] * 1000))}


def scan_get_spec(probe: dict[str, Any]) -> dict[str, int]:
    """``meta.scan_get`` as a profile gives it: whole µs, at least 1, non-decreasing."""
    return _whole(probe["scan_get_us"])


WATCH_KIND = "meta.watch"


def watch_spec(line: dict[str, Any]) -> dict[str, int]:
    """``meta.watch`` as a profile gives it, from a hand-off line (:func:`handoff`): the
    listener's start after its put's call, whole µs, at least 1, non-decreasing. The put's commit
    is inside it, so it bounds the hand-off after the commit from above."""
    return _whole(line["listener_us"])


def watch_note(line: dict[str, Any]) -> str:
    """What ``meta.watch`` is when taken from a hand-off line."""
    return (f"{_listener_start(line)}, over {line['handoffs']:,} puts one at a time on an idle "
            "RocksdbMetadataStore with the broker's classes (txnbench.probe.NotifyProbe, "
            "bench/calibrate/store_probe.py): storePut hands the notification to the store's executor right after "
            "its commit (receivedNotification, supplyAsync), so this bounds the hand-off after the commit from "
            "above, the commit without fsync included")


def _listener_start(line: dict[str, Any]) -> str:
    """A hand-off line's figures in words (no "; ": a profile's notes are joined by it)."""
    listener, put = line["listener_us"], line["put_us"]
    return (f"a put's listener starting {listener['p50']} µs after its call at the median (p99 {listener['p99']}, "
            f"the put returning after {put['p50']})")


def _whole(quantiles: dict[str, float]) -> dict[str, int]:
    """p50/p90/p99/max of ``quantiles`` that it has, in whole µs, at least 1, non-decreasing."""
    out: dict[str, int] = {}
    floor = 1
    for name in ("p50", "p90", "p99", "max"):
        if name in quantiles:
            floor = max(floor, round(quantiles[name]))
            out[name] = floor
    return out


__all__ = ["KIND", "NOTE", "NOTIFY_KIND", "WATCH_KIND", "decode_cost", "handoff", "hidden_entries", "measure",
           "measure_handoff", "note", "notify_cost", "notify_spec", "scan_get_spec", "summarise", "walk_fit",
           "watch_note", "watch_spec"]
