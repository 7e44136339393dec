"""A run's per-second time series (``timeseries.parquet``), as OpenMessaging Benchmark records it.

OMB's ``WorkloadGenerator`` prints and stores one record per reporting period: publish and consume
rates, backlog, and the publish / end-to-end latency percentiles of that period (its
``TestResult``: ``publishRate``, ``consumeRate``, ``backlog``, ``publishLatency50pct`` ... ``Max``,
``endToEndLatency*``). Here a period is a window of ``WINDOW_US`` of the run's clock (virtual or
wall), so a virtual-time series is deterministic, and a row also carries the transaction rates
(commit, abort), the end-txn latency and the time dispatchers spent blocked at maxReadPosition.

Samples are attributed to the window of the clock time they happen at (a publish when the broker
answers, a delivery when it is delivered, an end-txn when the client hears the answer). The
replayer closes a window by running its clock up to the window's end (:meth:`Series.due`), then
samples the gauges (exact in virtual time); a sample that finds the clock past the open window's
end (a caller applying rows one by one, as the Kafka stream does) closes it first, the gauges
then read at that sample's time: ``backlog`` is the messages published and not yet delivered to any
subscription (an aborted txn's messages leave it), ``blocked_ms`` the time blocked at
maxReadPosition that ended in the window (``dispatch.blocked_us`` is counted when a block ends).

Each window keeps its latency histograms encoded (HdrHistogram), so the series of Spark shards
(disjoint topic sets replayed separately) merge exactly: counts, backlog and blocked time add up,
histograms are added and their percentiles read again (:func:`merge_rows`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hdrh.histogram import HdrHistogram

from bench.replay.measure import HIGHEST_US, LOWEST_US, SIGNIFICANT_DIGITS, _counts_indexes, values_at_percentiles

WINDOW_US = 1_000_000
RATES = ("publish", "consume", "commit", "abort")  # events per window -> <name>_per_s
LATENCIES = ("publish", "end_to_end", "end_txn")  # publish -> answer, publish -> first delivery, end-txn
QUANTILES = (50.0, 99.0, 99.9)
FILE = "timeseries.parquet"

SCHEMA = pa.schema(
    [("engine", pa.string()), ("window_start_us", pa.int64()), ("window_us", pa.int64())]
    + [(f"{r}_count", pa.int64()) for r in RATES]
    + [(f"{r}_per_s", pa.float64()) for r in RATES]
    + [("backlog", pa.int64()), ("blocked_ms", pa.float64())]
    + [(f"{lat}_latency_{_q}_ms", pa.float64()) for lat in LATENCIES
       for _q in [f"p{q:g}".replace(".", "") for q in QUANTILES] + ["max"]]
)

Gauges = Callable[[], tuple[int, int]]  # () -> (backlog now, cumulative blocked µs)


def _quantile_name(q: float) -> str:
    return f"p{q:g}".replace(".", "")


class Series:
    """One run's windows. :meth:`count` and :meth:`latency` record into the open window; the
    replayer calls :meth:`close` at each window end it reaches (see :meth:`due`) and
    :meth:`finish` at the run's end."""

    def __init__(self, label: str, gauges: Gauges, now: Callable[[], int] | None = None,
                 window_us: int = WINDOW_US) -> None:
        self.label = label
        self.window_us = window_us
        self._gauges = gauges
        self._now = now
        self._start = 0  # the open window's start
        self._counts = dict.fromkeys(RATES, 0)
        self._samples: dict[str, list[int]] = {lat: [] for lat in LATENCIES}
        self._blocked_us = 0  # cumulative at the last close
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)  # reused for every window
        self._used: list[int] = []  # the counts indexes the last encoded window set
        self.rows: list[dict[str, Any]] = []  # closed windows, with their encoded histograms

    def due(self) -> int:
        """The end of the open window: the clock time at which to :meth:`close` it."""
        return self._start + self.window_us

    def count(self, name: str, n: int = 1) -> None:
        if self._now is not None and self._now() >= self._start + self.window_us:
            self._catch_up()
        self._counts[name] += n

    def latency(self, name: str, value_us: int) -> None:
        if self._now is not None and self._now() >= self._start + self.window_us:
            self._catch_up()
        self._samples[name].append(min(max(value_us, LOWEST_US), HIGHEST_US))

    def _catch_up(self) -> None:
        assert self._now is not None
        now = self._now()
        while self._start + self.window_us <= now:
            self.close()

    def close(self) -> None:
        """Close the open window (the clock has reached its end) and open the next."""
        backlog, blocked_us = self._gauges()
        row: dict[str, Any] = {"engine": self.label, "window_start_us": self._start, "window_us": self.window_us,
                               "backlog": backlog, "blocked_us": blocked_us - self._blocked_us, "hdr": {}}
        self._blocked_us = blocked_us
        for name in RATES:
            row[f"{name}_count"] = self._counts[name]
            self._counts[name] = 0
        for name, samples in self._samples.items():
            if samples:
                row["hdr"][name] = self._encode(samples)
                samples.clear()
        self.rows.append(row)
        self._start += self.window_us

    def _encode(self, samples: list[int]) -> str:
        h = self._h
        for i in self._used:  # what HdrHistogram.reset does, for the counts the last window set only
            h.counts[i] = 0  # (reset walks every bucket in Python: 4 % of a v4 replay)
        values = np.array(samples, dtype=np.int64)
        indexes, counts = np.unique(_counts_indexes(h, values), return_counts=True)
        self._used = indexes.tolist()
        for i, n in zip(self._used, counts.tolist()):
            h.counts[i] = n
        h.total_count = len(samples)
        h.min_value = int(values.min())
        h.max_value = int(values.max())
        return h.encode().decode()

    def finish(self, end_us: int) -> list[dict[str, Any]]:
        """Close every window up to the one holding ``end_us`` (the run's last clock time)."""
        while self._start <= end_us:
            self.close()
        return self.rows


