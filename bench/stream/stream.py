"""Streaming replay (``txnbench stream load`` / ``txnbench stream run``): a trace travels through
a Kafka topic and a faust-streaming app (:mod:`bench.stream.stream_app`) applies every event to v4 and
v5 side by side, in wall time, as it arrives.

**Trace topic.** ``load`` validates the whole trace first (a bad trace is refused with one
:class:`~engine.errors.TraceError` and nothing is produced), then creates the topic with ONE
partition (trace order is the order of the log) and writes JSON records::

    {"kind": "start", "rows": N, "trace": {...}}     header: row count, path, generator notes
    {"kind": "event", "row": 0, "ts_us": ..., ...}   one per trace row, null fields left out
    {"kind": "end", "rows": N}                       end-of-trace marker

A topic that already exists is refused (load into a new ``--topic``): a run reads the topic from
its first offset and must see exactly one trace.

**Run.** Every run is a new consumer group (app id ``txnbench-stream-<random>``) reading from the
earliest offset. The two engines (one :class:`~bench.replay.replay.Replayer` each, ``time_mode="wall"``)
are built when the header arrives, so wall time ``0`` is the header's arrival; each event is
applied when both engines' clocks reach its ``ts_us`` (a lagging consumer applies it at once,
late, and the lag is measured). Between events a loop callback runs the engines' due timers
(dispatcher polls, sweeps), so the asyncio loop never sleeps inside engine code. At the end
marker the run checks the row count, drains for ``drain_ms`` (counted from the later of the last
``ts_us`` and the marker's arrival, so a lagging run still drains fully) and writes the standard result
directory (:mod:`bench.replay.results`), which ``txnbench report`` reads like any other.

Per event and engine a measurement record goes to the output topic and the per-engine summary
(events, deliveries, apply and lag figures; at the end the latency summary) to a Faust table.

Ctrl-C stops the app and closes the engines; the result directory is not written (results are
all or nothing). An unreachable broker is one :class:`~engine.errors.BackendUnavailable` naming
the URL.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.replay import registry
from bench.replay.config import RunConfig
from bench.replay.replay import DeliverySink, Replayer, RunResult
from bench.trace.schema import COLUMNS
from bench.trace.trace import Event, RowValidator, read_events, trace_metadata, validate
from engine.errors import BackendUnavailable, ConfigError, TraceError, TxnbenchError
from engine.kafkaledger import translated

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python 3.0 on Python 3.11
    import kafka.errors as kerrors
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

DEFAULT_TOPIC = "txnbench-trace"
START, EVENT, END = "start", "event", "end"
CONNECT_TIMEOUT_MS = 3_000
PROGRESS_EVERY_S = 1.0
TICK_MAX_S = 0.05  # the ticker looks at the engines' timers at least this often
_FIELDS = COLUMNS  # Event fields after ``row``

StreamProgress = Callable[[int, int, float], None]  # (events done, rows in trace, events/s)



# --- Kafka access (the one place kafka-python errors are translated) ---------------------------


def bootstrap(url: str) -> str:
    """``kafka://host:port[,host:port]`` -> ``host:port[,host:port]``."""
    m = re.fullmatch(r"kafka://([^:/,]+:\d+(?:,[^:/,]+:\d+)*)/?", url or "")
    if not m:
        raise ConfigError(f"bad Kafka URL {url!r}; expected kafka://host:port")
    return m.group(1)


def _kafka(url: str, action: str) -> Any:
    """Kafka errors of the streaming tools: all of them mean the backend is not usable."""
    return translated(url, action, BackendUnavailable)


def _common(url: str) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap(url).split(","), "client_id": "txnbench-stream",
            "bootstrap_timeout_ms": CONNECT_TIMEOUT_MS, "request_timeout_ms": 10_000,
            "reconnect_backoff_max_ms": 1_000}


def _admin(url: str) -> Any:
    with _kafka(url, "connect"):
        return KafkaAdminClient(**_common(url))


def create_topics(url: str, topics: dict[str, dict[str, str]], *, exist_ok: bool) -> list[str]:
    """Create one-partition topics (name -> config); return those that already existed (which
    is an error unless ``exist_ok``)."""
    admin = _admin(url)
    existed = []
    try:
        with _kafka(url, "create topics"):
            for name, config in topics.items():
                spec = {name: {"num_partitions": 1, "replication_factor": -1, "configs": dict(config)}}
                try:
                    admin.create_topics(spec, wait_for_metadata=True)
                except kerrors.TopicAlreadyExistsError:
                    if not exist_ok:
                        raise ConfigError(f"topic {name} already exists on {url}; load into a new --topic") from None
                    existed.append(name)
    finally:
        admin.close()
    return existed


def topic_exists(url: str, topic: str) -> bool:
    admin = _admin(url)
    try:
        with _kafka(url, "list topics"):
            return topic in set(admin.list_topics())
    finally:
        admin.close()


def delete_topics(url: str, topics: list[str]) -> None:
    """Best effort (clean-up)."""
    try:
        admin = _admin(url)
    except TxnbenchError:
        return
    try:
        admin.delete_topics(topics)
    except Exception:  # noqa: BLE001 - clean-up only
        pass
    finally:
        admin.close()


