"""The shipped v5 design (Pulsar 5.0.1, ``Variant.SHIPPED``): its per-operation metadata counts
(one test per row of metadata_v5/README.md's table, each value derived from the steps of the
5.0.1 code that the README cites) and the restart windows the history checker finds in it and
not in the PIP design."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from engine.dispatcher import DispatchMode
from engine.errors import InvalidTxnState, TxnConflict
from engine.memledger import MemoryLedgerFactory
from engine.clock import LatencyModel, ResourceSpec
from engine.ids import TxnID
from engine.ports import TransactionBuffer, TxnAction, TxnStatus
from engine.scripted import abort_open, crash_after_commit
from metadata_v5.engine import V5Engine
from metadata_v5.options import V5Options
from metadata_v5.store.registry import open_metadata
from tests.harness import Combo, Durable, System
from tests.stateful.checked import CheckedSystem

T = "persistent://public/default/t"
U = "persistent://public/default/u"
COUNTED = ("reads", "scan_reads", "writes", "cas", "scans", "deletes")


def _combo(url: str = "memory://", **opts: object) -> Combo:
    options = V5Options(**opts)  # type: ignore[arg-type]

    def durable() -> Durable:
        return Durable(MemoryLedgerFactory(max_entries_per_ledger=64), {"store": open_metadata(url)})

    return Combo("v5", True, durable, lambda d: (lambda ctx: V5Engine(ctx, d.extra["store"].reopen(), options)))


def _counts(s: System) -> Counter[str]:
    st = s.stats()
    return Counter({"reads": st.get("meta.reads", 0), "scan_reads": st.get("meta.scan_reads", 0), "writes": st.get("meta.writes", 0), "cas": st.get("meta.cas", 0),
                    "scans": st.get("meta.index_queries", 0), "deletes": st.get("meta.record_deletes", 0),
                    "lists": st.get("meta.lists", 0)})


def _delta(s: System, step: Callable[[], object]) -> dict[str, int]:
    before = _counts(s)
    step()
    after = _counts(s)
    return {k: after[k] - before[k] for k in (*COUNTED, "lists") if after[k] - before[k]}


def _ready(variant: str = "shipped", url: str = "memory://", mode: DispatchMode = DispatchMode.POLLING) -> System:
    """T with subscription sub, one plain message p0 delivered; everything settled."""
    s = System(_combo(url, variant=variant), mode)
    s.subscribe(T, "sub")
    s.publish(T, "p0")
    s.run(100_000)
    return s


# -- the rows of the shipped design (native store: X = one scan; it returns its records) ----------


def test_new_txn_is_one_get_and_two_cas() -> None:
    s = _ready()
    # nextTxnSequence: GET + CAS of the TC's sequence key; createHeader: a conditional create
    for _ in range(3):  # per txn, not per block of ids
        assert _delta(s, s.new_txn) == {"reads": 1, "cas": 2, "writes": 2}


def test_txn_publish_reads_ownership_and_header_once_per_segment_then_one_write_each() -> None:
    s = _ready()
    txn = s.new_txn()
    # ADD_PARTITION's ownership read + the buffer's header read on its cache miss + the op record
    assert _delta(s, lambda: s.publish(T, "a", txn=txn)) == {"reads": 2, "writes": 1}
    assert _delta(s, lambda: s.publish(T, "b", txn=txn)) == {"writes": 1}
    assert s.stats()["tc.registrations"] == 1


def test_txn_ack_reads_ownership_once_and_never_the_header() -> None:
    s = _ready()
    txn = s.new_txn()
    assert _delta(s, lambda: s.ack("sub", "p0", txn=txn)) == {"reads": 1, "writes": 1}
    s.publish(T, "p1")
    s.run(100_000)
    assert _delta(s, lambda: s.ack("sub", "p1", txn=txn)) == {"writes": 1}


def test_a_plain_publish_cases_the_watermark_at_once_on_an_idle_tail_and_queues_behind_a_busy_one() -> None:
    """syncMaxReadPositionForNormalPublish chains persistWatermarkIfAdvanced on the state tail. A
    completed tail runs it at once, on the thread completing the add and before the publish's
    receipt (PersistentTopic.addComplete): each plain publish CASes and waits for it (rpc 200 +
    append 1,000 + rpc 200, + meta.cas 1,000). Behind an applyTerminalNow the persist waits on the
    tail, the publish does not, and one queued persist covers every advance before it runs."""
    s = _ready()
    def plain(system: System, *msgs: str) -> Callable[[], None]:
        def step() -> None:
            for m in msgs:
                system.publish(T, m)
                took.append(system.broker.last_publish_us)
            system.run(10_000)
        return step

    took: list[int] = []
    assert _delta(s, plain(s, "q0")) == {"cas": 1, "writes": 1}
    assert _delta(s, plain(s, "r0", "r1", "r2")) == {"cas": 3, "writes": 3}  # the tail idle for each
    assert took == [2_400] * 4
    txn = s.new_txn()
    s.publish(T, "a", txn=txn)
    s.run(100_000)
    s.commit(txn)
    while not s.stats().get("tb.materialised.committed"):  # the tail has started the txn's apply
        s.run(100)
    took.clear()
    assert _delta(s, plain(s, "b0", "b1", "b2")) == {"cas": 1, "writes": 1}
    assert took == [1_400] * 3
    pip = _ready("pip")
    assert _delta(pip, plain(pip, "q0")) == {}


def test_end_txn_then_fan_out_then_each_participants_reconcile_and_cleanup() -> None:
    s = _ready()
    other = s.new_txn()  # a second txn open on T: the buffer re-reads its header on every event
    s.publish(T, "o", txn=other)
    txn = s.new_txn()
    s.publish(T, "a", txn=txn)
    s.publish(T, "b", txn=txn)
    s.ack("sub", "p0", txn=txn)
    s.run(10_000)
    # END_TXN: the ownership read, the header read, the CAS, chained to it listOpsByTxn (one
    # scan, returning the txn's M+A = 3 records; S=1 segment, U=1 subscription)
    assert _delta(s, lambda: s.commit(txn)) == {"reads": 2 + 3, "cas": 1, "writes": 1, "scans": 1}
    # then (the reads, the CAS and the scan billed one after another: under 3 ms) the fan-out:
    # S+U = 2 event appends issued at once, each landing at its put's commit, a write (1 ms)
    # later, and heard of a meta.watch (0.5 ms) after that
    assert _delta(s, lambda: s.run(3_000)) == {}
    assert _delta(s, lambda: s.run(500)) == {"writes": 2}
    # the events reach the participants: the buffer reads K=2 headers (txn and other), the
    # pending-ack store K=1; the buffer applies txn: no watermark CAS (`other` still pins
    # maxReadPosition below a and b), a scan of the segment's write ops (N_seg = 3: a, b and o)
    # and one delete per record of txn (2); the store: a scan of the subscription's ack ops (1)
    # and one delete
    assert _delta(s, lambda: s.run(1_000_000)) == {"reads": 2 + 1 + 3 + 1, "scans": 2, "writes": 2 + 1, "deletes": 3}
    assert s.outcomes[txn] is TxnStatus.COMMITTED
    assert s.msgs(T, "sub") == ["p0"]  # `other` still pins a and b
    st = s.stats()
    assert st["tb.reconcile_header_reads"] == 2 and st["pending_ack.reconcile_header_reads"] == 1
    engine = s.broker.engine
    assert isinstance(engine, V5Engine) and engine.records.count_events() == 2  # never deleted


def test_same_action_retry_skips_the_cas_and_fans_out_again() -> None:
    s = _ready()
    txn = s.new_txn()
    s.publish(T, "a", txn=txn)
    s.commit(txn)
    s.broker.restart_coordinator()  # the CAS landed, the fan-out never ran: nobody heard of it
    s.run(1_000_000)
    assert s.msgs(T, "sub") == ["p0"]
    # the client retries: ownership + header reads, no CAS, the ops scan (its one record); the
    # fan-out again (one event); then the buffer's reconcile read, scan (one record) and delete
    assert _delta(s, lambda: s.commit(txn)) == {"reads": 2 + 1, "scans": 1}
    assert _delta(s, lambda: s.run(1_000_000)) == {"scans": 1, "reads": 1 + 1, "writes": 1 + 1 + 1, "cas": 1,
                                                   "deletes": 1}
    assert s.msgs(T, "sub") == ["p0", "a"] and s.stats()["tc.end_txn.repeated"] == 1
    with pytest.raises(InvalidTxnState):
        s.end(txn, TxnAction.ABORT)


def test_materialisation_is_serial_per_segment_so_visibility_lags_under_load() -> None:
    """n commits at once on one segment: each holds the tail for a watermark CAS, a scan and its
    deletes (1.0 + 0.5 + 1.0 ms with the default latencies) before the next txn's state change."""
    s = _ready(mode=DispatchMode.NOTIFY)
    txns = [s.new_txn() for _ in range(10)]
    for i, t in enumerate(txns):
        s.publish(T, f"m{i}", txn=t)
    for t in txns:
        s.commit(t)
    start = s.sched.now_us()
    s.run(10_000)  # the first few are visible, the rest are queued on the tail
    assert 0 < len(s.msgs(T, "sub")) - 1 < 10
    s.run(100_000)
    assert s.msgs(T, "sub") == ["p0"] + [f"m{i}" for i in range(10)]
    # the last one's state change waits for the nine before it: 9 x 2.5 ms on the tail
    last = s.received[(T, "sub")][-1].delivered_ts_us
    assert last - start >= 9 * 2_500


