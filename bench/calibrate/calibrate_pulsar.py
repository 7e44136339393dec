"""``txnbench calibrate --pulsar``: a Pulsar 5 broker's latencies, through the project's JVM client
(bench/pulsar) and the broker's own metrics.

A synthetic trace (one partition, one Failover subscription; per txn: open, one txn publish, one
plain publish, commit; paced 40 ms apart so the broker is not loaded) runs through each design
(v4 on persistent://, v5 on topic://). What the client sees per design (publish, txn publish,
end-txn, commit-to-visible, dispatch) is recorded in ``provenance.extra``; the operation kinds are
mapped from the broker's metrics where one means the same thing:

- ``ledger.append``: ``pulsar_broker_publish_latency`` (a Summary of the broker's send ->
  add-complete over the interval between the broker's last two stats updates, a minute by
  default; read after a v4 run of plain publishes alone in one such interval: p0, p50, p95,
  p99, p999, max), else the v4 txn run's topic's ``pulsar_storage_write_latency_le_*`` buckets
  (that topic's add-entry latency; p50/p90/p99 interpolated in buckets of 0.5/1/5/10 ms, which
  puts appends of 1-5 ms at about 3 ms: 1.8x the summary's p50 here);
- ``rpc``, ``consumer.deliver``, ``ledger.read``: probes, the client's plain publishes and their
  deliveries in the plain v4 runs read through the model's billing of those calls
  (:func:`_client_kinds`): ``rpc`` from a run at the validation traces' pace
  (:data:`DENSE_SPACING_US` apart; the hop distribution whose model publish, two hop draws and an
  append draw, has its publishes' percentiles: bench/calibrate/hop_fit.py), ``ledger.read`` from
  the one 40 ms apart;
- ``rpc.broker``: ``pulsar_txn_tb_client_commit_latency`` of the v4 txn run's topic (the
  coordinator's broker sending END_TXN_ON_PARTITION on its own client to the marker's append and
  back, TransactionBufferClientImpl; a Summary over its last 10 minutes) read as two hops and an
  append (:func:`_broker_hop`); ``rpc`` where the broker exported none;
- ``meta.read`` / ``meta.list``: ``pulsar_metadata_store_ops_latency_ms`` type ``get`` during the
  v5 run (MetadataStoreStats counts getChildren with get), ``meta.write`` / ``meta.cas``: type
  ``put`` (a CAS is a put there). Quantiles interpolated in the histogram's buckets (1, 3, 5, 10,
  20 ... ms); inside the 1-ms bucket, over twice its ops' mean, which the histogram's sum gives
  (:func:`histogram_quantiles`: RocksDB gets average 0.02-0.05 ms here, not the 0.5 ms that plain
  interpolation says); background ops of the broker are counted too.

- ``meta.scan_get``: no metric times an emulated scan's per-record ``storeGet``; the store probe
  times it with the broker's classes on this machine (:mod:`bench.calibrate.store_probe`), and
  ``meta.watch``, a notification's hand-off to the store's event thread, which no metric times
  either.

``calibrate`` then measures ``coordinator.v4``/``coordinator.v5`` from the txn runs' new-txn at the
client, less the model's (:mod:`bench.calibrate.coordinator_fit`).

Then both designs run :mod:`bench.calibrate.saturation`'s trace as fast as possible; ``calibrate``
fits the profile's ``resources`` (the bookie's concurrency, the metadata writes' service time) so
that the model saturates at the broker's rates on it.

Before all of it the broker is warmed as ``validate`` warms it before its measured runs
(``bench.pulsar.validate_run.warm_up_broker``, on the saturation trace): a fresh broker's v4 rate
rose 2.5x over its first 5,000 txns, and the probes' latencies and the saturated rates are to be
the ones validate's measured runs meet. The saturation runs replay the rows as many times over
as that warm-up's last run asks, as validate's do.

The rest (cursor.empty_read, meta.pipelined; meta.watch when the probe timed no hand-off) cannot be
measured from outside the broker (:data:`UNMEASURABLE` says why, kind by kind): kept from the constants, said so in
``provenance.kinds``. Every kind's entry there says how it was measured: ``metric`` (a broker
metric), ``probe`` (the client's calls), ``not measurable``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.calibrate import store_probe
from bench.calibrate.measurement import Measurement
from bench.pulsar.metrics import scrape
from bench.pulsar.target import PulsarTarget, parse_target, probe
from bench.trace.trace import TraceWriter

SPACING_US = 40_000  # between txns: an unloaded broker (and a client that keeps up on 2 shared cores)
# between the rpc probe's plain publishes: the validation traces' pace (61-186 rows a second), as
# a hop is billed at that pace (an idle client and broker may answer otherwise; the rpc note
# records the publishes 40 ms apart beside them). Not for ledger.read: a dispatcher read that
# finds nothing checks again only 10 ms later (ManagedCursorImpl.asyncReadEntriesWithSkipOrWait
# L1139-1141, managedLedgerNewEntriesCheckDelayInMillis), so at this pace most deliveries wait out
# that check (publish answered -> delivered p50 5.7 ms against 0.56 ms 40 ms apart, where the
# cursor waits registered for the next add; 2026-11-26)
DENSE_SPACING_US = 10_000
# first txns of each probe run, not measured: the client's JVM and the broker warm up at the probe's
# pace (the client's --client-warm-up would run them as fast as possible, and the broker-wide
# publish and store figures the probes read would hold its queueing)
WARMUP_TXNS = 200
STATS_WAIT_S = 90  # longest wait for the v4 topic's write buckets after its run
# The publish Summary's quantiles are those of the interval between the broker's last two stats
# updates (BrokerService.updateRates -> Summary.rotateLatencyCollection, DataSketchesSummaryLogger;
# statsUpdateFrequencyInSecs, 60 s by default): wait up to two of them and a margin
STATS_UPDATE_WAIT_S = 125
MAX_LAG_US = 100_000  # a client further behind than this measured its own queue, not the broker
TOPIC = "persistent://public/default/calib-partition-0"
META = "pulsar_metadata_store_ops_latency_ms"
PUBLISH = "pulsar_broker_publish_latency"
LOOKUP = "pulsar_broker_lookup"
# per topic, in ns: TransactionBufferClientImpl.commitTxnOnTopic's END_TXN_ON_PARTITION, sent -> answered
TB_CLIENT = "pulsar_txn_tb_client_commit_latency"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def write_trace(path: Path, txns: int) -> Path:
    """``WARMUP_TXNS`` txns, then ``txns`` measured ones (the probes skip the warm-up's messages)."""
    with TraceWriter(path, metadata={"profile": "calibrate", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=TOPIC, subscription="calib")
        for i in range(WARMUP_TXNS + txns):
            t = 10_000 + i * SPACING_US
            w.add(t, "new_txn", txn=f"t{i}")
            w.add(t + 1_000, "publish", txn=f"t{i}", topic=TOPIC, msg=f"x{i}", size=100)
            w.add(t + 2_000, "publish", topic=TOPIC, msg=f"p{i}", size=100)
            w.add(t + 3_000, "commit", txn=f"t{i}")
    return path


def write_plain_trace(path: Path, messages: int, spacing_us: int = SPACING_US) -> Path:
    """``WARMUP_TXNS`` + ``messages`` plain publishes ``p{i}`` on :data:`TOPIC`, ``spacing_us``
    apart, no txn: the v4 run whose stats interval holds only plain appends, and the denser one of
    the rpc probe (:func:`measure_pulsar`)."""
    with TraceWriter(path, metadata={"profile": "calibrate-plain", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=TOPIC, subscription="calib")
        for i in range(WARMUP_TXNS + messages):
            w.add(10_000 + i * spacing_us, "publish", topic=TOPIC, msg=f"p{i}", size=100)
    return path


def histogram_quantiles(before: Samples, after: Samples, name: str, labels: dict[str, str],
                        unit_us: float = 1000.0, lowest_from_sum: bool = False) -> tuple[dict[str, int], int]:
    """p50/p90/p99/p999 (µs) of the ops a cumulative Prometheus histogram counted between two
    scrapes, by linear interpolation inside a bucket (histogram_quantile's rule; the +Inf bucket
    is clamped to the last finite bound); and the number of ops.

    ``lowest_from_sum``: the lowest bucket is spread over [0, 2m] instead of [0, its bound], m being
    the mean of its ops: the histogram's ``_sum`` less the other buckets' ops at their midpoints.
    For MetadataStoreStats, whose values are differences of ``System.currentTimeMillis()``
    (``AbstractMetadataStore.get``): a 0.05-ms op records 0 or 1 ms, 1 with probability 0.05, so
    the sum's expectation is the true total while every op sits in the 1-ms bucket, which plain
    interpolation would put at 0.5 ms."""
    buckets: dict[float, float] = {}
    total_sum = 0.0
    for (n, labs), v in after.items():
        d = dict(labs)
        if n not in (name + "_bucket", name + "_sum") or any(d.get(k) != val for k, val in labels.items()):
            continue
        if n == name + "_sum":
            total_sum += v - before.get((n, labs), 0.0)
            continue
        le = math.inf if d["le"] == "+Inf" else float(d["le"])
        buckets[le] = buckets.get(le, 0.0) + v - before.get((n, labs), 0.0)
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return {}, 0
    first = bounds[0]
    if lowest_from_sum and buckets[first] > 0:
        higher, lo = 0.0, first
        for b in bounds[1:]:
            higher += (buckets[b] - buckets[lo]) * ((lo + b) / 2 if b != math.inf else lo)
            lo = b
        mean = max(0.0, total_sum - higher) / buckets[first]
        first_hi = min(first, 2 * mean)
    else:
        first_hi = first
    out: dict[str, int] = {}
    for pname, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        rank, lo, below = q * total, 0.0, 0.0
        for b in bounds:
            if buckets[b] >= rank:
                hi = first_hi if b == first else b if b != math.inf else lo
                inside = buckets[b] - below
                frac = (rank - below) / inside if inside > 0 else 1.0
                out[pname] = round((lo + (hi - lo) * frac) * unit_us)
                break
            lo, below = b, buckets[b]
    return out, int(total)


def summary_quantiles(after: Samples, name: str, labels: dict[str, str] | None = None,
                      us_per_unit: float = 1000) -> dict[str, int]:
    """A Prometheus Summary's quantiles (in ms, else ``us_per_unit``; -> µs) as scraped, of the
    child with ``labels`` (any when None): its recent window."""
    names = {"0.0": "p0", "0.5": "p50", "0.95": "p95", "0.99": "p99", "0.999": "p999", "1.0": "max"}
    out = {}
    for (n, labs), v in after.items():
        lab = dict(labs)
        q = lab.get("quantile")
        if n == name and q in names and not math.isnan(v) and all(lab.get(k) == w for k, w in (labels or {}).items()):
            out[names[q]] = round(v * us_per_unit)
    return out


WRITE = "pulsar_storage_write_latency"  # per topic: the managed ledger's add-entry latency, in ms buckets


def topic_write_quantiles(before: Samples, after: Samples) -> tuple[dict[str, int], int, str]:
    """p50/p90/p99 (µs) of the calibration topic's managed-ledger appends, from the broker's
    per-topic ``pulsar_storage_write_latency_le_*`` buckets (0.5, 1, 5, 10, 20, 50, 100, 200,
    1000 ms, overflow) of the one run's topic: a topic (its namespace is the run's own) that the
    scrape before the run did not have. Interpolated inside a bucket as histogram_quantiles does;
    buckets are per-bucket counts (their sum is ``_count``) or cumulative (the largest is)."""
    topic = _probe_topic(before, after, WRITE + "_count")
    if not topic:
        return {}, 0, ""
    counts: dict[float, float] = {}
    total = 0.0
    for (metric, labs), v in after.items():
        if dict(labs).get("topic") != topic or not metric.startswith(WRITE):
            continue
        suffix = metric[len(WRITE):]
        if suffix == "_count":
            total = v
        elif suffix == "_overflow":
            counts[math.inf] = v
        elif suffix.startswith("_le_"):
            counts[float(suffix[4:].replace("_", "."))] = v
    if total <= 0:
        return {}, 0, topic
    bounds = sorted(counts)
    if abs(sum(counts.values()) - total) > 0.5:  # cumulative already
        cum = {b: counts[b] for b in bounds}
    else:
        run, cum = 0.0, {}
        for b in bounds:
            run += counts[b]
            cum[b] = run
    as_histogram: Samples = {(WRITE + "_bucket", (("le", "+Inf" if b == math.inf else str(b)),)): c for b, c in cum.items()}
    q, n = histogram_quantiles({}, as_histogram, WRITE, {})
    return {k: v for k, v in q.items() if k != "p999"}, n, topic


def _monotone(p: dict[str, int]) -> dict[str, int]:
    """Percentiles made non-decreasing in quantile order (a summary's quantiles are estimates)."""
    order = ["p0", "p50", "p90", "p95", "p99", "p999", "max"]
    out, last = {}, 0
    for k in order:
        if k in p:
            last = out[k] = max(p[k], last)
    return out


def _probe_topic(before: Samples, after: Samples, metric: str) -> str:
    """The calibration topic of the one run between the scrapes: one that ``metric`` names after it
    and nothing named before it (its namespace is the run's own); "" when there is none."""
    topics = {dict(labs).get("topic", "") for (n, labs) in after if n == metric}
    fresh = sorted(t for t in topics if t.endswith("/" + TOPIC.rsplit("/", 1)[1])
                   and not any(dict(labs).get("topic") == t for (n, labs) in before))
    return fresh[-1] if fresh else ""


def tb_client_quantiles(before: Samples, after: Samples) -> tuple[dict[str, int], int]:
    """p50/p95/p99/p999/max (µs) and count of the v4 txn run's END_TXN_ON_PARTITION requests at
    the coordinator's broker, from its :data:`TB_CLIENT` Summary (ns) for the run's topic."""
    topic = _probe_topic(before, after, TB_CLIENT + "_count")
    if not topic:
        return {}, 0
    count = next(int(v) for (n, labs), v in after.items() if n == TB_CLIENT + "_count" and dict(labs).get("topic") == topic)
    return _monotone(summary_quantiles(after, TB_CLIENT, {"topic": topic}, us_per_unit=0.001)), count


UNMEASURABLE = {
    "cursor.empty_read": ("a dispatcher read that returns at once at maxReadPosition: the broker exports no "
                          "per-topic dispatcher read counter or latency (PULSAR.md) and a client never sees one"),
    "meta.pipelined": ("the cost of each further op of a batch: pulsar_metadata_store_ops_latency_ms times every "
                       "op alone (MetadataStoreStats), whether it went out in a batch or not"),
    "meta.watch": ("store write -> watcher callback: the broker exports no notification latency, and the "
                   "notification is internal to the broker (no client sees it); the store probe times it when it "
                   "times the hand-off"),
}


def plain_probes(events: Path) -> tuple[list[int], list[int], int]:
    """From the client's event log (jvm/PROTOCOL.md): per measured plain message ``p{i}`` (i >=
    WARMUP_TXNS), its publish latency (op ``end_us - start_us``) and its publish-answered ->
    delivered time (``deliver.t_us - end_us``); and the largest issue lag (``start_us - due_us``)
    over the measured rows. Publishes issued more than MAX_LAG_US late are left out of the
    publish latencies: the client was behind then, and its own queue is in their time."""
    ends: dict[str, tuple[int, int]] = {}
    delivered: dict[str, int] = {}
    dues: dict[str, int] = {}
    lag = 0
    for line in events.read_text().splitlines():
        e = json.loads(line)
        msg = str(e.get("msg") or "")
        if not msg.startswith("p") or not msg[1:].isdigit() or int(msg[1:]) < WARMUP_TXNS:
            continue
        if e.get("ev") == "op" and e.get("op") == "publish" and e.get("ok"):
            ends[msg] = (int(e["start_us"]), int(e["end_us"]))
            dues[msg] = int(e.get("due_us", e["start_us"]))
            lag = max(lag, int(e["start_us"]) - int(e.get("due_us", e["start_us"])))
        elif e.get("ev") == "deliver" and not e.get("redelivery"):
            delivered.setdefault(msg, int(e["t_us"]))
    publish = [end - start for m, (start, end) in ends.items() if start - dues[m] <= MAX_LAG_US]
    after = [max(0, delivered[k] - end) for k, (_, end) in ends.items() if k in delivered]
    return publish, after, lag


# the txn probes' op kinds, as the client's latency summary names them (bench.pulsar.run)
PROBE_OPS = {"new_txn": "new_txn_us", "commit": "end_txn_us", "publish": "publish_nontxn_us"}


def txn_probes(events: Path) -> dict[str, dict[str, int]]:
    """From a txn probe run's event log: per op kind (``new_txn_us``, ``end_txn_us``,
    ``publish_txn_us``, ``publish_nontxn_us``) the client's count and p50/p90/p99/max (µs) over
    the measured txns only (``t{i}``, ``x{i}``, ``p{i}`` with i >= WARMUP_TXNS), as the other
    probes count. The run's own summary holds its first txns too, which wait for its topics and
    connections: the slowest new-txns of a 500-txn v4 probe were its txns 0-3 (40-59 ms), and its
    p99 over all 500 was 14.3 ms against 7.4 over the measured 300 (2026-11-27)."""
    samples: dict[str, list[int]] = {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("ev") != "op" or not e.get("ok") or e.get("op") not in PROBE_OPS:
            continue
        name = str(e.get("txn") or e.get("msg") or "")
        if not name[1:].isdigit() or int(name[1:]) < WARMUP_TXNS:
            continue
        kind = "publish_txn_us" if e["op"] == "publish" and e.get("txn") else PROBE_OPS[e["op"]]
        samples.setdefault(kind, []).append(int(e["end_us"]) - int(e["start_us"]))
    return {kind: {"count": len(v), **{f"{n}_us": x for n, x in _pcts(v).items() if n in ("p50", "p90", "p99", "max")}}
            for kind, v in sorted(samples.items())}


def _pcts(samples: list[int]) -> dict[str, int]:
    from bench.calibrate.measurement import percentiles

    return percentiles(samples) if samples else {}


def _append(m: Measurement, plain: Samples | None, v4: tuple[Samples, Samples], samples: int) -> dict[str, int]:
    """``ledger.append`` into ``m`` (returned; empty when unmeasured): the broker's publish summary
    scraped after the plain run's stats interval (``plain``; None when no stats update followed
    that run, so the summary may hold an earlier interval), else the v4 txn run's topic's write
    buckets (``v4``: the scrapes around it). The summary first: its quantiles are exact over its
    interval, where the buckets put every append of 1-5 ms at an interpolated 3 ms (on this
    machine: p50 1,627 µs from the summary against 2,994 from the buckets, for the same run)."""
    buckets, n_appends, topic = topic_write_quantiles(*v4)
    summary = _monotone(summary_quantiles(plain, PUBLISH)) if plain is not None else {}
    m.how["ledger.append"] = "metric"
    if "p50" in summary:
        m.operations["ledger.append"] = summary
        m.notes["ledger.append"] = (f"{PUBLISH} quantiles (PersistentTopic's send -> add-complete of every publish, "
                                    "a Summary over the interval between the broker's last two stats updates, "
                                    "BrokerService.updateRates) scraped at the first update after a v4 run of "
                                    f"{WARMUP_TXNS} + {samples} plain publishes alone in that interval"
                                    + (f"; the v4 txn run's topic's own {WRITE}_le_* buckets, interpolated, gave "
                                       f"{_monotone(buckets)} over {n_appends} appends" if "p50" in buckets else ""))
        return summary
    if "p50" in buckets:
        m.operations["ledger.append"] = append = _monotone(buckets)
        why = ("no stats update of the broker followed the plain run" if plain is None else f"{PUBLISH} was not exported")
        m.notes["ledger.append"] = (f"{WRITE}_le_* of the v4 run's topic {topic} ({n_appends} appends: txn and plain "
                                    "publishes and markers; buckets 0.5/1/5/10/20/50/100/200/1000 ms, interpolated; "
                                    f"{why})")
        return append
    # observed here: absent from /metrics on a broker up for less than about a minute
    m.unmeasurable["ledger.append"] = (f"{PUBLISH} not exported yet (absent on a broker up for less than "
                                       "about a minute): calibrate on a broker that has run a while")
    return {}


def rpc_of(publish: dict[str, int], append: dict[str, int]) -> dict[str, int]:
    """``rpc`` from the client's plain publish and the broker's append percentiles
    (:func:`bench.calibrate.hop_fit.fit_hops`); {} without both p50s."""
    from bench.calibrate.hop_fit import as_distribution, fit_hops

    if "p50" not in publish or "p50" not in append:
        return {}
    return fit_hops(publish, as_distribution(_monotone(append)))


def broker_hop_of(end_txn_on_partition: dict[str, int], append: dict[str, int]) -> dict[str, int]:
    """``rpc.broker`` from the END_TXN_ON_PARTITION requests' and the append's percentiles
    (:func:`rpc_of`), fitted up to p95: the Summary's quantiles are within 1 % in rank (its
    error), so with the probe's 500 requests its 0.99 can be its maximum, the run's first
    request, which waits for the broker's client to connect (18.7 ms there against a client
    END_TXN p99 of 9.6 ms, 2026-11-27)."""
    return rpc_of({k: v for k, v in end_txn_on_partition.items() if k in ("p0", "p50", "p90", "p95")}, append)


def _broker_hop(m: Measurement, v4: tuple[Samples, Samples], append: dict[str, int]) -> None:
    """``rpc.broker`` into ``m``: the hop whose two draws and the marker's append (the model's
    END_TXN_ON_PARTITION: legacy_v4.coordinator) have the v4 txn run's END_TXN_ON_PARTITION
    percentiles at the broker (:func:`tb_client_quantiles`), fitted as ``rpc`` is
    (:func:`broker_hop_of`); ``rpc`` (taken) when the broker exported none for the run's topic."""
    tb, n = tb_client_quantiles(*v4)
    hop = broker_hop_of(tb, append)
    if hop:
        m.operations["rpc.broker"] = hop
        m.how["rpc.broker"] = "metric"
        m.extra["rpc_broker_probe_us"] = {"end_txn_on_partition": tb, "append": append}
        m.notes["rpc.broker"] = (f"{TB_CLIENT} of the v4 txn run's topic ({n} END_TXN_ON_PARTITION requests "
                                 f"on the broker's own client: {tb} µs) read as two hops and the marker's append "
                                 f"{append} µs, up to p95 (bench/calibrate/hop_fit.py)")
    elif "rpc" in m.operations:
        m.operations["rpc.broker"] = m.operations["rpc"]
        m.how["rpc.broker"] = m.how.get("rpc", "probe")
        m.notes["rpc.broker"] = f"taken = rpc: the broker exported no {TB_CLIENT} for the v4 txn run's topic"


def _client_kinds(m: Measurement, events: Path, dense: Path, append: dict[str, int], after: Samples) -> None:
    """rpc, consumer.deliver and ledger.read from the client's plain publishes and their deliveries
    in the plain v4 runs (the probes; the first WARMUP_TXNS skipped; ``events`` the run
    :data:`SPACING_US` apart, ``dense`` the one :data:`DENSE_SPACING_US` apart), by the model's own
    billing of those calls:

    - a plain publish is ``rpc + ledger.append + rpc`` (engine/broker.py), three independent
      draws, so ``rpc`` is the hop distribution whose sum with the append has the dense run's
      publish percentiles (:func:`rpc_of`; the append is the broker's summary);
    - a plain message's delivery, timed from its publish, is ``rpc + ledger.append + ledger.read +
      consumer.deliver`` (the dispatcher reads the entry once it is added and pushes it,
      engine/dispatcher.py); ``consumer.deliver`` is one hop to the consumer on the same loopback
      connection (taken = rpc), so per message ``ledger.read = delivered - publish answered``, in
      the sparse run (see :data:`DENSE_SPACING_US`).

    Publishes the client issued late (more than MAX_LAG_US) include its own queue and are left out;
    when that leaves fewer than half, or the broker's append summary (the interval between its last
    two stats updates, which may hold an earlier, slower run) is not below the client's publish at p50, rpc (and so
    consumer.deliver) is the broker's lookup latency
    (``pulsar_broker_lookup``, a request the broker answers from its ownership cache without
    storage), said so in the note."""
    sparse, reads, _ = plain_probes(events)
    samples, delivered, lag_us = plain_probes(dense)
    publish = _pcts(samples)
    m.extra["probe_max_issue_lag_us"] = lag_us
    rpc = rpc_of(publish, append)
    if len(samples) * 2 >= len(delivered) and publish.get("p50", 0) > append.get("p50", math.inf):
        m.extra["rpc_probe_us"] = {"publish": publish, "append": append}  # calibrate --refit fits rpc again from them
        m.notes["rpc"] = (f"probe: the hop whose model publish, 2 hops + the append drawn independently, has the "
                          f"client's plain publish {publish} µs with the broker's append {append} "
                          f"(bench/calibrate/hop_fit.py; {len(samples)} publishes {DENSE_SPACING_US // 1000} ms apart "
                          f"issued on time; the client's largest lag {lag_us / 1000:.0f} ms); "
                          f"the client's plain publish {SPACING_US // 1000} ms apart: {_pcts(sparse)}")
    else:
        rpc = _monotone(summary_quantiles(after, LOOKUP))
        m.how.update({"rpc": "metric", "consumer.deliver": "metric"} if "p50" in rpc else {})
        m.notes["rpc"] = (f"{LOOKUP} quantiles (a lookup the broker answers from its ownership cache, no storage), "
                          f"scraped after the v4 txn run: the probe did not apply (client's plain publish {publish} µs, "
                          f"{len(samples)} of {len(delivered)} issued on time, up to {lag_us / 1000:.0f} ms late; the broker's "
                          "append summary, its last stats interval, not below the client's publish at p50)")
    if "p50" in rpc:
        m.operations["rpc"] = m.operations["consumer.deliver"] = rpc
        m.notes["consumer.deliver"] = "one hop broker -> consumer on the client's connection, taken = rpc (see rpc)"
    else:
        m.unmeasurable["rpc"] = m.unmeasurable["consumer.deliver"] = "the client lagged and the broker exported no lookup latency"
    if reads:
        m.operations["ledger.read"] = _pcts(reads)
        m.notes["ledger.read"] = (f"probe: per plain message, publish answered -> delivered ({len(reads)} messages "
                                  f"{SPACING_US // 1000} ms apart; "
                                  "the dispatcher's read of the just-added entry, the push taken as consumer.deliver "
                                  "= rpc cancelling the publish's answer hop)")
    else:
        m.unmeasurable["ledger.read"] = "no measured plain message was published and delivered in the plain v4 run"


def await_stats_update(target: PulsarTarget, limit_s: float = STATS_UPDATE_WAIT_S) -> float | None:
    """Seconds until the broker's publish Summary shows a new interval (its quantiles change), or
    None after ``limit_s`` without: the first stats update after what ran before, whose publishes
    the next interval then holds none of."""
    first = summary_quantiles(scrape(target), PUBLISH)
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        time.sleep(2)
        if summary_quantiles(scrape(target), PUBLISH) != first:
            return round(time.monotonic() - started, 1)
    return None


def measure_pulsar(url: str, admin_url: str, samples: int, progress: Callable[[str], None] = lambda s: None, *,
                   fresh: bool = False, pulsar_dir: str | None = None, client_warm_up: bool = False,
                   warm_up_txns: dict[str, int] | None = None, warm_up_jit: float | None = None) -> Measurement:
    """``fresh``: first restart the broker (``pulsar_dir``, else ``$TXNBENCH_PULSAR_DIR``) with its
    data wiped, as ``validate --fresh-broker`` does. Then the broker is warmed as ``validate``
    warms it (``bench.pulsar.validate_run.warm_up_broker`` on the saturation trace, until each
    design's discarded runs held ``warm_up_txns`` and, with ``warm_up_jit``, its broker's JIT
    compiler threads took no more than that share of its cores), so that the probes and the saturation runs
    meet a broker as warm as validate's measured runs do; the probes wait for the broker's next
    stats update first (:func:`await_stats_update`), so that the publish Summary they read holds
    none of the warm-up's queued publishes. ``client_warm_up``: in the warm-up and saturation runs
    the trace client runs the rows first, unmeasured and as fast as possible
    (``bench.pulsar.run.warm_up_rows``). Not in the latency probes: the publish Summary and the
    store's histograms would count that run's queued publishes and writes (with it, append p95
    4,972 µs against 2,213 and put p99 3,342 against 938: the probes' ``rpc`` fell to 13 µs); their
    first ``WARMUP_TXNS`` txns, at the probes' pace, warm the client instead."""
    from bench.calibrate import saturation
    from bench.pulsar.client import fresh_broker
    from bench.pulsar.run import pulsar_replay
    from bench.pulsar.validate_run import warm_up_broker

    target: PulsarTarget = parse_target(url, admin_url, "trace", pulsar_dir, 5_000)
    if fresh:
        fresh_broker(target.pulsar_dir)
        progress(f"pulsar: broker restarted with fresh data ({target.pulsar_dir})")
    progress(f"pulsar {url}: {samples} txns per design")
    version = str(probe(target).get("version", "?"))
    m = Measurement("pulsar", version)
    scratch = Path(tempfile.mkdtemp(prefix="txnbench-calib-pulsar-"))
    try:
        saturating = dataclasses.replace(target, client_warm_up=client_warm_up)
        warming = scratch / "warm-up"
        warming.mkdir()
        sat_trace = saturation.write_trace(warming / "saturation.parquet")
        state, sat_traces = warm_up_broker(sat_trace, saturating, warming, 1, fresh, progress, goal=warm_up_txns,
                                           jit_share=warm_up_jit)
        m.extra["broker_warm_up"] = state["validate"]["broker"]
        waited = await_stats_update(target)
        m.extra["broker_warm_up"]["stats_update_wait_s"] = waited
        progress("pulsar: the broker's next stats update " + (f"after {waited} s" if waited is not None else
                                                              f"not seen in {STATS_UPDATE_WAIT_S} s"))
        # plain publishes alone in one stats interval: the publish Summary then holds their appends
        # only (a txn publish's adds the transaction buffer's work; with both, its p50 came out
        # above the plain publishes' own at the client on a warm broker)
        progress(f"pulsar v4: {WARMUP_TXNS} + {samples} plain publishes, {SPACING_US // 1000} ms apart")
        pulsar_replay(write_plain_trace(scratch / "plain.parquet", samples), ["v4"], target, scratch / "plain")
        plain_waited = await_stats_update(target)  # None: the summary may still be an earlier interval's
        plain_after = scrape(target)
        progress(f"pulsar v4: {WARMUP_TXNS} + {samples} plain publishes, {DENSE_SPACING_US // 1000} ms apart")
        pulsar_replay(write_plain_trace(scratch / "dense.parquet", samples, DENSE_SPACING_US), ["v4"], target,
                      scratch / "dense")
        m.extra["broker_warm_up"]["plain_stats_update_wait_s"] = plain_waited
        trace = write_trace(scratch / "calib.parquet", samples)
        observed: dict[str, Any] = {}
        measured: dict[str, Any] = {}
        scraped: dict[str, tuple[Samples, Samples]] = {}
        lags: dict[str, int] = {}
        for design in ("v4", "v5"):
            progress(f"pulsar {design}: {WARMUP_TXNS} + {samples} txns, {SPACING_US // 1000} ms apart")
            before = scrape(target)
            manifest = pulsar_replay(trace, [design], target, scratch / design)
            lags[design] = int(manifest["runs"][design].get("rates", {}).get("max_issue_lag_us") or 0)
            after = scrape(target)
            waited = 0
            # the topic's write buckets appear at the broker's next stats update (about a minute)
            while design == "v4" and topic_write_quantiles(before, after)[1] < 2 * (WARMUP_TXNS + samples) \
                    and waited < STATS_WAIT_S:
                time.sleep(5)
                waited += 5
                after = scrape(target)
            scraped[design] = (before, after)
            measured[design] = txn_probes(scratch / design / f"pulsar-events-{design}.jsonl")
            lat = json.loads((scratch / design / "latency.json").read_text())[design]
            observed[design] = {k: {p: v for p, v in s.items() if p in ("count", "p50_us", "p90_us", "p99_us", "max_us")}
                                for k, s in lat.items()}
        m.extra["client_observed_us"] = observed  # the whole runs, their first txns' set-up included
        m.extra["client_measured_us"] = measured  # the measured txns (coordinator_fit reads these)
        m.extra["client_max_issue_lag_us"] = lags
        # calibrate() fits the resources to these rates
        m.extra["saturation"] = saturation.measure(saturating, scratch, progress, sat_traces, sat_trace)
        m.extra["saturation"]["client_warm_up"] = client_warm_up

        append = _append(m, plain_after if plain_waited is not None else None, scraped["v4"], samples)
        _client_kinds(m, scratch / "plain" / "pulsar-events-v4.jsonl", scratch / "dense" / "pulsar-events-v4.jsonl",
                      append, scraped["v4"][1])
        _broker_hop(m, scraped["v4"], append)
        before, after = scraped["v5"]
        for mtype, kinds in (("get", ("meta.read", "meta.list")), ("put", ("meta.write", "meta.cas"))):
            q, n = histogram_quantiles(before, after, META, {"type": mtype, "status": "success"}, lowest_from_sum=True)
            if "p50" in q:
                for kind in kinds:
                    m.operations[kind] = _monotone(q)
                    m.notes[kind] = (f"{META} type={mtype} over the v5 run ({n} ops, background included; "
                                     "buckets 1/3/5/10.. ms, interpolated; the 1-ms bucket spread over twice its "
                                     "ops' mean, from the histogram's sum of currentTimeMillis differences)")
                    m.how[kind] = "metric"
        # the scan's storeGets, which no broker metric times: with the broker's classes, in a JVM of their own
        sp = store_probe.measure(progress)
        m.operations[store_probe.KIND] = store_probe.scan_get_spec(sp)
        m.notes[store_probe.KIND] = store_probe.note(sp)
        notify = store_probe.notify_spec(sp)
        if notify is not None:
            m.operations[store_probe.NOTIFY_KIND] = notify
            m.notes[store_probe.NOTIFY_KIND] = store_probe.note(sp)
        if "handoff" in sp:  # the notification's hand-off to the event thread, from the same probe
            m.operations[store_probe.WATCH_KIND] = store_probe.watch_spec(sp["handoff"])
            m.notes[store_probe.WATCH_KIND] = store_probe.watch_note(sp["handoff"])
        m.extra["store_probe"] = sp
        m.unmeasurable.update({k: why for k, why in UNMEASURABLE.items() if k not in m.operations})
        return m
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