# --- records -----------------------------------------------------------------------------------


def encode_event(e: Event) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": EVENT, "row": e.row}
    for name in _FIELDS:
        v = getattr(e, name)
        if v is not None:
            rec[name] = v
    return rec


_INT_FIELDS = ("ts_us", "size", "timeout_ms")


def decode_event(rec: dict[str, Any]) -> Event:
    """The event of a record, its fields' types checked (records may come from anywhere that
    can write to the topic, not only ``load``): a bad one is a TraceError naming the row."""
    row = rec.get("row")
    if not isinstance(row, int) or isinstance(row, bool):
        raise TraceError(f"stream: event record without an integer row: {str(rec)[:80]}")
    fields: dict[str, Any] = {name: rec.get(name) for name in _FIELDS}
    for name, v in fields.items():
        want_int = name in _INT_FIELDS
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) if want_int else not isinstance(v, str)):
            raise TraceError(f"{name} must be {'an integer' if want_int else 'a string'}, got {v!r}", row=row,
                             source="stream")
    return Event(row=row, **fields)


def trace_records(trace: str | Path, rows: int) -> Iterator[dict[str, Any]]:
    """The records ``load`` writes for a validated trace of ``rows`` rows."""
    yield {"kind": START, "rows": rows, "trace": {"path": str(trace), "rows": rows, **trace_metadata(trace)}}
    for e in read_events(trace):
        yield encode_event(e)
    yield {"kind": END, "rows": rows}


def load_trace(trace: str | Path, url: str, topic: str = DEFAULT_TOPIC) -> int:
    """Validate ``trace``, then write it to a new one-partition ``topic``. Returns its rows."""
    bootstrap(url)
    rows = validate(trace)  # refused before anything is produced
    create_topics(url, {topic: {"retention.ms": "-1", "retention.bytes": "-1"}}, exist_ok=False)
    ok = False
    try:
        with _kafka(url, f"produce to {topic}"):
            producer = KafkaProducer(**_common(url), acks="all", linger_ms=5, max_block_ms=10_000)
            try:
                for rec in trace_records(trace, rows):
                    producer.send(topic, json.dumps(rec, separators=(",", ":")).encode(), partition=0)
                producer.flush(timeout=30)
            finally:
                producer.close(timeout=5)
        ok = True
    finally:
        if not ok:  # no half-loaded topic: a run would wait for its end marker forever
            delete_topics(url, [topic])
    return rows