# -- the emulated store (Pulsar's standalone) -----------------------------------------------------


def test_emulated_store_scans_every_child_and_pays_the_counter_per_sequence_key() -> None:
    s = _ready(url="memory://?emulated=1")
    txn = s.new_txn()
    # ownership + header + the op record's counter GET (absent: a list finds the highest key),
    # then the counter CAS and the create
    assert _delta(s, lambda: s.publish(T, "a", txn=txn)) == {"reads": 3, "lists": 1, "cas": 1, "writes": 2}
    assert _delta(s, lambda: s.publish(T, "b", txn=txn)) == {"reads": 1, "cas": 1, "writes": 2}
    # END_TXN: ownership + header reads, the CAS, then listOpsByTxn lists /txn-op/ and GETs each
    # child (2); the event later: counter GET, list (its first), CAS + create, landing at the
    # create's commit (over 2 ms after the scan) and heard of a meta.watch (0.5 ms) after that
    assert _delta(s, lambda: s.commit(txn)) == {"reads": 2, "cas": 1, "writes": 1, "scans": 1, "lists": 1,
                                                "scan_reads": 2}
    assert _delta(s, lambda: s.run(5_000)) == {}
    assert _delta(s, lambda: s.run(500)) == {"lists": 1, "reads": 1, "cas": 1, "writes": 2}


