"""``txnbench calibrate --pulsar``: a Pulsar 5 broker's latencies, through the project's JVM client
(bench/pulsar) and the broker's own metrics.

A synthetic trace (one partition, one Failover subscription; per txn: open, one txn publish, one
plain publish, commit; paced 20 ms apart so the broker is not loaded) runs through each design
(v4 on persistent://, v5 on topic://). What the client sees per design (publish, txn publish,
end-txn, commit-to-visible, dispatch) is recorded in ``provenance.extra``; the operation kinds are
mapped from the broker's metrics where one means the same thing:

- ``ledger.append``: ``pulsar_broker_publish_latency`` (a Summary; BrokerService's publish latency
  from the broker receiving a send to the managed ledger's add completing, i.e. the append as the
  broker waits for it), its quantiles scraped right after the v4 run (the summary's window);
- ``rpc``: derived, (client's plain publish p50 - append p50) / 2: the model bills a publish as
  two hops plus the append (engine/broker.py), so this is what a hop must be for the model's
  publish to match;
- ``meta.read`` / ``meta.list``: ``pulsar_metadata_store_ops_latency_ms`` type ``get`` during the
  v5 run (MetadataStoreStats counts getChildren with get), ``meta.write`` / ``meta.cas``: type
  ``put`` (a CAS is a put there). Quantiles interpolated in the histogram's buckets (1, 3, 5, 10,
  20 ... ms: coarse below 1 ms); background ops of the broker are counted too.

The rest (ledger.read, cursor.empty_read, consumer.deliver, meta.pipelined, meta.watch) has no
metric that isolates it: kept from the constants, said so in the notes.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from bench.calibrate.measurement import Measurement
from bench.pulsar.metrics import scrape
from bench.pulsar.target import PulsarTarget, parse_target, probe
from bench.trace.trace import TraceWriter

SPACING_US = 20_000  # between txns: an unloaded broker
MAX_LAG_US = 100_000  # a client further behind than this measured its own queue, not the broker
TOPIC = "persistent://public/default/calib-partition-0"
META = "pulsar_metadata_store_ops_latency_ms"
PUBLISH = "pulsar_broker_publish_latency"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def write_trace(path: Path, txns: int) -> Path:
    with TraceWriter(path, metadata={"profile": "calibrate", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=TOPIC, subscription="calib")
        for i in range(txns):
            t = 10_000 + i * SPACING_US
            w.add(t, "new_txn", txn=f"t{i}")
            w.add(t + 1_000, "publish", txn=f"t{i}", topic=TOPIC, msg=f"x{i}", size=100)
            w.add(t + 2_000, "publish", topic=TOPIC, msg=f"p{i}", size=100)
            w.add(t + 3_000, "commit", txn=f"t{i}")
    return path


def histogram_quantiles(before: Samples, after: Samples, name: str, labels: dict[str, str],
                        unit_us: float = 1000.0) -> tuple[dict[str, int], int]:
    """p50/p90/p99/p999 (µs) of the ops a cumulative Prometheus histogram counted between two
    scrapes, by linear interpolation inside a bucket (histogram_quantile's rule; the +Inf bucket
    is clamped to the last finite bound); and the number of ops."""
    buckets: dict[float, float] = {}
    for (n, labs), v in after.items():
        d = dict(labs)
        if n != name + "_bucket" or any(d.get(k) != val for k, val in labels.items()):
            continue
        le = math.inf if d["le"] == "+Inf" else float(d["le"])
        buckets[le] = buckets.get(le, 0.0) + v - before.get((n, labs), 0.0)
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return {}, 0
    out: dict[str, int] = {}
    for pname, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        rank, lo, below = q * total, 0.0, 0.0
        for b in bounds:
            if buckets[b] >= rank:
                hi = b if b != math.inf else lo
                inside = buckets[b] - below
                frac = (rank - below) / inside if inside > 0 else 1.0
                out[pname] = round((lo + (hi - lo) * frac) * unit_us)
                break
            lo, below = b, buckets[b]
    return out, int(total)


def summary_quantiles(after: Samples, name: str) -> dict[str, int]:
    """A Prometheus Summary's quantiles (ms -> µs) as scraped: its recent window."""
    names = {"0.0": "p0", "0.5": "p50", "0.99": "p99", "0.999": "p999", "1.0": "max"}
    out = {}
    for (n, labs), v in after.items():
        q = dict(labs).get("quantile")
        if n == name and q in names and not math.isnan(v):
            out[names[q]] = round(v * 1000)
    return out


