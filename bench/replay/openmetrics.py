"""A run's counters and histograms as OpenMetrics text (``metrics.txt``), and served live.

Names, with labels ``engine`` (the result label) and ``design`` (v4 or v5) on every sample:

- Pulsar's own transaction-coordinator metrics where a count means the same thing
  (``TransactionAggregator``; the names :mod:`bench.pulsar.metrics` reads from a real broker):
  ``pulsar_txn_created|committed|aborted|timeout|append_log`` from the coordinator's counts;
  v4's transaction buffer ``pulsar_txn_tb_committed|aborted`` (``TransactionBufferStats``: one per
  commit/abort marker the topic's buffer applied). PIP-473 keeps the coordinator metrics ("Existing
  transaction metrics remain") and drops ``pulsar_txn_tb_*`` for v5 ("not emitted by the new
  implementation"), so v5 has no ``pulsar_txn_tb_*`` here.
- PIP-473's ``pulsar_txn_metadata_store_*`` for v5 (its "Metrics" section): ``op_writes``,
  ``header_cas{result}``, ``outstanding_op_records``, and ``index_query_seconds`` from the engine's
  own registry (:class:`metadata_v5.engine.V5Metrics`) when the run has one (not across Spark shards).
- ``txnbench_*`` otherwise: every exact count as ``txnbench_count_total{count="<name>"}`` (the keys
  of ``counts.json``; one below zero, as a broker-side difference can be, under
  ``txnbench_count_signed``, a gauge), and each latency histogram of ``latency.json`` as
  ``txnbench_<name>_seconds`` (HdrHistogram counts cumulated at fixed bucket bounds).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
from hdrh.histogram import HdrHistogram
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector

from bench.replay import registry
from engine.errors import ConfigError

FILE = "metrics.txt"
LABELS = ("engine", "design")
# seconds: 100 µs .. 60 s (Prometheus' default buckets, widened at both ends for µs-scale models)
BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
             30.0, 60.0)

# (family name without _total, help); Pulsar's names, see the module docstring. Which count each
# design reports under a family is in its spec (EngineSpec.metric_keys).
FAMILIES: tuple[tuple[str, str], ...] = (
    ("pulsar_txn_created", "transactions created at the coordinator"),
    ("pulsar_txn_committed", "transactions committed by the coordinator"),
    ("pulsar_txn_aborted", "transactions aborted by the coordinator"),
    ("pulsar_txn_timeout", "transactions the coordinator timed out"),
    ("pulsar_txn_append_log", "transaction log appends (MLTransactionMetadataStore)"),
    ("pulsar_txn_tb_committed", "commit markers applied by transaction buffers"),
    ("pulsar_txn_tb_aborted", "abort markers applied by transaction buffers"),
    ("pulsar_txn_metadata_store_op_writes", "op records written (PIP-473)"),
)
PIP_CAS = "pulsar_txn_metadata_store_header_cas"
PIP_OUTSTANDING = "pulsar_txn_metadata_store_outstanding_op_records"


def _design(cfg: Mapping[str, Any]) -> str:
    return str(cfg.get("engine", ""))


def run_families(label: str, design: str, counts: Mapping[str, int], latency: Mapping[str, Any] | None = None,
                 engine_metrics: Iterable[Metric] = ()) -> list[Metric]:
    """One run's metric families (labels ``engine=label``, ``design``)."""
    values = [label, design]
    out: list[Metric] = []
    spec = registry.ENGINES.get(design)
    keys = spec.metric_keys if spec is not None else {}
    for name, help_text in FAMILIES:
        key = keys.get(name)
        if key is not None and key in counts:
            c = CounterMetricFamily(name, help_text, labels=LABELS)
            c.add_metric(values, counts[key])
            out.append(c)
    if any(k.startswith("tc.header_cas.") for k in counts):  # PIP-473's CAS: a metadata-store design
        cas = CounterMetricFamily(PIP_CAS, "header CAS attempts by outcome (PIP-473)", labels=[*LABELS, "result"])
        for result in ("ok", "conflict", "reject"):
            cas.add_metric([*values, result], counts.get(f"tc.header_cas.{result}", 0))
        out.append(cas)
        if "gc.op_records_outstanding" in counts:
            g = GaugeMetricFamily(PIP_OUTSTANDING, "uncollected op records at the end of the run (PIP-473)",
                                  labels=LABELS)
            g.add_metric(values, counts["gc.op_records_outstanding"])
            out.append(g)
    emitted = {m.name for m in out}
    for m in engine_metrics:  # the engine's own PIP families it alone measures (e.g. index query latency)
        if m.name in emitted or m.type not in ("histogram", "counter", "gauge"):
            continue
        relabelled = Metric(m.name, m.documentation, m.type, m.unit)
        for s in m.samples:
            if s.name.endswith("_created"):  # a wall-clock timestamp: the file stays deterministic
                continue
            relabelled.add_sample(s.name, {**dict(zip(LABELS, values)), **s.labels}, s.value, s.timestamp, s.exemplar)
        out.append(relabelled)
        emitted.add(m.name)
    every = CounterMetricFamily("txnbench_count", "the run's exact counts (counts.json)", labels=[*LABELS, "count"])
    signed = GaugeMetricFamily("txnbench_count_signed", "counts.json entries below zero (a counter cannot be)",
                               labels=[*LABELS, "count"])
    for key, value in sorted(counts.items()):
        (every if value >= 0 else signed).add_metric([*values, key], value)
    out.append(every)
    if signed.samples:  # e.g. a broker-side difference of two counters
        out.append(signed)
    for name, summary in sorted((latency or {}).items()):
        out.append(_histogram(name, summary, values))
    return out