def _next_landing(s: System, engine: V5Engine) -> int:
    """When the next event is written to the store, to the µs (within 20 ms)."""
    events, deadline = engine.records.count_events(), s.sched.now_us() + 20_000
    while engine.records.count_events() == events:
        assert s.sched.now_us() < deadline, "no event landed"
        s.run(1)
    return s.sched.now_us()


def test_each_event_lands_at_its_own_puts_commit_and_a_crash_between_them_loses_the_rest() -> None:
    """On an emulated store ``fanOutEvents``' puts run one after another (each the counter's GET
    and CAS, then the create: ``putWithSequenceKeysCompat``), and each event lands at its own
    put's commit, where ``RocksdbMetadataStore.storePut`` notifies the watchers: the second one
    put (300 + 1,000 + 1,000 µs with the hand-written latencies) after the first, and the
    watchers hear of each a meta.watch (500 µs) after it lands, with no write time again. A
    coordinator gone between the two leaves the second unwritten (D8)."""
    for crash in (False, True):
        s = _ready(url="memory://?emulated=1")
        engine = s.broker.engine
        assert isinstance(engine, V5Engine)
        txn = s.new_txn()
        s.publish(T, "a", txn=txn)
        s.ack("sub", "p0", txn=txn)
        s.run(10_000)
        s.commit(txn)
        first = _next_landing(s, engine)
        before = engine.store.stats()["reads"]
        if crash:
            s.broker.restart_coordinator()
            s.run(10_000)
            assert engine.records.count_events() == 1
            continue
        s.run(499)  # the buffer or pending-ack store hears of it at 500 µs and reads its header
        assert engine.store.stats()["reads"] == before
        second = _next_landing(s, engine)
        assert second - first == 300 + 1_000 + 1_000
        assert engine.store.stats()["reads"] > before


