"""The v5 engine: PIP-473's coordinator, buffer and pending-ack store over one metadata store.

:func:`open_v5` opens the store once per run (its data is the durable half); each broker gets a
new engine with a fresh store handle (:meth:`MetadataStore.reopen`), so a broker crash drops the
handle with its watches and nothing else.
"""

from __future__ import annotations

from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from engine.counters import Counters
from engine.ids import Design
from engine.ledger import ManagedLedger
from engine.ports import (
    CursorPort, Engine, EngineContext, EngineFactory, PendingAckStore, TransactionBuffer, TransactionCoordinator,
)
from metadata_v5.coordinator import CoordinatorV5
from metadata_v5.metered import MeteredTxnRecords
from metadata_v5.options import BROKER_LISTENERS, V5Options
from metadata_v5.variants import parts_of
from metadata_v5.store.port import MetadataStore
from metadata_v5.store.records import StoreTxnRecords

_DELETE_STATS = ("op_deletes", "aborted_record_deletes", "aborted_range_deletes")


class V5Metrics:
    """The PIP's metrics, under its names, in a registry of this engine's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        p = "pulsar_txn_metadata_store_"
        self.op_writes = Counter(p + "op_writes", "op records written", registry=self.registry)
        self.header_cas = Counter(p + "header_cas", "header CAS attempts by outcome", ["result"], registry=self.registry)
        self.index_query = Histogram(p + "index_query_seconds", "index range query latency", registry=self.registry)
        self.outstanding = Gauge(p + "outstanding_op_records", "uncollected op records", registry=self.registry)


class V5Engine(Engine):
    design = Design.V5

    def __init__(self, ctx: EngineContext, store: MetadataStore, opts: V5Options) -> None:
        self._ctx = ctx
        self._opts = opts
        self.store = store
        meter = ctx.meter
        at_commit = parts_of(opts).writes_at_commit

        def notify(deliver: Callable[[], None]) -> None:
            # a watch delivery: the write commits, then the store hands the watcher's callback to
            # its executor (meta.watch, billed here per delivery: RocksdbMetadataStore.storePut ->
            # AbstractMetadataStore.receivedNotification). A write made at its issue commits a
            # meta.write later (its own draw is the writer's); the shipped design's at its commit.
            commit_us = 0 if at_commit else meter.of("meta.write")
            ctx.scheduler.call_later(commit_us + meter.took("meta.watch"), deliver)

        self.records = StoreTxnRecords(store, notify)
        # the components' port: every call billed and counted by the broker's meter
        self.metered = MeteredTxnRecords(self.records, ctx.meter, BROKER_LISTENERS + opts.history_listeners)
        store.set_notifier(notify)
        self.metrics = V5Metrics()
        self._parts = parts_of(opts)
        self._tc: CoordinatorV5 | None = None
        self._buffers: list[Any] = []  # the variant's buffers and pending-ack stores (each has .stats)
        self._acks: list[Any] = []
        self._retired = Counters()
        self._closed = False
        store.attach(ctx.scheduler.call_later)  # the store feeds its own watches (polls, re-lists)
        self.coordinator()  # runs its sweeps from the start, as a coordinator does with no clients

    def coordinator(self) -> TransactionCoordinator:
        if self._tc is None:
            self._tc = self._parts.coordinator(self._ctx, self.metered, self._opts, self.metrics.index_query.observe)
            self._tc.recover()
        return self._tc

    def _check(self) -> None:
        if self._tc is not None:
            self._tc._check()

    def restart_coordinator(self) -> None:
        if self._tc is not None:
            self._retired.update(self._tc.stats.prefixed("tc."))
            self._tc.close()
            self._tc = None
        self.coordinator()

    def transaction_buffer(self, ledger: ManagedLedger) -> TransactionBuffer:
        tb = self._parts.buffer(self._ctx, self.metered, ledger, self._opts)
        self._buffers.append(tb)
        return tb

    def pending_ack_store(self, ledger: ManagedLedger, subscription: str, cursor: CursorPort) -> PendingAckStore:
        store = self._parts.pending_ack(self._ctx, self.metered, ledger, subscription, cursor, self._opts)
        self._acks.append(store)
        return store

    def stats(self) -> Counters:
        total = Counters(self._retired)
        if self._tc is not None:
            total.update(self._tc.stats.prefixed("tc."))
        s = self.store.stats()
        total.update({f"meta.{k}": v for k, v in s.items() if v})
        # Headline names the report uses across backends.
        total["meta.cas"] = s.get("cas_ok", 0) + s.get("cas_conflict", 0)
        total["meta.op_writes"] = sum(tb.stats["op_writes"] for tb in self._buffers) + sum(
            pa.stats["op_writes"] for pa in self._acks)
        total["meta.watch_events"] = s.get("watch_events", 0)
        # Records deleted (what a broker's pulsar_metadata_store_ops "del" counts); the rest of
        # the store's writes are puts (PIP/state-events event deletes are not in it).
        deletes = sum(c.stats[k] for c in [*self._buffers, *self._acks] for k in _DELETE_STATS)
        deletes += sum(total.get("tc." + k, 0) for k in ("gc.headers_deleted", "gc.forced_op_deletes"))
        total["meta.record_deletes"] = deletes
        total["meta.record_puts"] = s.get("writes", 0) - deletes
        self._export(total)
        return total

    def _export(self, total: Counters) -> None:
        m = self.metrics
        m.op_writes._value.set(total["meta.op_writes"])  # counters mirror the exact counts
        for result in ("ok", "conflict", "reject"):
            m.header_cas.labels(result=result)._value.set(total.get(f"tc.header_cas.{result}", 0))

    def backlog(self) -> dict[str, int]:
        """The GC backlog: finished txns whose header the store still keeps (GC collects them
        after the retention), and op records not yet collected (open txns, or participants
        that have not materialised)."""
        return {"gc.finished_headers_kept": self.records.count_finished(),
                "gc.op_records_outstanding": self.outstanding_op_records()}

    def outstanding_op_records(self) -> int:
        n = self.records.count_ops()
        self.metrics.outstanding.set(n)
        return n

    def close(self) -> None:
        self._closed = True
        if self._tc is not None:
            self._tc.close()
        for tb in self._buffers:
            tb.close()
        for pa in self._acks:
            pa.close()
        self.records.close()


def open_store(url: str) -> MetadataStore:
    """The run's metadata store by URL (``memory://``, ``redis://host:port``, degraded forms)."""
    from metadata_v5.store.registry import open_metadata

    return open_metadata(url)


def open_v5(metadata_url: str = "memory://", **options: Any) -> tuple[EngineFactory, Callable[[], None]]:
    """An engine factory for a run, and the closer of its store. Each broker gets a new handle."""
    opts = V5Options.from_kwargs(**options)
    base = open_store(metadata_url)
    if opts.history:
        seeding = StoreTxnRecords(base.reopen(), lambda deliver: None)  # a handle of its own: not in the run's counts
        try:
            seeding.seed_history(opts.tc_id, opts.history, opts.history_ops)
        except BaseException:
            base.close()
            raise
        finally:
            seeding.close()

    def factory(ctx: EngineContext) -> Engine:
        return V5Engine(ctx, base.reopen(), opts)

    return factory, base.close