def end_offset(url: str, topic: str) -> int:
    with _kafka(url, f"read offsets of {topic}"):
        consumer = KafkaConsumer(**_common(url), group_id=None, enable_auto_commit=False)
        try:
            tp = TopicPartition(topic, 0)
            return int(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()


# --- per-event logic (broker-free) --------------------------------------------------------------


class StreamReplay:
    """Applies trace records to several engine configurations side by side in wall time.

    :meth:`handle` takes records in topic order and returns, per event, one measurement dict per
    engine; :meth:`summary` is the per-engine running summary kept in the Faust table. Needs a
    running asyncio loop (a ticker task runs the engines' due timers between events)."""

    def __init__(self, configs: list[RunConfig], *, delivery_sink: DeliverySink | None = None,
                 progress: StreamProgress | None = None) -> None:
        if not configs:
            raise ConfigError("stream: no engine configurations")
        self.configs = [c if c.time_mode == "wall" else _wall(c) for c in configs]
        labels = [c.label for c in self.configs]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"stream: engine labels must differ, got {labels}")
        self._sink = delivery_sink
        self._progress = progress
        self._validator = RowValidator("stream")
        self.replayers: list[Replayer] = []
        self.header: dict[str, Any] | None = None
        self.rows = 0
        self.events = 0
        self.finished = False
        self.results: list[RunResult] = []
        self.stats: dict[str, dict[str, Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._started = 0.0
        self._last_event_at = 0.0
        self._last_ts = 0
        self._next_progress = 0.0
        self._closed = False

    # records

    async def handle(self, rec: dict[str, Any]) -> list[dict[str, Any]]:
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if kind == START:
            self._start(rec)
            return []
        if self.header is None:
            raise TraceError(f"stream: expected a {START!r} header record first, got {str(rec)[:80]}")
        if self.finished:
            raise TraceError(f"stream: record after the end of the trace: {str(rec)[:80]}")
        if kind == EVENT:
            return await self._event(decode_event(rec))
        if kind == END:
            if rec.get("rows") != self.events or self.events != self.rows:
                raise TraceError(f"stream: trace ended after {self.events} events, header announced {self.rows}"
                                 f" and the end marker {rec.get('rows')}")
            await self.drain()
            return []
        raise TraceError(f"stream: unknown record kind {kind!r}")

    def _start(self, rec: dict[str, Any]) -> None:
        if self.header is not None:
            raise TraceError("stream: a second start record (two traces in one topic?)")
        self.header = rec
        self.rows = int(rec["rows"])
        self.replayers = [Replayer(cfg, delivery_sink=self._sink) for cfg in self.configs]
        self.stats = {r.label: {"engine": r.label, "events": 0, "deliveries": 0, "apply_us_total": 0,
                                "apply_us_max": 0, "lag_us_max": 0, "client_errors": 0} for r in self.replayers}
        self._started = self._last_event_at = self._next_progress = time.perf_counter()
        self._loop = asyncio.get_running_loop()
        self._arm()

    async def _event(self, e: Event) -> list[dict[str, Any]]:
        if e.row != self.events:
            raise TraceError(f"stream: expected row {self.events}, got row {e.row}", row=e.row)
        self._validator.check(e)  # the trace checks, row by row: an unknown op or txn is refused by row
        await self._until(e.ts_us)
        out = []
        for r in self.replayers:
            before = time.perf_counter_ns()
            errors = _client_errors(r)
            r.apply(e)  # its clock is past ts_us: runs due timers, never sleeps
            apply_us = (time.perf_counter_ns() - before) // 1000
            at = r.sched.now_us()
            st = self.stats[r.label]
            st["events"] += 1
            st["deliveries"] = r.counts["deliveries"]
            st["apply_us_total"] += apply_us
            st["apply_us_max"] = max(st["apply_us_max"], apply_us)
            st["lag_us_max"] = max(st["lag_us_max"], at - e.ts_us)
            st["client_errors"] += _client_errors(r) - errors
            out.append({"engine": r.label, "row": e.row, "op": e.op, "ts_us": e.ts_us, "applied_us": at,
                        "lag_us": at - e.ts_us, "apply_us": apply_us, "deliveries": st["deliveries"]})
        self.events += 1
        self._last_ts = e.ts_us
        now = self._last_event_at = time.perf_counter()
        self._arm()
        if self._progress is not None and now >= self._next_progress:
            self._next_progress = now + PROGRESS_EVERY_S
            self._progress(self.events, self.rows, self.events_per_second())
        return out

    def events_per_second(self) -> float:
        span = self._last_event_at - self._started
        return self.events / span if span > 0 else 0.0

    def summary(self, label: str) -> dict[str, Any]:
        return dict(self.stats[label])

    # time

    async def _until(self, ts_us: int) -> None:
        """Sleep (asyncio) until every engine's clock has reached ``ts_us``."""
        while True:
            wait = max(ts_us - r.sched.now_us() for r in self.replayers)
            if wait <= 0:
                return
            await asyncio.sleep(wait / 1e6)

    def _tick(self) -> None:
        """Run due engine timers, then arm the loop for the next one (a plain loop callback:
        no task, so re-arming after every event is cheap)."""
        self._handle = None
        for r in self.replayers:
            r.sched.run_until(r.sched.now_us())  # due timers only
        self._arm()

    def _arm(self) -> None:
        """(Re-)arm the tick for the earliest due timer of any engine (at most TICK_MAX_S away)."""
        if self._closed or self._loop is None:
            return
        delay = TICK_MAX_S
        for r in self.replayers:
            due = r.sched.next_due_us()
            if due is not None:
                delay = min(delay, max(0.0, (due - r.sched.now_us()) / 1e6))
        when = self._loop.time() + delay
        h = self._handle
        if h is not None:
            if h.when() <= when:
                return
            h.cancel()
        self._handle = self._loop.call_at(when, self._tick)

    async def drain(self) -> None:
        """After the last event: run ``drain_ms`` more, then compute each engine's results."""
        for cfg, r in zip(self.configs, self.replayers):  # a lagging run still gets its full drain
            await self._until_one(r, max(self._last_ts, r.sched.now_us()) + cfg.drain_ms * 1000)
        self._stop_ticker()
        wall = time.perf_counter() - self._started
        for r in self.replayers:
            r.sched.run_until(r.sched.now_us())
            self.results.append(r._result(self.events, wall))
            st = self.stats[r.label]
            st["deliveries"] = self.results[-1].counts.get("deliveries", 0)
            st["latency"] = self.results[-1].latency
            st["final"] = True
        self.finished = True
        self.close()

    async def _until_one(self, r: Replayer, when_us: int) -> None:
        while (wait := when_us - r.sched.now_us()) > 0:
            await asyncio.sleep(min(wait / 1e6, 0.05))

    def _stop_ticker(self) -> None:
        self._loop = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        """Close the engines (idempotent); safe after Ctrl-C, when the ticker is already gone."""
        self._stop_ticker()
        if self._closed:
            return
        self._closed = True
        for r in self.replayers:
            try:
                r.broker.close()
            finally:
                r.setup.close()


def _wall(cfg: RunConfig) -> RunConfig:
    return replace(cfg, time_mode="wall")


def _client_errors(r: Replayer) -> int:
    return sum(v for k, v in r.counts.items() if k.startswith("client_errors."))


# --- the run -----------------------------------------------------------------------------------


def default_configs(ledger: str = "memory://", metadata: str = "memory://", drain_ms: int = 5_000) -> list[RunConfig]:
    return [RunConfig(engine=e, ledger_url=ledger, metadata_url=metadata, time_mode="wall", drain_ms=drain_ms)
            for e in registry.designs()]