def test_the_pips_watchers_hear_of_a_write_made_at_its_issue_a_write_and_a_watch_later() -> None:
    """The PIP's coordinator makes its commit CAS when END_TXN runs, before the write's modelled
    time has passed: the header's watcher hears of it a meta.write (1,000 µs) and a meta.watch
    (500) later, where the shipped design's events, landing at their commits, are heard a
    meta.watch after they land (the test above)."""
    s = _ready("pip")
    engine = s.broker.engine
    assert isinstance(engine, V5Engine)
    txn = s.new_txn()
    s.publish(T, "a", txn=txn)
    s.run(10_000)
    s.commit(txn)
    heard = engine.store.stats()["watch_events"]
    s.run(1_499)
    assert engine.store.stats()["watch_events"] == heard
    s.run(1)
    assert engine.store.stats()["watch_events"] == heard + 1


def test_per_txn_figures_next_to_the_broker() -> None:
    """PULSAR.md measured 8.0 gets / 8.2 puts / 1.0 delete per one-message txn and 18.4 / 25.7 /
    10 per ten-message txn on a 5.0.0-M1 standalone (RocksDB). The broker's get counter sees only
    ``AbstractMetadataStore.get``; a scan's serial GETs go to ``storeGet`` and are not counted
    there, so the model keeps them apart (``meta.scan_reads``)."""
    s = _ready(url="memory://?emulated=1")
    s.run(1_000_000)
    figures = {}
    keys = ("meta.reads", "meta.scan_reads", "meta.record_puts", "meta.record_deletes")
    for n in (1, 10):
        before = s.stats()
        t = s.new_txn()
        for i in range(n):
            s.publish(T, f"x{n}-{i}", txn=t)
        s.commit(t)
        s.run(1_000_000)
        after = s.stats()
        figures[n] = tuple(after.get(k, 0) - before.get(k, 0) for k in keys)
    # puts: seq CAS + header + (counter CAS + create) per op + CAS + event (counter CAS + create)
    # + the watermark CAS at materialisation
    assert figures[1][2] == 2 + 2 * 1 + 1 + 2 + 1 and figures[10][2] == 2 + 2 * 10 + 1 + 2 + 1
    assert figures[1][3] == 1 and figures[10][3] == 10  # one deleteIfExists per op record
    # gets: seq GET + ownership + header (publish) + a counter GET per op + ownership + header
    # (END_TXN) + the event's counter GET + the reconcile read
    assert figures[1][0] == 1 + 2 + 1 + 2 + 1 + 1 and figures[10][0] == 1 + 2 + 10 + 2 + 1 + 1
    # scan GETs: the ops-by-txn scan at END_TXN and the segment's cleanup scan, n records each
    assert figures[1][1] == 1 + 1 and figures[10][1] == 10 + 10


# -- restart windows: findings for shipped, none for the PIP -------------------------------------


def _restart(variant: str) -> Counter[str]:
    s = CheckedSystem(_combo(variant=variant), DispatchMode.POLLING)
    abort_open(s, crash_after_commit(s, T, "sub"))
    return Counter(v.kind for v in s.finish())


def test_restart_windows_are_findings_for_shipped_and_absent_from_pip() -> None:
    shipped = _restart("shipped")
    # x dispatched while its txn was open (no recovery gate: the buffer starts at the LAC) and
    # then aborted; m0 redelivered while its txn ack was pending and m1 after its txn ack was
    # committed (pending-ack recovery restores txn ids only)
    assert shipped["aborted_read"] == 1 and shipped["acked_redelivered"] == 2
    assert _restart("pip") == Counter()


def test_coordinator_restart_between_cas_and_fan_out_leaves_the_commit_unseen() -> None:
    found = {}
    for variant in ("shipped", "pip"):
        s = CheckedSystem(_combo(variant=variant), DispatchMode.POLLING)
        s.subscribe(U, "out")
        t = s.new_txn()
        s.publish(U, "y", txn=t)
        s.commit(t)
        s.restart_coordinator()  # the CAS landed; the fan-out step has not run
        s.run(10_000_000)
        found[variant] = (s.msgs(U, "out"), Counter(v.kind for v in s.finish()))
    assert found["pip"] == (["y"], Counter())
    # the buffer never hears of it: y stays pinned (the checker calls a committed txn's entry that
    # never arrives a lost write) until another event on the segment or the GC's repair
    assert found["shipped"][0] == [] and found["shipped"][1]["lost_write"] == 1