def _monotone(p: dict[str, int]) -> dict[str, int]:
    """Percentiles made non-decreasing in quantile order (a summary's quantiles are estimates)."""
    order = ["p0", "p50", "p90", "p99", "p999", "max"]
    out, last = {}, 0
    for k in order:
        if k in p:
            last = out[k] = max(p[k], last)
    return out


def measure_pulsar(url: str, admin_url: str, samples: int,
                   progress: Callable[[str], None] = lambda s: None) -> Measurement:
    from bench.pulsar.run import pulsar_replay

    target: PulsarTarget = parse_target(url, admin_url, "trace", None, 5_000)
    version = str(probe(target).get("version", "?"))
    m = Measurement("pulsar", version)
    scratch = Path(tempfile.mkdtemp(prefix="txnbench-calib-pulsar-"))
    try:
        trace = write_trace(scratch / "calib.parquet", samples)
        observed: dict[str, Any] = {}
        scraped: dict[str, tuple[Samples, Samples]] = {}
        lags: dict[str, int] = {}
        for design in ("v4", "v5"):
            progress(f"pulsar {design}: {samples} txns, {SPACING_US // 1000} ms apart")
            before = scrape(target)
            manifest = pulsar_replay(trace, [design], target, scratch / design)
            lags[design] = int(manifest["runs"][design].get("rates", {}).get("max_issue_lag_us") or 0)
            scraped[design] = (before, scrape(target))
            lat = json.loads((scratch / design / "latency.json").read_text())[design]
            observed[design] = {k: {p: v for p, v in s.items() if p in ("count", "p50_us", "p90_us", "p99_us", "max_us")}
                                for k, s in lat.items()}
        m.extra["client_observed_us"] = observed
        m.extra["client_max_issue_lag_us"] = lags

        append = _monotone(summary_quantiles(scraped["v4"][1], PUBLISH))
        if "p50" in append:
            m.operations["ledger.append"] = append
            m.notes["ledger.append"] = ("pulsar_broker_publish_latency quantiles (the broker's send -> add-complete, "
                                        "its recent window) scraped after the v4 run")
        plain = observed["v4"].get("publish_nontxn_us", {}).get("p50_us")
        if plain is not None and "p50" in append and lags["v4"] > MAX_LAG_US:
            m.notes["rpc"] = (f"not derived: the client fell {lags['v4'] / 1000:.0f} ms behind the trace in the v4 run, "
                              f"so its publish latency ({plain} µs p50) includes its own queueing; kept")
        elif plain is not None and "p50" in append:
            rpc = max(0, round((plain - append["p50"]) / 2))
            m.operations["rpc"] = {"constant": rpc}
            m.notes["rpc"] = (f"derived: (client's plain publish p50 {plain} µs - append p50 {append['p50']} µs) / 2, "
                              "the model's publish being 2 hops + the append")
        before, after = scraped["v5"]
        for mtype, kinds in (("get", ("meta.read", "meta.list")), ("put", ("meta.write", "meta.cas"))):
            q, n = histogram_quantiles(before, after, META, {"type": mtype, "status": "success"})
            if "p50" in q:
                for kind in kinds:
                    m.operations[kind] = _monotone(q)
                    m.notes[kind] = (f"{META} type={mtype} over the v5 run ({n} ops, background included; "
                                     "buckets 1/3/5/10.. ms, interpolated)")
        return m
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