def _histogram(name: str, summary: Mapping[str, Any], values: list[str]) -> HistogramMetricFamily:
    base = name[:-3] if name.endswith("_us") else name
    h = HdrHistogram.decode(summary["hdr"])
    recorded = _recorded(h)
    buckets: list[tuple[str, float]] = []
    for bound in BUCKETS_S:
        buckets.append((repr(bound), float(_count_at_or_below(h, recorded, int(bound * 1e6)))))
    buckets.append(("+Inf", float(summary["count"])))
    fam = HistogramMetricFamily(f"txnbench_{base}_seconds", f"{base.replace('_', ' ')} latency (latency.json)",
                                labels=LABELS)
    fam.add_metric(values, buckets, sum_value=summary["sum_us"] / 1e6)
    return fam


def _recorded(h: HdrHistogram) -> list[tuple[int, int]]:
    """What ``h.get_recorded_iterator()`` yields, (value iterated to, count) per non-empty bucket,
    found with numpy: the iterator steps through every sub-bucket in Python (0.2 s per replay)."""
    counts = np.ctypeslib.as_array(h.counts)[: h.counts_len]
    return [(h.get_highest_equivalent_value(h.get_value_from_index(int(i))), int(counts[i]))
            for i in np.flatnonzero(counts)]


def _count_at_or_below(h: HdrHistogram, recorded: list[tuple[int, int]], value_us: int) -> int:
    """Recorded values <= ``value_us`` (to the histogram's precision: a bucket counts where its
    values are equivalent); ``recorded``: (value, count) of ``h``'s recorded iterator, in order."""
    total = 0
    for value, count in recorded:
        if value > value_us and not h.values_are_equivalent(value, value_us):
            break
        total += count
    return total