def test_a_new_txn_arriving_during_an_end_txn_waits_for_its_whole_chain_on_an_emulated_store(tmp_path: Path) -> None:
    """On RocksDB every store call of END_TXN completes on the connection's thread: the reads,
    the CAS, listOpsByTxn and each participant's event put run there one after another
    (TransactionCoordinatorV5 L431-508), so a new-txn that arrives meanwhile is answered after
    that END_TXN is (the broker did so for 85 of 107 such new-txns over three validation sets,
    2026-11-27), not in between its scan and its events."""
    from bench.calibrate.saturation import _metadata
    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from engine.profile import LatencyProfile
    from tests.unit.test_trace import write

    topics = [f"persistent://public/default/t-{i}" for i in range(8)]
    rows = [{"ts_us": i, "op": "subscribe", "topic": tp, "subscription": "s"} for i, tp in enumerate(topics)]
    rows += [{"ts_us": 1_000, "op": "new_txn", "txn": "a"}]
    rows += [{"ts_us": 10_000 + i, "op": "publish", "topic": tp, "msg": f"m{i}", "size": 1, "txn": "a"}
             for i, tp in enumerate(topics)]
    rows += [{"ts_us": 100_000, "op": "commit", "txn": "a"}, {"ts_us": 100_500, "op": "new_txn", "txn": "b"},
             {"ts_us": 200_000, "op": "commit", "txn": "b"}]
    profile = LatencyProfile.constants()
    latency = profile.to_latency_model(1).with_resources({"metadata": _metadata(800)})
    config = next(c for c in model_configs(latency, profile) if c.engine == "v5")  # the emulated store
    txns = Replayer(config).run(read_events(write(tmp_path / "t.parquet", rows))).txns
    got = {t: (o, a, e) for t, o, a, e in zip(txns["txn"], txns["opened_ts_us"], txns["new_txn_answered_ts_us"],
                                              txns["end_ts_us"])}
    a_ended = got["a"][2]
    assert a_ended - 100_000 > 8 * 800  # a's END_TXN holds the thread for its eight events' puts at least
    assert got["b"][1] > a_ended  # b's new-txn answered after a's END_TXN
    alone = got["a"][1] - got["a"][0]  # a new-txn on an idle thread
    assert got["b"][1] - got["b"][0] > alone + 8 * 800


def test_an_end_txns_event_puts_run_one_after_another_on_an_emulated_store(tmp_path: Path) -> None:
    """fanOutEvents (L475-508) issues a put per participant without waiting, but on RocksDB each
    completes on the connection's thread before the loop goes on (putWithSequenceKeysCompat's
    GET, CAS and create): eight participants cost eight puts one after another, nothing running
    between them. On a store with native sequence keys the puts are concurrent."""
    from dataclasses import replace

    from bench.calibrate.saturation import _metadata
    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from engine.profile import LatencyProfile
    from tests.unit.test_trace import write

    profile = LatencyProfile.constants()
    latency = profile.to_latency_model(1).with_resources({"metadata": _metadata(800)})
    emulated = next(c for c in model_configs(latency, profile) if c.engine == "v5")

    def end_txn_us(segments: int, native: bool) -> int:
        topics = [f"persistent://public/default/t-{i}" for i in range(segments)]
        rows = [{"ts_us": i, "op": "subscribe", "topic": tp, "subscription": "s"} for i, tp in enumerate(topics)]
        rows += [{"ts_us": 1_000, "op": "new_txn", "txn": "a"}]
        rows += [{"ts_us": 10_000 + i, "op": "publish", "topic": tp, "msg": f"m{i}", "size": 1, "txn": "a"}
                 for i, tp in enumerate(topics)]
        rows += [{"ts_us": 100_000, "op": "commit", "txn": "a"}]
        config = replace(emulated, metadata_url="memory://") if native else emulated
        txns = Replayer(config).run(read_events(write(tmp_path / f"t{segments}{native}.parquet", rows))).txns
        return txns["end_ts_us"][0] - txns["commit_requested_ts_us"][0]

    lat = profile.to_latency_model(1)
    put = lat.of("meta.read") + lat.of("meta.cas") + lat.of("meta.write")  # the counter's GET and CAS, the create
    assert end_txn_us(8, native=False) - end_txn_us(1, native=False) >= 7 * put
    assert end_txn_us(8, native=True) - end_txn_us(1, native=True) < 7 * lat.of("meta.write")  # concurrent