def from_timeline(label: str, answers: Iterable[tuple[int, str, int]], deliveries: Iterable[int],
                  first_deliveries: Iterable[tuple[int, int]], backlog: Iterable[tuple[int, int | None]],
                  window_us: int = WINDOW_US) -> list[dict[str, Any]]:
    """The windows of a run known only afterwards, from its events (the real broker's client):
    ``answers`` (time, publish|commit|abort|end_failed, latency µs), every delivery's time, first
    deliveries (time, publish -> delivery µs), and per message that counts toward the backlog
    (publish answered time, first delivery time or None). No blocked time: the broker does not
    export it (``blocked_ms`` is null)."""
    events: list[tuple[int, str, int | None]] = [(t, kind, lat) for t, kind, lat in answers]
    events += [(t, "consume", None) for t in deliveries]
    events += [(t, "end_to_end", lat) for t, lat in first_deliveries]
    events.sort(key=lambda ev: ev[0])
    pubs = np.array(sorted(p for p, _ in backlog), dtype=np.int64)
    firsts = np.array(sorted(f for _, f in backlog if f is not None), dtype=np.int64)
    end = events[-1][0] if events else 0

    def gauges() -> tuple[int, int]:
        until = series._start + window_us  # the gauges at the window's end
        return int(np.searchsorted(pubs, until) - np.searchsorted(firsts, until)), 0

    series = Series(label, gauges, window_us=window_us)
    for t, kind, lat in events:
        while t >= series.due():
            series.close()
        if kind in ("publish", "consume", "commit", "abort"):
            series.count(kind)
        if kind in ("commit", "abort", "end_failed"):
            series.latency("end_txn", lat or 0)
        elif kind in ("publish", "end_to_end"):
            series.latency(kind, lat or 0)
    rows = series.finish(end)
    for row in rows:
        row["blocked_us"] = None
    return rows


def merge_rows(parts: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge the series of several shards of one run (same engine label, same windows): counts,
    backlog and blocked time add, histograms are added. A shard whose clock ended earlier simply
    has no row for the later windows."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for rows in parts:
        for row in rows:
            key = (row["engine"], row["window_start_us"])
            into = merged.get(key)
            if into is None:
                merged[key] = {**row, "hdr": dict(row["hdr"])}
                continue
            for name in RATES:
                into[f"{name}_count"] += row[f"{name}_count"]
            into["backlog"] += row["backlog"]
            into["blocked_us"] += row["blocked_us"]
            for name, enc in row["hdr"].items():
                if name in into["hdr"]:
                    h = HdrHistogram.decode(into["hdr"][name])
                    h.add(HdrHistogram.decode(enc))
                    into["hdr"][name] = h.encode().decode()
                else:
                    into["hdr"][name] = enc
    return [merged[k] for k in sorted(merged)]


def table(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as :data:`SCHEMA` (rates per second, percentiles in ms; null when no sample)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    for row in rows:
        seconds = row["window_us"] / 1e6
        cols["engine"].append(row["engine"])
        cols["window_start_us"].append(row["window_start_us"])
        cols["window_us"].append(row["window_us"])
        for name in RATES:
            cols[f"{name}_count"].append(row[f"{name}_count"])
            cols[f"{name}_per_s"].append(row[f"{name}_count"] / seconds)
        cols["backlog"].append(row["backlog"])
        cols["blocked_ms"].append(row["blocked_us"] / 1000 if row["blocked_us"] is not None else None)
        for lat in LATENCIES:
            enc = row["hdr"].get(lat)
            h = HdrHistogram.decode(enc) if enc else None
            values = values_at_percentiles(h, QUANTILES) if h is not None else [None] * len(QUANTILES)
            for q, v in zip(QUANTILES, values):
                cols[f"{lat}_latency_{_quantile_name(q)}_ms"].append(v / 1000 if v is not None else None)
            cols[f"{lat}_latency_max_ms"].append(h.get_max_value() / 1000 if h is not None else None)
    return pa.table(cols, schema=SCHEMA)


def write(path: str | Path, rows: list[dict[str, Any]]) -> None:
    pq.write_table(table(rows), path, compression="zstd")