class _Families(Collector):
    def __init__(self, source: Callable[[], list[Metric]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield from self._source()


def render(families: list[Metric]) -> bytes:
    """OpenMetrics text of ``families`` (ends with ``# EOF``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(lambda: families))
    return generate_latest(registry)


def result_families(runs: Mapping[str, Mapping[str, Any]], counts: Mapping[str, Mapping[str, int]],
                    latency: Mapping[str, Any], engine_metrics: Mapping[str, list[Metric]] | None = None) -> list[Metric]:
    """Every run of a result set, merged into one family per name (labels tell the runs apart)."""
    by_name: dict[str, Metric] = {}
    for label in sorted(counts):
        design = _design(runs.get(label, {}).get("config", {}))
        for fam in run_families(label, design, counts[label], latency.get(label),
                                (engine_metrics or {}).get(label, ())):
            into = by_name.get(fam.name)
            if into is None:
                by_name[fam.name] = fam
            else:
                into.samples.extend(fam.samples)
    return [by_name[k] for k in sorted(by_name)]


class LiveServer:
    """``--prometheus-port``: serve the running replays' counts over HTTP while they run.

    Each source gives (label, design, counts) at scrape time; ``prometheus_client``'s server
    thread calls it, so a source must hand back a copy (a replayer's ``Counters`` copied under
    the GIL). Latency histograms are not read live (their buffers belong to the replay thread):
    the time series' last closed window gives its rates and percentiles instead.
    """

    def __init__(self, port: int, addr: str = "127.0.0.1") -> None:
        from prometheus_client import start_http_server

        self._lock = threading.Lock()
        self._sources: list[Callable[[], list[Metric]]] = []
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(self._collect))
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=registry)
        except OSError as exc:
            raise ConfigError(f"--prometheus-port {port}: cannot listen on {addr}:{port} ({exc.strerror})") from None
        self.port = self._server.server_address[1]

    def add(self, source: Callable[[], list[Metric]]) -> None:
        with self._lock:
            self._sources.append(source)

    def _collect(self) -> list[Metric]:
        with self._lock:
            sources = list(self._sources)
        by_name: dict[str, Metric] = {}
        for source in sources:
            for fam in source():
                into = by_name.get(fam.name)
                if into is None:
                    by_name[fam.name] = fam
                else:
                    into.samples.extend(fam.samples)
        return list(by_name.values())

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _broker_counts(replayer: Any) -> dict[str, int]:
    """The broker's counts now (coordinator, buffers, dispatchers, metadata store), read from the
    server thread: a partition or subscription added meanwhile can end the walk over the
    broker's dicts (RuntimeError), so it is tried again; empty if it never completes."""
    for _ in range(5):
        try:
            counts = dict(replayer._retired)
            for key, value in replayer.broker.stats().items():
                counts[key] = counts.get(key, 0) + value
            return counts
        except RuntimeError:
            continue
    return {}


def live_source(replayer: Any, design: str) -> Callable[[], list[Metric]]:
    """A :class:`LiveServer` source reading a running :class:`bench.replay.replay.Replayer`."""

    def families() -> list[Metric]:
        counts = dict(replayer.counts)  # a dict copy is atomic under the GIL
        counts.update({"events." + op: n for op, n in dict(replayer._op_counts).items() if n})
        counts.update(_broker_counts(replayer))
        fams = run_families(replayer.label, design, counts)
        rows = replayer.series.rows
        if rows:
            last = rows[-1]
            seconds = last["window_us"] / 1e6
            for name in ("publish", "consume", "commit", "abort"):
                g = GaugeMetricFamily(f"txnbench_{name}_rate", f"{name}s per second in the last closed window",
                                      labels=LABELS)
                g.add_metric([replayer.label, design], last[f"{name}_count"] / seconds)
                fams.append(g)
            g = GaugeMetricFamily("txnbench_backlog", "messages published, not yet delivered to any subscription",
                                  labels=LABELS)
            g.add_metric([replayer.label, design], last["backlog"])
            fams.append(g)
        if replayer.pacing is not None:
            g = GaugeMetricFamily("txnbench_max_lag_seconds", "largest lag of a row behind its trace time",
                                  labels=LABELS)
            g.add_metric([replayer.label, design], replayer.pacing.max_lag_us / 1e6)
            fams.append(g)
        return fams

    return families