def _eight_segment_commit(tmp_path: Path, commit_at_us: int) -> Path:
    """A trace of one txn publishing to eight subscribed topics from 10 ms and committing."""
    from tests.unit.test_trace import write

    topics = [f"persistent://public/default/t-{i}" for i in range(8)]
    rows = [{"ts_us": i, "op": "subscribe", "topic": tp, "subscription": "s"} for i, tp in enumerate(topics)]
    rows += [{"ts_us": 1_000, "op": "new_txn", "txn": "a"}]
    rows += [{"ts_us": 10_000 + i, "op": "publish", "topic": tp, "msg": f"m{i}", "size": 1, "txn": "a"}
             for i, tp in enumerate(topics)]
    rows += [{"ts_us": commit_at_us, "op": "commit", "txn": "a"}]
    return write(tmp_path / "t.parquet", rows)


def test_a_txns_participants_become_visible_one_after_another_on_the_notification_thread(tmp_path: Path) -> None:
    """Every participant's wake-up runs on the store's one notification thread
    (AbstractMetadataStore.receivedNotification: eventExecutor) and, on RocksDB, its whole apply
    with it (watermark CAS, cleanup scan, deletes): the eight segments of one commit become
    visible one after another, each after the cleanups of those notified before it (the broker's
    many-participants sets: about 10 ms apart, 2026-11-27). Without a metadata capacity nothing
    queues and all eight are visible at once. Here each cleanup's scan walks 1,000 counters at
    20 ms per thousand, so the thread is held about 20 ms per segment."""
    from bench.calibrate.saturation import _metadata
    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from engine.profile import LatencyProfile

    path = _eight_segment_commit(tmp_path, commit_at_us=100_000)
    profile = LatencyProfile.constants()

    def spread(capacity: bool) -> int:
        latency = profile.to_latency_model(1).with_overrides(meta_list_keys=20_000)
        if capacity:
            latency = latency.with_resources({"metadata": _metadata(100)})
        config = next(c for c in model_configs(latency, profile, history=1_000) if c.engine == "v5")  # emulated
        got = sorted(Replayer(config).run(read_events(path)).deliveries["delivered_ts_us"])
        assert len(got) == 8
        return got[-1] - got[0]

    # the dispatchers' polling (10-20 ms) blurs each instant by less than a segment's turn
    assert spread(capacity=True) >= 7 * 20_000 - 20_000
    assert spread(capacity=False) < 20_000


def test_the_store_notifications_of_earlier_writes_hold_back_a_commits_visibility(tmp_path: Path) -> None:
    """Every put and delete queues notifications on the store's one event thread, each running
    every listener (AbstractMetadataStore.receivedNotification; RocksDB: the key and each of its
    two ancestors for a create, one for an update: bench.calibrate.store_probe counted 3 per key).
    A participant's wake-up runs on that thread after them: with 2,000 listeners at 1 µs each,
    every op-record append (counter update + create: 4 notifications) holds the thread 8 ms, so
    the commit of a txn that published to eight segments is seen only after the eight appends'
    64 ms. Without a price (the default profile) nothing waits, and the listener
    calls are counted all the same."""
    from bench.calibrate.saturation import _metadata
    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from engine.profile import LatencyProfile

    path = _eight_segment_commit(tmp_path, commit_at_us=20_000)
    profile = LatencyProfile.constants()

    def first_seen(per_thousand: int) -> tuple[int, int]:
        latency = (profile.to_latency_model(1).with_overrides(meta_notify=per_thousand)
                   .with_resources({"metadata": _metadata(100)}))
        config = next(c for c in model_configs(latency, profile) if c.engine == "v5")  # emulated store
        config = replace(config, options={**config.options, "history_listeners": 2_000})
        result = Replayer(config).run(read_events(path))
        assert len(result.deliveries["msg"]) == 8
        return min(result.deliveries["delivered_ts_us"]), int(result.counts.get("billed.meta.notify", 0))

    priced, calls = first_seen(1_000)
    free, same_calls = first_seen(0)
    assert calls == same_calls >= 8 * 4 * 2_000  # at least the eight appends' notifications, each to every listener
    assert priced >= 10_000 + 8 * 4 * 2_000
    assert free < 20_000 + 100_000


