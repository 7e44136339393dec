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
measured. The listing's walk per thousand keys is recorded beside it (``walk_us_per_thousand``)
but not billed from here: alone on an idle JVM it is a lower bound of what the broker's thread
pays among the broker's other work, and ``meta.list_keys`` stays fitted to the broker's saturated
rates (bench.calibrate.saturation).
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
HISTORIES = (1_000, 4_000)  # txns whose op records the store has held (their counters stay)
LIVES = (1, 200)  # op records still there when the scan runs
REPEATS = 100  # timed scans per (history, live), after as many again to warm the JIT
# the broker's JVM's (scripts/pulsar.sh): C2 and G1, as the broker's IO thread runs the scan
JVM_OPTIONS = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC")
KIND = "meta.scan_get"
NOTE = ("single storeGet calls of an emulated scan (RocksdbMetadataStore, outside MetadataStoreStats), "
        "timed by bench/calibrate/store_probe.py with the broker's classes in a JVM of their own")


def measure(progress: Callable[[str], None] = lambda s: None, *, java: str = "java",
            histories: tuple[int, ...] = HISTORIES, lives: tuple[int, ...] = LIVES,
            repeats: int = REPEATS) -> dict[str, Any]:
    """Run the probe; what it measured: ``runs`` (one object per (history, live)), ``scan_get_us``
    (quantiles, µs) and ``walk_us_per_thousand`` (the median over the runs). Raises
    BackendUnavailable when the JVM cannot run it (no Java, no jars, a failed run)."""
    from bench.pulsar.client import class_path

    cp = class_path()
    scratch = Path(tempfile.mkdtemp(prefix="txnbench-store-probe-"))
    cmd = [java, *JVM_OPTIONS, "-cp", cp, MAIN_CLASS, "--dir", str(scratch),
           "--history", ",".join(map(str, histories)), "--live", ",".join(map(str, lives)), "--repeats", str(repeats)]
    progress(f"store probe: the emulated scan with the broker's classes (history {histories}, live {lives})")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except FileNotFoundError:
        raise BackendUnavailable(f"store probe: {java!r} not found (it needs a Java 17 runtime)") from None
    except subprocess.TimeoutExpired:
        raise BackendUnavailable("store probe: took more than 600 s") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackendUnavailable(f"store probe: {MAIN_CLASS} exited {done.returncode}: {last}")
    return summarise([json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")])


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The probe's lines as the profile records them (see :func:`measure`)."""
    timed = [r for r in runs if r.get("store_get_us")]
    if not timed:
        raise BackendUnavailable("store probe: no run timed a storeGet")
    last = max(timed, key=lambda r: (r["live"], r["history"]))
    walks = [r["list_us"] * 1000 / (r["history"] + r["live"]) for r in runs]
    return {"runs": runs, "scan_get_us": dict(last["store_get_us"]), "scan_get_from": {
        "history": last["history"], "live": last["live"]},
        "walk_us_per_thousand": round(statistics.median(walks), 1)}


def note(probe: dict[str, Any]) -> str:
    """What ``meta.scan_get`` is and what the probe measured beside it."""
    at = probe["scan_get_from"]
    return (f"{NOTE} ({at['live']} op records of {at['history']:,} txns' history, each scan's GETs over its "
            f"timed rounds: {probe['scan_get_us']} µs); the listing's walk alone, on that idle JVM: "
            f"{probe['walk_us_per_thousand']} µs per thousand keys (provenance.extra[\"pulsar.store_probe\"])")


def scan_get_spec(probe: dict[str, Any]) -> dict[str, int]:
    """``meta.scan_get`` as a profile gives it: whole µs, at least 1, non-decreasing."""
    out: dict[str, int] = {}
    floor = 1
    for name in ("p50", "p90", "p99", "max"):
        if name in probe["scan_get_us"]:
            floor = max(floor, round(probe["scan_get_us"][name]))
            out[name] = floor
    return out


__all__ = ["KIND", "NOTE", "measure", "note", "scan_get_spec", "summarise"]
