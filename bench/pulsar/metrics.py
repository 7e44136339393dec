"""What the broker counts: ``GET /metrics/`` and admin topic stats, before and after a run, mapped
onto the models' count names where they mean the same thing.

Mapped (the models' names, ``bench/report/report.py`` rows):

- ``tc.log_appends``: ``pulsar_txn_append_log_count`` (v4 coordinator, MLTransactionMetadataStore's
  appendLogCount: one per new/add-partition/add-subscription/end record);
- ``tc.txns.created|committed|aborted|timed_out``: ``pulsar_txn_*_count`` (v4 coordinator);
- ``meta.reads`` / ``meta.writes``: ``pulsar_metadata_store_ops_latency_ms_count`` of type ``get`` /
  ``put`` + ``del`` (MetadataStoreStats; a CAS is a put), over every metadata store of the broker,
  so background work (load reports, topic ownership) is counted too; ``pulsar.metadata.puts_ms``
  (``gets_ms``, ``deletes_ms``): the same histogram's sum over its successful ops, so a mean op time
  is ``puts_ms / puts`` (failed ops are counted in ``puts`` too: few);
- ``ledger.appends`` (entries written to the run's data topics: ``entriesAddedCounter`` of their
  internal stats), ``ledger.appends.data`` (``msgInCounter``: one entry per message, batching being
  off in the client) and ``ledger.appends.marker`` (the difference: v4's commit/abort markers,
  which carry no message), with their bytes (``totalSize`` less ``bytesInCounter``);
- ``pending_ack.appends`` and ``snapshot.writes``: entries added to the run's
  ``__transaction_pending_ack`` and ``__transaction_buffer_snapshot*`` system topics.

Every other counter that moved keeps its Prometheus name under ``pulsar.`` (summed over labels).
The run's namespace is new, so its topics' counters are the run's own; the broker-wide
counters are deltas. The v5 design's segment topics are not listed by the v2 admin API, so its
ledger counts are not mapped (its metadata operations are).
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import quote

from engine.errors import BackendUnavailable
from bench.pulsar.target import PulsarTarget, http_get, http_json

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
COUNTER_SUFFIXES = ("_total", "_count", "_created")  # _created is a timestamp: dropped below

# Prometheus name (without _total/_count) -> the models' count name
TXN_METRICS = {
    "pulsar_txn_append_log": "tc.log_appends",
    "pulsar_txn_created": "tc.txns.created",
    "pulsar_txn_committed": "tc.txns.committed",
    "pulsar_txn_aborted": "tc.txns.aborted",
    "pulsar_txn_timeout": "tc.txns.timed_out",
}
META_OPS = "pulsar_metadata_store_ops_latency_ms_count"
# the same histogram's sum: milliseconds (currentTimeMillis differences) spent in the ops, from the
# call to its completion (RocksdbMetadataStore: on the caller's thread, the WAL's fsync included)
META_MS = "pulsar_metadata_store_ops_latency_ms_sum"
_META_KIND = {"get": "gets", "put": "puts", "del": "deletes"}


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a Prometheus text exposition: (name, sorted labels) -> value."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = value
    return out


def counter_deltas(before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                   after: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[tuple[str, tuple[tuple[str, str], ...]], int]:
    """``after - before`` of the counter-like samples (``*_total``, ``*_count``, the metadata
    store's op-time sum) that moved."""
    out = {}
    for key, value in after.items():
        name = key[0]
        if not (name.endswith(("_total", "_count")) or name == META_MS) or math.isnan(value):
            continue
        d = value - before.get(key, 0.0)
        if d:
            out[key] = int(round(d))
    return out


def map_metrics(deltas: dict[tuple[str, tuple[tuple[str, str], ...]], int]) -> dict[str, int]:
    """Deltas -> our count names (see the module docstring) plus ``pulsar.<name>`` sums."""
    out: dict[str, int] = {}

    def add(k: str, v: int) -> None:
        out[k] = out.get(k, 0) + v

    for (name, labels), d in deltas.items():
        base = name.removesuffix("_total").removesuffix("_count")
        if base in TXN_METRICS:
            add(TXN_METRICS[base], d)
        if name == META_MS:  # successes only: the mean time of the counts below
            op = dict(labels).get("type", "")
            if op in _META_KIND and dict(labels).get("status", "success") == "success":
                add(f"pulsar.metadata.{_META_KIND[op]}_ms", d)
            continue
        if name == META_OPS:
            kind = dict(labels).get("type")
            if kind == "get":
                add("meta.reads", d)
                add("pulsar.metadata.gets", d)
            elif kind in ("put", "del"):
                add("meta.writes", d)
                add("pulsar.metadata." + ("puts" if kind == "put" else "deletes"), d)
        elif name.endswith("_bucket"):
            continue
        add("pulsar." + name, d)
    return out


def scrape(target: PulsarTarget) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse_prometheus(http_get(target, "/metrics/", timeout=15).decode(errors="replace"))


def _topic_path(topic: str) -> str:
    """``persistent://t/n/x`` -> ``t/n/x`` for the v2 admin's REST paths."""
    return "/".join(quote(p, safe="") for p in topic.split("://", 1)[1].split("/"))


def namespace_topics(target: PulsarTarget, namespace: str) -> list[str]:
    try:
        found = http_json(target, f"/admin/v2/persistent/{namespace}?includeSystemTopic=true")
    except BackendUnavailable:
        return []
    return [str(t) for t in found] if isinstance(found, list) else []


def topic_numbers(target: PulsarTarget, topic: str) -> dict[str, int]:
    internal = http_json(target, f"/admin/v2/persistent/{_topic_path(topic)}/internalStats")
    stats = http_json(target, f"/admin/v2/persistent/{_topic_path(topic)}/stats")
    return {
        "entries": int(internal.get("entriesAddedCounter", 0)), "bytes": int(internal.get("totalSize", 0)),
        "msgs": int(stats.get("msgInCounter", 0)), "msg_bytes": int(stats.get("bytesInCounter", 0)),
    }


def namespace_counts(target: PulsarTarget, namespaces: list[str]) -> dict[str, int]:
    """The run's own topics' counters (its namespaces are new: these are the run's)."""
    out: dict[str, int] = {}

    def add(k: str, v: int) -> None:
        out[k] = out.get(k, 0) + v

    for ns in namespaces:
        for topic in namespace_topics(target, ns):
            try:
                n = topic_numbers(target, topic)
            except BackendUnavailable:
                add("pulsar.stats_unavailable", 1)
                continue
            local = topic.rsplit("/", 1)[-1]
            if "__transaction_pending_ack" in local:
                add("pending_ack.appends", n["entries"])
            elif "__transaction_buffer_snapshot" in local:
                add("snapshot.writes", n["entries"])
            elif local.startswith("__"):
                add("pulsar.system_topic_entries", n["entries"])
            else:
                add("ledger.appends", n["entries"])
                add("ledger.appends.data", n["msgs"])
                add("ledger.appends.marker", n["entries"] - n["msgs"])
                add("pulsar.ledger.bytes", n["bytes"])
                add("pulsar.ledger.marker_bytes", max(0, n["bytes"] - n["msg_bytes"]))
    return out


def coordinator_log(target: PulsarTarget) -> dict[str, int]:
    """Entries and bytes of the v4 coordinator's ``__transaction_log_N`` topics (broker-wide)."""
    out = {"entries": 0, "bytes": 0}
    for topic in namespace_topics(target, "pulsar/system"):
        if "__transaction_log_" in topic:
            try:
                n = topic_numbers(target, topic)
            except BackendUnavailable:
                continue
            out["entries"] += n["entries"]
            out["bytes"] += n["bytes"]
    return out


class Snapshot:
    """Broker counters before a run; :meth:`counts` after it gives the run's."""

    def __init__(self, target: PulsarTarget) -> None:
        self.target = target
        self.metrics = scrape(target)
        self.log = coordinator_log(target)

    def counts(self, namespaces: list[str]) -> dict[str, Any]:
        after = scrape(self.target)
        out = map_metrics(counter_deltas(self.metrics, after))
        log = coordinator_log(self.target)
        out["pulsar.txn_log.entries_added"] = log["entries"] - self.log["entries"]
        out["pulsar.txn_log.bytes"] = log["bytes"] - self.log["bytes"]
        for k, v in namespace_counts(self.target, namespaces).items():
            out[k] = out.get(k, 0) + v
        return dict(sorted(out.items()))