def test_a_conflicting_txn_ack_still_writes_its_op_record() -> None:
    """5.0.1 appends the ack records before the conflict checks (appendAcks L210-240,
    PendingAckHandleImpl L240-257); the PIP variant checks first."""
    for variant, written in (("shipped", 1), ("pip", 0)):
        s = _ready(variant)
        first, second = s.new_txn(), s.new_txn()
        s.ack("sub", "p0", txn=first)
        before = s.stats()["meta.op_writes"]
        with pytest.raises(TxnConflict):
            s.ack("sub", "p0", txn=second)
        assert s.stats()["meta.op_writes"] - before == written, variant


@pytest.mark.parametrize(("gc", "visible"), [("repair", True), ("wait", False)])
def test_gc_repair_re_publishes_the_events_a_lost_fan_out_never_wrote(gc: str, visible: bool) -> None:
    s = System(_combo(variant="shipped", gc=gc, retention_ms=1_000, gc_sweep_ms=500), DispatchMode.POLLING)
    s.subscribe(U, "out")
    t = s.new_txn()
    s.publish(U, "y", txn=t)
    s.commit(t)
    s.broker.restart_coordinator()  # the CAS landed; the fan-out never ran
    s.run(5_000_000)  # past the retention: the GC finds y's op record left
    assert (s.msgs(U, "out") == ["y"]) is visible
    assert (s.stats().get("tc.gc.refanouts", 0) >= 1) is visible


