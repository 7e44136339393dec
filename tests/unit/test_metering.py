"""Billing at the ports (engine/metering.py) and capacity (engine/capacity.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.trace.trace import read_events
from bench.trace.workloads import generate, load_profile
from engine.capacity import AddOrder, Capacity, Resource
from engine.clock import Distribution, LatencyModel, ResourceSpec, VirtualScheduler, WallScheduler
from engine.errors import ConfigError
from engine.metering import Meter


def _meter(**resources: ResourceSpec) -> Meter:
    return Meter(LatencyModel(resources=resources), VirtualScheduler())


def test_a_tab_adds_serial_calls_and_counts_each() -> None:
    m = _meter()
    with m.tab() as t:
        m.bill("rpc")
        m.bill("meta.read", "metadata")
        m.bill("rpc")
    assert t.us == 200 + 300 + 200
    assert m.billed == {"rpc": 2, "meta.read": 1}


def test_requests_issued_at_once_cost_one_round_trip_plus_service_time() -> None:
    m = _meter()
    for n, expected in ((0, 0), (1, 300), (5, 300 + 4 * 20)):
        with m.tab() as t, m.batch():
            for _ in range(n):
                m.bill("meta.read")
        assert t.us == expected
    # overlapping calls (each_further=None): the slowest one; a unit of serial calls is one call
    with m.tab() as t, m.batch(None):
        m.bill("meta.write")
        with m.unit():
            m.bill("meta.read")
            m.bill("meta.cas")
            m.bill("meta.write")
    assert t.us == 300 + 1_000 + 1_000


def test_a_tab_of_its_own_does_not_add_to_the_enclosing_one() -> None:
    m = _meter()
    with m.tab() as outer:
        m.bill("rpc")
        assert m.took("ledger.read", "bookie", "l", times=3) == 300
    assert outer.us == 200 and m.billed["ledger.read"] == 3


def test_a_resource_queues_work_beyond_its_concurrency() -> None:
    res = Resource(ResourceSpec(service_us=100, concurrency=2))
    # four requests at t=0: two start at once, two wait for a slot (100 us); an answer comes no
    # earlier than the end of its service, so a 50-us latency is answered after 100 us
    assert [res.admit(0, 50) for _ in range(4)] == [100, 100, 200, 200]
    assert res.admit(1_000, 50) == 100  # idle again
    assert res.admit(2_000, 300) == 300  # a latency beyond the service is the answer's time
    assert (res.requests, res.busy_us, res.queued_us) == (6, 600, 200)


def test_a_booking_ahead_leaves_the_time_before_it_to_earlier_requests() -> None:
    # a serial chain bills its later calls for instants still to come: the slot stays free before them
    res = Resource(ResourceSpec(service_us=None, concurrency=1))
    assert res.admit(1_000, 100) == 100  # booked 1000..1100
    assert res.admit(0, 50) == 50  # 0..50: fits before the booking
    assert res.admit(0, 2_000) == 1_100 + 2_000 - 0  # 950 free before 1000 is too short: after 1100
    assert res.admit(60, 900) == 900  # 60..960 still fits
    assert (res.requests, res.busy_us, res.queued_us) == (4, 3_050, 1_100)
    assert res.admit(5_000, 10, now_us=4_000) == 10  # everything before now forgotten, idle again
    shared = Capacity({"bookie": ResourceSpec(service_us=None, concurrency=1, shared=True)})
    assert shared.resource("bookie", "ledger-a") is shared.resource("bookie", "ledger-b")


def test_serial_calls_queue_behind_each_other_and_batches_queue_at_once() -> None:
    m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    with m.tab() as serial:
        m.bill("meta.read", "metadata")  # latency 300 but served 0..400: answered at 400
        m.bill("meta.read", "metadata")  # issued at 400, served 400..800
    assert serial.us == 400 + 400
    m2 = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    with m2.tab() as t, m2.batch():
        for _ in range(3):
            m2.bill("meta.read", "metadata")  # served from 0, 400, 800: the last answered at 1200
    assert t.us == 800 + 400
    assert m2.capacity_stats()[1] == {"metadata.busy_us": 1_200, "metadata.queued_us": 1_200, "metadata.requests": 3}


def test_no_resources_or_wall_time_means_no_queueing() -> None:
    m = _meter()
    assert [m.took("meta.cas", "metadata") for _ in range(3)] == [1_000] * 3
    wall = Meter(LatencyModel(resources={"metadata": ResourceSpec(1_000, 1)}), WallScheduler())
    assert [wall.took("meta.cas", "metadata") for _ in range(3)] == [1_000] * 3
    assert Capacity({}).resource("metadata") is None


def test_resource_specs_are_checked() -> None:
    with pytest.raises(ConfigError, match="unknown resource 'disk'"):
        LatencyModel(resources={"disk": ResourceSpec(1, 1)})
    with pytest.raises(ConfigError, match="concurrency >= 1"):
        ResourceSpec(service_us=10, concurrency=0)


def _small(tmp_path: Path) -> Path:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 500, 4, trace)
    return trace


@pytest.mark.parametrize("engine,variant", [("v4", "shipped"), ("v5", "shipped"), ("v5", "pip")])
def test_what_was_billed_is_what_was_counted(tmp_path: Path, engine: str, variant: str) -> None:
    """The meter's counts (``billed.*`` in counts.json) against the counts the ledgers, the
    dispatchers, the coordinator and the store keep on their own."""
    counts = Replayer(RunConfig(engine=engine, options={"variant": variant} if engine == "v5" else {})).run(read_events(_small(tmp_path))).counts
    # every dispatcher read is billed: a ledger read, or an empty read at maxReadPosition
    assert counts["billed.ledger.read"] == counts["ledger.reads"] > 0
    assert counts["billed.ledger.read"] + counts["billed.cursor.empty_read"] == counts["dispatch.reads"]
    assert counts["billed.rpc"] > 2 * counts["ledger.appends.data"]  # each publish's two hops, and more
    if engine == "v4":  # the publishes, the TC log, each END_TXN's marker, the snapshots, the
        # cursor writes commits waited for
        assert counts["billed.ledger.append"] == (counts["ledger.appends.data"] + counts["tc.log_appends"]
                                                  + counts["tc.end_txn.rpcs_sent"] + counts["tb.snapshot_writes"]
                                                  + counts.get("pending_ack.commit_cursor_writes", 0))
    else:  # the publishes; every index scan the store served; every watch delivery
        assert counts["billed.ledger.append"] == counts["ledger.appends.data"]
        assert counts["billed.meta.list"] == counts["meta.index_queries"] > 0
        assert counts["billed.meta.watch"] == counts["meta.watch_events"] > 0


def test_every_store_write_is_billed_on_a_store_without_native_sequences(tmp_path: Path) -> None:
    """On the store Pulsar's standalone runs (RocksDB through ``AbstractMetadataStore``'s
    fallbacks), each sequence-key append (an op record, an event) is a counter GET, a counter CAS
    and a create: the shipped design's writes and CASes billed are the writes the store counts,
    counter CASes included, one for one (capacity queues the billed ones). (The PIP's batches
    are one call of several writes.)"""
    from bench.replay.config import EMULATED_STORE

    cfg = RunConfig(engine="v5", metadata_url=EMULATED_STORE)
    counts = Replayer(cfg).run(read_events(_small(tmp_path))).counts
    assert counts["meta.seq_allocs"] >= counts["meta.op_writes"] > 0
    assert counts["billed.meta.write"] + counts["billed.meta.cas"] == counts["meta.writes"]


def test_same_trace_profile_and_seed_give_identical_results(tmp_path: Path) -> None:
    trace = _small(tmp_path)
    lat = LatencyModel(resources={"metadata": ResourceSpec(200, 1), "bookie": ResourceSpec(300, 1),
                                  "coordinator": ResourceSpec(50, 1), "dispatch": ResourceSpec(30, 1)})
    runs = [Replayer(RunConfig(engine="v5", latency=lat)).run(read_events(trace)) for _ in range(2)]
    assert runs[0].counts == runs[1].counts
    assert runs[0].latency == runs[1].latency


def test_v5_store_writes_queue_per_broker_thread() -> None:
    """RocksdbMetadataStore commits on the caller's thread: writes on one thread queue behind
    each other, writes on two threads do not (``metadata_v5.txnrecords.IO`` / ``EVENT``); a
    resource shared by the run ignores the thread."""
    from metadata_v5.metered import MeteredTxnRecords
    from metadata_v5.store.memory import MemoryMetadataStore
    from metadata_v5.store.records import StoreTxnRecords
    from metadata_v5.txnrecords import EVENT, IO

    def two_deletes(shared: bool, threads: tuple[str, str]) -> int:
        m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1, shared=shared))
        records = MeteredTxnRecords(StoreTxnRecords(MemoryMetadataStore(), lambda deliver: deliver()), m)
        with m.tab() as t, m.batch(None):  # issued at once
            for thread in threads:
                with records.on(thread):
                    records.delete_ops([])
        return t.us

    assert two_deletes(False, (IO, IO)) == 400 + 1_000  # the second waits 400 for the thread
    assert two_deletes(False, (IO, EVENT)) == 1_000  # side by side
    assert two_deletes(True, (IO, EVENT)) == 400 + 1_000


def test_the_shipped_participants_write_on_the_event_thread(tmp_path: Path) -> None:
    """The shipped buffer's state tail (aborted records, watermark CASes, op-record deletes) runs
    on the store's notification thread, but a plain publish's watermark CAS on an idle tail on the
    managed ledger's thread that completes the add; the coordinator and the publish path on the IO thread;
    a participant's recovery (reads and scans only) on the thread that opened its topic; the
    sweeps' header listings on the sweep executor's."""
    from collections import Counter

    seen: Counter[tuple[str, str]] = Counter()
    lat = LatencyModel(resources={"metadata": ResourceSpec(500, 1, kinds=frozenset({"meta.write", "meta.cas"}))})
    original = Meter.bill

    def spy(self: Meter, kind: str, resource: str | None = None, key: str = "", times: int = 1) -> int:
        if resource == "metadata":
            seen[(kind, key)] += times
        return original(self, kind, resource, key, times)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Meter, "bill", spy)
        counts = Replayer(RunConfig(engine="v5", latency=lat)).run(read_events(_small(tmp_path))).counts
    assert {key for _, key in seen} == {"io", "event", "load", "sweep", "ml"}
    assert {kind for kind, key in seen if key == "ml"} == {"meta.cas"}
    assert {kind for kind, key in seen if key == "load"} == {"meta.read", "meta.list"}
    assert {kind for kind, key in seen if key == "sweep"} == {"meta.list"}  # a native index: one call a page
    for thread in ("io", "event", "load", "sweep", "ml"):  # the capacity counts per thread: the writes and CASes billed on it
        assert counts[f"capacity.metadata@{thread}.requests"] == seen[("meta.write", thread)] + seen[("meta.cas", thread)]
    assert "capacity.metadata.requests" not in counts
    assert seen[("meta.write", "event")] == counts["tb.op_deletes"] + counts["tb.aborted_record_writes"] > 0
    assert seen[("meta.cas", "event")] + seen[("meta.cas", "ml")] == counts["tb.watermark_cas"]
    assert seen[("meta.cas", "event")] > 0 and seen[("meta.cas", "ml")] > 0
    assert seen[("meta.read", "event")] == counts["tb.reconcile_header_reads"]
    # the publish path: one op record per txn publish, each header read on a (txn, segment) miss
    assert seen[("meta.write", "io")] >= counts["tb.op_writes"] > 0
    assert seen[("meta.read", "io")] >= counts["tb.header_reads"] > 0


def test_the_connection_io_thread_serves_in_arrival_order() -> None:
    """A Netty event loop runs its tasks first come, first served (``capacity.IO_THREAD``): a
    request waits for every request that arrived before it, whenever engine code admitted it,
    and not for a booking made ahead of it for a later instant: that is only an obstacle."""
    from engine.capacity import EVENT_THREAD, IO_THREAD

    spec = ResourceSpec(service_us=None, concurrency=1)
    in_order, calendar = Resource(spec, in_order=True), Resource(spec)
    for res in (in_order, calendar):
        assert res.admit(1_000, 100) == 100  # 1000..1100, booked ahead
    assert in_order.admit(0, 50) == calendar.admit(0, 50) == 50  # 0..50: it arrived first
    assert in_order.admit(0, 2_000) == 1_100 + 2_000  # too long for the gap: after the booking
    # arrived at 10, after the one of 2,000 µs that arrived at 0: after it, though a gap at 50 is free
    assert in_order.admit(10, 20) == 3_100 + 20 - 10
    assert calendar.admit(10, 20) == 50 + 20 - 10  # a calendar takes the gap at 50
    # a request of no time of its own: after those that arrived before it, and not inside a block
    assert (in_order.free_at(0), in_order.free_at(20), in_order.free_at(5_000)) == (3_120, 3_120, 5_000)
    assert (calendar.free_at(5), calendar.free_at(80), calendar.free_at(1_050)) == (70, 80, 1_100)
    assert in_order.admit(6_000, 10, now_us=6_000) == 10  # everything before now forgotten, idle again
    two = Resource(ResourceSpec(service_us=100, concurrency=2), in_order=True)
    assert [two.admit(0, 10) for _ in range(3)] == [100, 100, 200] and two.free_at(0) == 100
    cap = Capacity({"metadata": ResourceSpec(service_us=100, concurrency=1)})
    io, event, load = (cap.resource("metadata", k) for k in (IO_THREAD, EVENT_THREAD, "load"))
    # the notification thread is a single-thread executor too; other keys book a calendar
    assert io is not None and io.in_order and event is not None and event.in_order
    assert load is not None and not load.in_order


def test_a_chain_of_store_calls_is_one_task_on_the_thread() -> None:
    """RocksdbMetadataStore completes each call on its caller's thread, so a request's store calls
    one after another run as one event-loop task: work that arrived meanwhile waits for the whole
    chain, a read the thread makes beside the writes' queue included; after a hop, the request's
    next call arrives anew."""
    spec = ResourceSpec(service_us=None, concurrency=1, kinds=frozenset({"meta.write", "meta.cas"}))
    m = _meter(metadata=spec)
    with m.tab() as chain:
        m.bill("meta.read", "metadata", "io")  # 300 µs on the thread, beside the writes' queue: the task arrives at 0
        m.bill("meta.cas", "metadata", "io")  # 300..1300
        m.bill("meta.write", "metadata", "io")  # 1300..2300
        m.bill("rpc")  # a hop: 2300..2500
        m.bill("meta.write", "metadata", "io")  # arrives anew at 2500
    assert chain.us == 300 + 1_000 + 1_000 + 200 + 1_000
    io = m._resource("metadata", "io")
    assert io is not None
    # a publish that reached the thread at 100, in the middle of the chain, waits for all of it
    assert io.free_at(100) == 2_300
    # one that reached it at 2,400, before the write after the hop, does not wait for that write
    assert io.free_at(2_400) == 2_400


def test_a_request_behind_the_thread_waits_in_its_tab() -> None:
    m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    with m.tab():
        m.bill("meta.cas", "metadata", "io")  # 0..400 on the IO thread
    with m.tab() as t:
        m.bill("rpc")  # 200: issued at 0, arrives at 200
        assert m.behind("metadata", "io") == 200  # the thread is busy until 400
        m.bill("rpc")
    assert t.us == 200 + 200 + 200
    assert m.behind("metadata", "event") == 0  # another thread: idle
    assert _meter().behind("metadata", "io") == 0  # no resources: nothing queues
    assert m.capacity_stats()[1]["metadata@io.requests"] == 1  # waiting is not a request


def test_work_booked_on_a_thread_delays_only_what_that_thread_serves_next() -> None:
    """A store's notifications (meta.notify per thousand listener calls): booked on the event
    thread from when the write that queued them is done, held for their own time whatever the
    resource's service time, waited for by nobody but the thread's next request."""
    m = Meter(LatencyModel(resources={"metadata": ResourceSpec(service_us=400, concurrency=1)})
              .with_overrides(meta_notify=5), VirtualScheduler())
    with m.tab() as t:
        m.bill("meta.write", "metadata", "io")  # 1,000 µs: the write, on the IO thread
        assert m.book_per_thousand("meta.notify", 3 * 2_000, "metadata", "event") == 30  # 3 x 2,000 listeners at 5 ns
    assert t.us == 1_000  # the writer does not wait for them
    assert m.billed["meta.notify"] == 6_000  # counted as listener calls
    event, io = m._resource("metadata", "event"), m._resource("metadata", "io")
    assert event is not None and io is not None
    assert event.free_at(1_000) == 1_000 + 30  # they arrive when the write is done
    assert m.behind("metadata", "event", in_tab=False) == 0  # a request arriving before them does not wait
    assert io.free_at(0) == 400  # the IO thread: its own write only
    assert m.book_per_thousand("meta.notify", 0, "metadata", "event") == 0
    assert _meter().book_per_thousand("meta.notify", 1_000, "metadata", "event") == 0  # unpriced: nothing to hold


def test_without_capacity_work_booked_on_a_thread_is_priced_and_counted_as_with_it() -> None:
    """A meter without resources books through its own fast path (``Meter._free_book``): the
    same draws, the same rounding and the same counts as the queued path, and nobody waits."""
    spread = {"meta.notify": Distribution(((0.0, 1), (0.5, 7), (1.0, 40)))}
    free = Meter(LatencyModel(distributions=spread), VirtualScheduler())
    queued = Meter(LatencyModel(distributions=spread, resources={"metadata": ResourceSpec(400, 1)}), VirtualScheduler())
    units = [1, 999, 3_000, 0, 1_501, 250, 4_000]
    prices = [m.book_per_thousand("meta.notify", u, "metadata", "event") for m in (free, queued) for u in units]
    assert prices[:len(units)] == prices[len(units):] and len(set(prices)) > 3  # drawn, not one constant
    assert free.billed["meta.notify"] == queued.billed["meta.notify"] == sum(units)
    assert free.behind("metadata", "event", in_tab=False) == 0 and not free.in_use("metadata", "event")
    assert queued.in_use("metadata", "event")


@pytest.mark.parametrize("design", ["v4", "v5"])
def test_plain_publishes_and_deliveries_wait_for_the_io_thread(design: str) -> None:
    """Under v5 the connection's IO thread makes the txn's store writes (RocksdbMetadataStore on
    the caller's thread), and a plain publish sent right behind the commit, and the delivery of a
    message dispatched meanwhile, wait for it (ServerCnx, PulsarCommandSenderImpl); under v4 the
    thread makes no store call and nothing waits."""
    from engine.broker import BrokerConfig
    from engine.dispatcher import DispatchMode
    from engine.memledger import MemoryLedgerFactory
    from engine.scripted import ScriptedClient
    from legacy_v4 import v4_engine
    from metadata_v5.engine import V5Engine
    from metadata_v5.options import V5Options
    from metadata_v5.store.registry import open_metadata

    topic = "persistent://public/default/t"
    service = 5_000

    def script(resources: bool) -> tuple[int, int]:
        specs = {"metadata": ResourceSpec(service, 1, kinds=frozenset({"meta.write", "meta.cas"}))}
        config = BrokerConfig(dispatch=DispatchMode.NOTIFY, latency=LatencyModel(resources=specs if resources else {}))
        engine = (v4_engine() if design == "v4" else
                  (lambda ctx: V5Engine(ctx, open_metadata("memory://"), V5Options(variant="shipped"))))
        s = ScriptedClient(MemoryLedgerFactory(), config, engine)
        s.subscribe(topic, "sub")
        s.run()
        t = s.new_txn()
        s.publish(topic, "x", txn=t)
        s.run()
        s.publish(topic, "early")  # dispatched while the commit below keeps the IO thread busy
        s.commit(t)
        s.publish(topic, "late")  # sent right behind the commit
        late_us = s.broker.last_publish_us
        s.run()
        delivered = {d.msg: d.delivered_ts_us for d in s.received[(topic, "sub")]}
        return late_us, delivered["early"]

    (late_free, early_free), (late, early) = script(False), script(True)
    if design == "v4":
        assert (late, early) == (late_free, early_free)
    else:  # at least the commit's header CAS is still ahead of each
        assert late >= late_free + service and early >= early_free + service


def test_the_end_txn_events_do_not_queue_behind_requests_sent_after_the_commit() -> None:
    """Shipped v5: the events follow END_TXN's CAS and scan on the IO thread at once
    (TransactionCoordinatorV5 L456-L508), so another txn's publishes sent right behind the
    commit, whose op records keep that thread busy, do not delay the commit's answer."""
    from engine.broker import BrokerConfig
    from engine.dispatcher import DispatchMode
    from engine.memledger import MemoryLedgerFactory
    from engine.scripted import ScriptedClient
    from metadata_v5.engine import V5Engine
    from metadata_v5.options import V5Options
    from metadata_v5.store.registry import open_metadata

    topic, service, behind = "persistent://public/default/t", 5_000, 10
    specs = {"metadata": ResourceSpec(service, 1, kinds=frozenset({"meta.write", "meta.cas"}))}
    s = ScriptedClient(MemoryLedgerFactory(), BrokerConfig(dispatch=DispatchMode.NOTIFY, latency=LatencyModel(resources=specs)),
                       lambda ctx: V5Engine(ctx, open_metadata("memory://?emulated=1"), V5Options(variant="shipped")))
    t, u = s.new_txn(), s.new_txn()
    s.publish(topic, "x", txn=t)
    s.publish(topic, "y", txn=u)
    s.run()
    committed_at = s.sched.now_us()
    s.commit(t)
    for i in range(behind):  # each an op record (counter CAS + create) on the IO thread
        s.publish(topic, f"u{i}", txn=u)
    s.run()
    assert s.outcomes[t].value == "committed"
    # the commit's own writes (a few) and no more: the ten publishes' 20 writes come after
    assert s.outcome_us[t] - committed_at < behind * service


def test_an_answer_leaves_with_the_batch_its_thread_read_it_in() -> None:
    """The broker flushes what a batch of commands wrote when the batch is done (Netty's
    FlushConsolidationHandler in PulsarChannelInitializer): a task the thread read while idle is
    a batch of its own; those that arrived while it ran are read together once it is done, and
    none of their answers leaves before the last of them is done."""
    io = Resource(ResourceSpec(service_us=10, concurrency=1), in_order=True)
    assert io.read_at(0) == 0  # idle: read at once
    assert [io.admit(at, 10) for at in (0, 1, 2)] == [10, 19, 28]  # 0..10, 10..20, 20..30
    assert (io.read_at(0), io.read_at(1), io.read_at(2)) == (0, 10, 20)  # after those that arrived before
    assert io.flushed_at(0, 10) == 10  # the first alone: its own answer at once
    assert io.flushed_at(10, 20) == io.flushed_at(20, 30) == 30  # the two read together leave together
    assert io.flushed_at(10, 35) == 35  # written after the batch: at once
    assert io.read_at(50) == 50 and io.flushed_at(50, 50) == 50  # idle again
    m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    assert m.read_of_last_task("metadata", "io") is None  # nothing booked on the thread
    with m.tab():
        m.bill("meta.cas", "metadata", "io")  # 0..400, read at 0
    first = m.read_of_last_task("metadata", "io")
    with m.tab():
        m.bill("rpc")  # arrives at 200, while the first runs: read at 400, 400..800
        m.bill("meta.cas", "metadata", "io")
    second = m.read_of_last_task("metadata", "io")
    assert (first, second) == (0, 400)
    assert m.flushed_at("metadata", "io", 0, 400) == 400 and m.flushed_at("metadata", "io", 400, 800) == 800
    with m.tab():
        m.bill("meta.cas", "metadata", "io")  # arrived at 0 with the first: read with it at 0
    assert m.read_of_last_task("metadata", "io") == 0
    assert m.flushed_at("metadata", "io", 0, 400) == 1_200  # so the first's answer waits for it (800..1200)
    assert m.flushed_at("metadata", "event", 0, 5) == 5  # a thread nobody used: at once
    with m.tab():
        m.bill("rpc")  # a hop only: its last in-order call is still the second's
    assert m.read_of_last_task("metadata", "event") is None


def test_end_txns_that_queued_behind_one_another_are_answered_together() -> None:
    """Shipped v5 on an emulated store: END_TXNs sent at once hold the connection's thread one
    after another; the first was read alone and is answered when it is done, the others were
    read together while it ran and are answered together once the last of them is done (as
    the broker answered the 32 END_TXNs at the end of omb's trace: datasets/validation/README.md)."""
    from engine.broker import BrokerConfig
    from engine.dispatcher import DispatchMode
    from engine.memledger import MemoryLedgerFactory
    from engine.scripted import ScriptedClient
    from metadata_v5.engine import V5Engine
    from metadata_v5.options import V5Options
    from metadata_v5.store.registry import open_metadata

    topic, service = "persistent://public/default/t", 5_000
    specs = {"metadata": ResourceSpec(service, 1, kinds=frozenset({"meta.write", "meta.cas"}))}
    s = ScriptedClient(MemoryLedgerFactory(), BrokerConfig(dispatch=DispatchMode.NOTIFY, latency=LatencyModel(resources=specs)),
                       lambda ctx: V5Engine(ctx, open_metadata("memory://?emulated=1"), V5Options(variant="shipped")))
    txns = [s.new_txn() for _ in range(4)]
    for i, t in enumerate(txns):
        s.publish(topic, f"m{i}", txn=t)
    s.run()
    asked = []
    for t in txns:  # 10 µs apart, as a client sends them: the first reaches the thread alone
        asked.append(s.sched.now_us())
        s.commit(t)
        s.sched.run_until(s.sched.now_us() + 10)
    s.run()
    answered = [s.outcome_us[t] for t in txns]
    assert all(s.outcomes[t].value == "committed" for t in txns)
    # each END_TXN holds the thread for its CAS and its event's put at least: the first is
    # answered before the second is done, the other three at one instant, after the last
    assert answered[0] < answered[1] == answered[2] == answered[3]
    assert answered[3] - asked[3] >= 4 * 2 * service


def test_what_another_thread_writes_leaves_after_the_batch_running_then() -> None:
    """A publish's receipt is written from its add's completion: the event loop runs that write
    after the batch of commands it is handling, and flushes it with the batch."""
    io = Resource(ResourceSpec(service_us=10, concurrency=1), in_order=True)
    assert io.batch_done_at(5) == 5  # nothing booked: at once
    assert [io.admit(at, 10) for at in (0, 1, 2)] == [10, 19, 28]  # 0..10 alone; 10..30 read together
    assert io.batch_done_at(5) == 10  # inside the first batch: at its end
    assert io.batch_done_at(12) == io.batch_done_at(25) == 30  # inside the second: after both its tasks
    assert io.batch_done_at(30) == 30 and io.batch_done_at(40) == 40  # idle
    m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    assert m.batch_done_at("metadata", "io", 100) is None  # a thread nobody used: nothing waits
    with m.tab():
        m.bill("meta.cas", "metadata", "io")
    assert m.batch_done_at("metadata", "io", 100) == 400


def test_a_plain_receipt_written_while_an_end_txn_holds_the_thread_waits_for_it(tmp_path: Path) -> None:
    """Shipped v5 on the standalone's store: a plain send issued just before a commit has its
    add complete while the END_TXN's store calls hold the connection's thread, and its receipt
    leaves when they are done, with the END_TXN's answer (a hand-written run on a 5.0.0-M1
    broker answered such sends within 0.2 ms of the END_TXN at the median:
    datasets/validation/README.md); one sent long before it is answered as before."""
    from bench.replay.config import EMULATED_STORE
    from bench.trace.trace import TraceWriter

    ms, p, q = 1_000, "persistent://public/default/p", "persistent://public/default/q"
    trace = tmp_path / "t.parquet"
    with TraceWriter(trace) as w:
        w.add(0, "new_txn", txn="t0")
        w.add(1 * ms, "publish", txn="t0", topic=q, msg="x", size=100)
        w.add(20 * ms, "publish", topic=p, msg="far", size=100)
        w.add(49_700, "publish", topic=p, msg="near", size=100)  # 0.3 ms before the commit
        w.add(50 * ms, "commit", txn="t0")

    def run(resources: bool) -> tuple[dict[str, int], int]:
        specs = {"metadata": ResourceSpec(2_000, 1, kinds=frozenset({"meta.write", "meta.cas"}))} if resources else {}
        spans: list[tuple[str, int, int]] = []
        cfg = RunConfig(engine="v5", metadata_url=EMULATED_STORE, latency=LatencyModel(resources=specs),
                        options={"variant": "shipped"})
        result = Replayer(cfg, publish_sink=lambda rows: spans.extend(
            zip(rows["msg"], rows["issued_ts_us"], rows["answered_ts_us"]))).run(read_events(trace))
        end_txn = result.latency["end_txn_us"]
        assert end_txn["count"] == 1
        return {msg: answered - issued for msg, issued, answered in spans}, 50 * ms + end_txn["min_us"]

    took, _ = run(resources=False)
    assert took["near"] == took["far"]  # nothing holds the thread: the same path
    took, end_txn_answered = run(resources=True)
    assert 49_700 + took["far"] < end_txn_answered  # unheld, it would be back before the END_TXN
    assert 49_700 + took["near"] == end_txn_answered  # held: back with it


def test_waiting_for_a_thread_nobody_used_creates_nothing() -> None:
    """v4 makes no store call on the IO thread: its publishes wait for nothing, and its counts
    have no ``capacity.metadata@io.*`` rows."""
    m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    with m.tab() as t:
        assert m.behind("metadata", "io") == 0
    assert t.us == 0 and m.capacity_stats() == ({}, {})


def test_a_continuation_waits_for_the_thread_outside_the_open_tab() -> None:
    m = _meter(metadata=ResourceSpec(service_us=400, concurrency=1))
    with m.tab():
        m.bill("meta.cas", "metadata", "io")  # 0..400
    with m.tab() as t:
        assert m.behind("metadata", "io", in_tab=False) == 400  # a delivery: its own wait
    assert t.us == 0


def test_a_listing_walk_is_billed_per_thousand_keys_and_holds_its_thread_for_its_own_time() -> None:
    """``meta.list_keys`` is µs per thousand keys walked: one call of 2,500 keys at 400 µs costs
    1,000 µs and is counted as 2,500; on a resource that lists it in ``latency_kinds`` it holds
    the thread that long (not the writes' service time), and a write behind it waits."""
    spec = ResourceSpec(service_us=300, concurrency=1, kinds=frozenset({"meta.write", "meta.list_keys"}),
                        latency_kinds=frozenset({"meta.list_keys"}))
    m = Meter(LatencyModel(resources={"metadata": spec}).with_overrides(meta_list_keys=400), VirtualScheduler())
    with m.tab() as t:
        assert m.bill_per_thousand("meta.list_keys", 2_500, "metadata", "io") == 1_000
    assert t.us == 1_000 and m.billed["meta.list_keys"] == 2_500
    # the entries it passes beside its keys are priced into the same call, and counted apart
    m2 = Meter(LatencyModel().with_overrides(meta_list_keys=400, meta_list_entries=50), VirtualScheduler())
    with m2.tab() as t2:
        assert m2.bill_per_thousand("meta.list_keys", 2_500, also=("meta.list_entries", 8_000)) == 1_000 + 400
    assert t2.us == 1_400 and (m2.billed["meta.list_keys"], m2.billed["meta.list_entries"]) == (2_500, 8_000)
    with m.tab() as w:  # issued at 0 on the same thread: waits out the walk, then its own 1,000
        m.bill("meta.write", "metadata", "io")
    assert w.us == 1_000 + 1_000
    with m.tab() as other:  # another thread's instance: no wait
        m.bill("meta.write", "metadata", "event")
    assert other.us == 1_000
    with pytest.raises(ConfigError, match="latency_kinds"):
        ResourceSpec(service_us=1, concurrency=1, kinds=frozenset({"meta.write"}),
                     latency_kinds=frozenset({"meta.list_keys"}))


def _cores(costs: dict[str, int], cores: int = 1) -> ResourceSpec:
    return ResourceSpec.cores(costs, cores)


def test_a_call_waits_for_a_core_only_while_the_cores_are_busy() -> None:
    # rpc (200 µs) works 150 µs of it on the host's one core: alone it takes its latency, no more
    m = _meter(cpu=_cores({"rpc": 150}))
    with m.tab() as alone:
        m.bill("rpc")
    assert alone.us == 200 and m.billed["rpc"] == 1
    def at_once(meter: Meter, n: int) -> list[int]:
        """``n`` requests issued at the same instant, each its own tab: what each waited."""
        took = []
        for _ in range(n):
            with meter.tab() as t:
                meter.bill("rpc")
            took.append(t.us)
        return took

    # three at once: the second waits 150 µs for the core, the third 300
    m2 = _meter(cpu=_cores({"rpc": 150}))
    assert at_once(m2, 3) == [200, 350, 500]
    # a kind without a cost does not touch the cores, and two cores take two at once
    with m2.tab() as other:
        m2.bill("meta.read")
    assert other.us == 300
    m3 = _meter(cpu=_cores({"rpc": 150}, cores=2))
    assert at_once(m3, 3) == [200, 200, 350]
    assert m3.capacity_stats()[1] == {"cpu.busy_us": 450, "cpu.queued_us": 150, "cpu.requests": 3}


def test_calls_one_thread_runs_in_turn_are_one_task_on_a_core() -> None:
    # a read's 4 entries at 50 µs each (dispatch.entry, no latency of its own): one request of
    # 200 µs on one core, timed as its wait plus the 3 entries' work after the first's
    m = _meter(cpu=_cores({"dispatch.entry": 50}, cores=2))
    assert m.took_task("dispatch.entry", 4) == 150
    assert m.took_task("dispatch.entry", 4) == 150  # the other core
    assert m.took_task("dispatch.entry", 1) == 200  # both busy for 200 µs: its wait, no work of its own after
    assert m.billed["dispatch.entry"] == 9
    assert m.capacity_stats()[1] == {"cpu.busy_us": 450, "cpu.queued_us": 200, "cpu.requests": 3}
    # unpriced: its latency's draws, and nothing on the cores
    free = _meter(cpu=_cores({"rpc": 150}))
    assert free.took_task("dispatch.entry", 4) == 0 and free.billed["dispatch.entry"] == 4
    assert free.capacity_stats()[1].get("cpu.requests", 0) == 0


def test_a_call_waits_for_a_core_before_its_own_resource() -> None:
    # the core first, then the bookie: the append's bookie slot is booked from when its core freed
    specs = {"cpu": _cores({"ledger.append": 100}), "bookie": ResourceSpec(None, 1, shared=True)}
    m = _meter(**specs)
    with m.tab() as first:
        m.bill("ledger.append", "bookie", "l")  # core 0..100, bookie 0..1000
    with m.tab() as second:
        m.bill("ledger.append", "bookie", "l")  # core 100..200, bookie from 1000: answered at 2000
    assert (first.us, second.us) == (1_000, 2_000)
    assert m.took("ledger.append", "bookie", "l") == 3_000  # the core free at 200, the bookie at 2,000
    assert m.billed["ledger.append"] == 3


def test_a_ledgers_adds_complete_in_the_order_they_were_issued() -> None:
    """BookKeeper completes a ledger's adds in entry order (``LedgerHandle.sendAddSuccessCallbacks``):
    an add its bookie answered early waits for every add issued before it."""
    order = AddOrder()
    assert order.complete(0, 3_000, 0) == 3_000
    assert order.complete(100, 1_100, 0) == 3_000  # answered early: held for the one before it
    assert order.complete(200, 4_000, 0) == 4_000  # answered after both: its own time
    # billed late for an earlier instant: it waits for the add before it (at 0), not after it
    assert order.complete(50, 500, 0) == 3_000
    # one billed late that takes long holds back what is billed after it, not what went before
    assert order.complete(60, 9_000, 0) == 9_000
    assert order.complete(300, 3_500, 0) == 9_000
    assert order.complete(20_000, 20_100, 20_000) == 20_100  # all done by now: forgotten


def test_appends_to_one_ledger_complete_in_order_and_other_ledgers_do_not_wait() -> None:
    """With resources set, each append's latency is drawn on its own; an append completes no
    earlier than the appends issued before it on its ledger (a brute-force maximum over the same
    draws), and appends on another ledger keep their own times."""
    spread = {"ledger.append": Distribution(((0.0, 1_000), (1.0, 5_000)))}
    cores = {"cpu": _cores({"rpc": 1})}  # any resource: the meter then tracks issue instants
    issued = [(0, "a"), (100, "a"), (150, "b"), (200, "a"), (250, "b"), (300, "a")]
    draws_of = LatencyModel(distributions=spread).fresh()  # the meter's stream, drawn alike
    draws = [draws_of.of("ledger.append") for _ in issued]
    expected = []
    for i, (at, ledger) in enumerate(issued):
        earlier = [a + d for (a, led), d in zip(issued[:i], draws) if led == ledger]
        expected.append(max([at + draws[i], *earlier]))
    assert any(e > at + d for e, (at, _), d in zip(expected, issued, draws))  # some add is held

    sched = VirtualScheduler()
    m = Meter(LatencyModel(distributions=spread, resources=cores), sched)
    done = []
    for at, ledger in issued:
        sched.run_until(at)
        with m.tab() as t:
            m.bill("ledger.append", "bookie", ledger)
        done.append(at + t.us)
    assert done == expected and m.billed["ledger.append"] == len(issued)
    # without resources the draws are taken as they come (no instants tracked)
    free = Meter(LatencyModel(distributions=spread), VirtualScheduler())
    assert [free.took("ledger.append", "bookie", led) for _, led in issued] == draws


def test_a_cores_spec_needs_its_kinds_as_its_costs() -> None:
    with pytest.raises(ConfigError, match="kind_service_us"):
        ResourceSpec(0, 2, True, frozenset({"rpc", "meta.read"}), frozenset(), {"rpc": 10})
    with pytest.raises(ConfigError, match="kind_service_us"):
        ResourceSpec(0, 2, True, frozenset({"rpc"}), frozenset(), {"rpc": -1})
    assert "rpc 10 µs" in _cores({"rpc": 10}).describe("cpu")


def test_a_held_thread_is_busy_to_the_holds_end_once_its_turn_comes() -> None:
    """``Meter.hold``: a task blocked on a thread until a given time (a lock another thread
    holds), queued behind what the thread already had; ``next_io_thread``: tasks scheduled on the
    IO group land on its four threads in turn, the client connection's first."""
    from engine.capacity import IO_THREAD

    sched = VirtualScheduler()
    m = Meter(LatencyModel(resources={"metadata": ResourceSpec(433, 1)}), sched)
    m.hold("metadata", IO_THREAD, 5_000)
    assert m.behind("metadata", IO_THREAD, in_tab=False) == 5_000
    sched.run_until(1_000)
    assert m.behind("metadata", IO_THREAD, in_tab=False) == 4_000
    m.bill("meta.write", "metadata", IO_THREAD)  # queued behind the hold: 5,000 then 433 more
    m.hold("metadata", IO_THREAD, 6_000)  # its turn comes at 5,433: held to 6,000
    assert m.behind("metadata", IO_THREAD, in_tab=False) == 5_000
    m.hold("metadata", IO_THREAD, 5_200)  # its turn comes after 5,200: nothing held
    assert m.behind("metadata", IO_THREAD, in_tab=False) == 5_000
    assert [m.next_io_thread() for _ in range(9)] == [True, False, False, False] * 2 + [True]
    free = Meter(LatencyModel(), VirtualScheduler())  # no capacity: nothing to hold
    free.hold("metadata", IO_THREAD, 5_000)
    assert free.behind("metadata", IO_THREAD, in_tab=False) == 0
