"""Latency histograms (HdrHistogram) and their JSON summary; mergeable across shards."""

from __future__ import annotations

import resource
from typing import Any, Iterable, Mapping

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 24 * 3600 * 1_000_000  # a day: anything longer is clamped (and counted)
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 99.0, 99.9)

# What each histogram measures, for reports.
METRICS = {
    "publish_nontxn_us": "publish request -> broker's answer, non-transactional (virtual time: the modelled hops and append)",
    "publish_txn_us": "publish request -> answer inside a txn: plus v4's partition registration at the TC, v5's header read and op-record write",
    "dispatch_nontxn_us": "publish -> first delivery, non-transactional messages (head-of-line blocking shows here)",
    "dispatch_txn_us": "publish -> first delivery, messages of committed transactions",
    "commit_to_visible_us": "commit request -> every message of the txn delivered at least once",
    "end_txn_us": "commit/abort request -> coordinator's answer to the client",
    "new_txn_us": "new_txn request -> coordinator's answer to the client (the txn's publishes and acks wait for it)",
    "time_to_first_dispatch_after_crash_us": "broker crash -> first delivery by the recovered broker",
}


def committed_rate(txns: Iterable[dict[str, Any]]) -> float | None:
    """Committed txns per second over the run's txn phase: from the first new_txn issued (any
    txn's ``opened_ts_us``; the run's start for results written before that column) to the last
    commit answered (``end_ts_us``, µs from the run's start), rounded to 0.1. A run's setup rows
    stay out: a real client subscribes one subscription after another before its first txn
    (bench.pulsar's TraceRunner waits for each, 4-6 ms apiece on the broker; 128 of them were
    0.63 of a 1.6 s asap run), which the model does at no cost."""
    ends, opened = [], []
    for r in txns:
        if r.get("opened_ts_us") is not None:
            opened.append(r["opened_ts_us"])
        if r["outcome"] == "committed" and r["end_ts_us"] is not None:
            ends.append(r["end_ts_us"])
    span = max(ends) - min(opened, default=0) if ends else 0
    return round(len(ends) / (span / 1e6), 1) if span > 0 else None


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _counts_indexes(h: HdrHistogram, values: np.ndarray) -> np.ndarray:
    """HdrHistogram's ``_counts_index_for`` over an array (the same integer arithmetic;
    ``frexp`` gives the bit length exactly, since values stay far below 2**53)."""
    bit_length = np.frexp((values | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
    bucket = bit_length - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub_bucket = values >> (bucket + h.unit_magnitude)
    return ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub_bucket - h.sub_bucket_half_count


def values_at_percentiles(h: HdrHistogram, percentiles: Iterable[float]) -> list[int]:
    """``[h.get_value_at_percentile(p) for p in percentiles]``, the same values from one numpy
    cumulative sum: hdrh walks the counts from the first bucket in Python for each percentile
    (about 8 ms per percentile of a replay's histogram)."""
    cumulative = np.cumsum(np.ctypeslib.as_array(h.counts)[: h.counts_len])
    out = []
    for p in percentiles:
        target = h.get_target_count_at_percentile(p)
        index = int(np.searchsorted(cumulative, target))  # the first bucket reaching the target
        if index >= h.counts_len:
            out.append(0)
            continue
        value = h.get_value_from_index(index)
        out.append(h.get_highest_equivalent_value(value) if p else h.get_lowest_equivalent_value(value))
    return out


class Histograms:
    """Named HdrHistograms fed in batches: samples gather in a list and go into the histogram
    by the thousand with numpy (one ``record_value`` call per sample was a few percent of a
    replay). Every read flushes first."""

    _FLUSH_AT = 65_536  # buffered samples per histogram

    def __init__(self) -> None:
        self._h: dict[str, HdrHistogram] = {}
        self._sum: dict[str, int] = {}  # exact sums: hdrh's own mean walks every bucket (slow)
        self._pending: dict[str, list[int]] = {}
        self.clamped = 0

    def record(self, name: str, value_us: int) -> None:
        pending = self._pending.get(name)
        if pending is None:
            self._h[name] = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
            self._sum[name] = 0
            pending = self._pending[name] = []
        self._sum[name] += value_us
        if value_us > HIGHEST_US:
            self.clamped += 1
            value_us = HIGHEST_US
        elif value_us < LOWEST_US:
            value_us = LOWEST_US
        pending.append(value_us)
        if len(pending) >= self._FLUSH_AT:
            self._flush(name)

    def _flush(self, name: str) -> None:
        pending = self._pending[name]
        if not pending:
            return
        h = self._h[name]
        values = np.array(pending, dtype=np.int64)
        indexes, counts = np.unique(_counts_indexes(h, values), return_counts=True)
        for i, n in zip(indexes.tolist(), counts.tolist()):
            h.counts[i] += n
        h.total_count += len(pending)
        h.min_value = min(h.min_value, int(values.min()))
        h.max_value = max(h.max_value, int(values.max()))
        pending.clear()

    def _flush_all(self) -> None:
        for name in self._pending:
            self._flush(name)

    def names(self) -> list[str]:
        return sorted(self._h)

    def summary(self) -> dict[str, Any]:
        self._flush_all()
        out: dict[str, Any] = {}
        for name in sorted(self._h):
            h = self._h[name]
            count = h.get_total_count()
            out[name] = {
                "count": count,
                "sum_us": self._sum.get(name, 0),
                "mean_us": round(self._sum.get(name, 0) / count, 1) if count else 0.0,
                "min_us": h.get_min_value(),
                "max_us": h.get_max_value(),
                **{f"p{p:g}_us": v for p, v in zip(PERCENTILES, values_at_percentiles(h, PERCENTILES))},
                "hdr": h.encode().decode(),  # mergeable: HdrHistogram.decode + add
            }
        return out

    def cdf(self, name: str, points: int = 200) -> list[tuple[float, int]]:
        self._flush_all()
        h = self._h.get(name)
        if h is None or h.get_total_count() == 0:
            return []
        qs = [100.0 * i / points for i in range(1, points + 1)]
        return list(zip(qs, values_at_percentiles(h, qs)))

    @staticmethod
    def merge_summaries(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Merge latency summaries of several shards through their encoded histograms."""
        merged = Histograms()
        for part in parts:
            for name, s in part.items():
                h = HdrHistogram.decode(s["hdr"])
                if name in merged._h:
                    merged._h[name].add(h)
                else:
                    merged._h[name] = h
                merged._sum[name] = merged._sum.get(name, 0) + s["sum_us"]
        return merged.summary()


def histogram_from_summary(s: dict[str, Any]) -> HdrHistogram:
    return HdrHistogram.decode(s["hdr"])


def mean_put_us(counts: Mapping[str, Any]) -> float | None:
    """A broker run's mean metadata put in µs (``pulsar.metadata.puts_ms`` over ``puts``, as
    ``bench.pulsar.metrics`` names them); None without both."""
    n, ms = counts.get("pulsar.metadata.puts"), counts.get("pulsar.metadata.puts_ms")
    return None if not n or ms is None else round(1000 * ms / n, 1)