def test_unused_transactions_do_not_stall_dispatch_after_a_reload() -> None:
    """With transactions enabled but unused, the shipped buffer starts at the LAC (L158): a
    reloaded topic dispatches before its recovery (watermark read, two scans) has landed."""
    s = System(_combo(variant="shipped"), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    s.publish(T, "m0")
    s.run(100_000)
    s.crash()
    reloaded = s.sched.now_us()
    s.subscribe(T, "late")  # a new subscription reads from the earliest entry
    s.run(100_000)
    (first,) = s.received[(T, "late")]
    recovery = s.broker.recovery_stats()
    tb = next(r for r in recovery if r.component.startswith("tb-v5"))
    assert first.delivered_ts_us - reloaded < tb.modelled_us


def test_each_tail_item_holds_the_buffers_lock_from_its_start_to_its_end() -> None:
    """``getMaxReadPosition`` (L647) and ``isTxnAborted`` are ``synchronized (lock)``, and each
    item of the state tail holds that lock while it runs: a reader during a commit's apply (its
    watermark CAS, scan and deletes: 1.0 + 0.5 + 1.0 ms with the default latencies) gets its
    answer when the apply ends."""
    s = _ready(mode=DispatchMode.NOTIFY)
    tb = s.broker.transaction_buffer(T)
    t = s.new_txn()
    s.publish(T, "m0", txn=t)
    s.run(100_000)
    assert tb.lock_free_at(s.sched.now_us()) == s.sched.now_us()  # an idle tail holds nothing
    s.commit(t)
    held = []
    for _ in range(500):  # 100 µs steps until the apply has run
        s.run(100)
        now = s.sched.now_us()
        if tb.lock_free_at(now) > now:
            held.append((now, tb.lock_free_at(now)))
    ends = {end for _, end in held}
    assert len(ends) == 1  # one item: the commit's apply
    (end,) = ends
    first = held[0][0]
    assert end - first <= 2_500 < end - first + 100  # found within a step of its start
    assert tb.lock_free_at(end) == end  # free once it ends
    assert s.msgs(T, "sub") == ["p0", "m0"]


@pytest.mark.parametrize("url", ["memory://", "memory://?emulated=1"])
def test_an_applys_deletes_run_one_after_another_on_an_emulated_store(url: str) -> None:
    """deleteWriteOpsForSegmentAndTxn issues a delete per op record without waiting, but on
    RocksDB each completes on the calling thread before the next is issued (storeDelete): the
    apply of a txn with four records on the segment holds the buffer's lock for four deletes one
    after another; on a native store they are concurrent (with the default latencies a delete
    is 1.0 ms)."""
    s = _ready(url=url, mode=DispatchMode.NOTIFY)
    tb = s.broker.transaction_buffer(T)
    t = s.new_txn()
    for i in range(4):
        s.publish(T, f"m{i}", txn=t)
    s.run(100_000)
    start, end = _committed_until_the_apply_locks(s, t, tb)
    delete = LatencyModel().of("meta.write")
    if "emulated" in url:
        assert end - start >= 4 * delete
    else:
        assert end - start < 2 * delete + 2_500
    s.run(100_000)
    assert s.msgs(T, "sub") == ["p0", "m0", "m1", "m2", "m3"]


def _a_txn_sent_to_t(s: System) -> tuple[TransactionBuffer, TxnID, str, str]:
    """A txn that sent m0 to T, settled: (T's buffer, the txn, T's ledger, U's ledger)."""
    tb = s.broker.transaction_buffer(T)
    t = s.new_txn()
    s.publish(T, "m0", txn=t)
    s.run(100_000)
    return tb, t, s.broker.ledgers_of(T)[0], s.broker.ledgers_of(U)[0]


def _committed_until_the_apply_locks(s: System, t: TxnID, tb: TransactionBuffer) -> tuple[int, int]:
    """Commit ``t`` and step 100 µs at a time until the apply it starts holds ``tb``'s lock:
    (now, when the lock is free again)."""
    s.commit(t)
    for _ in range(500):
        s.run(100)
        now = s.sched.now_us()
        if tb.lock_free_at(now) > now:
            return now, tb.lock_free_at(now)
    raise AssertionError("the commit's apply never held the buffer's lock")


def test_a_plain_receipt_waits_for_its_buffers_lock_after_the_add() -> None:
    """``PersistentTopic.addComplete`` syncs the buffer's max read position under its lock
    (``syncMaxReadPositionForNormalPublish`` M1 L669) before the receipt: a receipt ready while
    a commit's apply holds T's lock leaves when the apply ends; U's buffer holds nothing."""
    s = _ready(mode=DispatchMode.NOTIFY)
    s.publish(U, "u0")
    tb, t, ledger_t, ledger_u = _a_txn_sent_to_t(s)
    now = s.sched.now_us()
    assert s.broker.receipt_leaves_at(now, ledger_t) is None  # an idle tail holds nothing
    now, end = _committed_until_the_apply_locks(s, t, tb)
    assert s.broker.receipt_leaves_at(now, ledger_t) == end
    assert s.broker.receipt_leaves_at(now, ledger_u) is None


def test_a_txn_send_waits_for_its_buffers_lock_on_the_connections_thread() -> None:
    """``readStateCacheFirst`` (M1 L366-367) takes the buffer's lock on the IO thread that
    handles the send: a txn send to T reaching it while a commit's apply holds T's lock waits
    for the apply, and holds the thread meanwhile, so what the thread runs next waits too; a
    send to U, whose buffer holds nothing, goes at once."""
    s = System(_combo(), DispatchMode.NOTIFY)
    s.config = replace(s.config, latency=LatencyModel().with_resources({"metadata": ResourceSpec(433, 1)}))
    s.broker = s.new_broker()  # with the store's threads queueing their calls
    s.subscribe(T, "sub")
    tb, t, ledger_t, ledger_u = _a_txn_sent_to_t(s)
    assert s.broker.last_publish_io_us is not None  # the shipped buffer locks: its sends are looked up
    assert s.broker.send_lock_wait(ledger_t) == 0  # an idle tail holds nothing
    now, end = _committed_until_the_apply_locks(s, t, tb)
    assert s.broker.send_lock_wait(ledger_u) == 0
    assert s.broker.receipt_leaves_at(now, ledger_u) in (None, now)  # the thread is free
    assert s.broker.send_lock_wait(ledger_t) == end - now
    assert s.broker.receipt_leaves_at(now, ledger_u) == end  # a receipt to U waits for the held thread
    assert tb.stats["lock_waits_on_send"] == 1
