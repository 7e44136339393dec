"""v5 on a store that has run txns before (``V5Options.history``): on Pulsar's standalone store
(RocksDB through ``AbstractMetadataStore``'s fallbacks) every txn's op records leave a sequence
counter that no code path deletes, and every index scan's listing walks them
(``RocksdbMetadataStore.getChildrenFromStore``): the model bills the walk per thousand keys
(``meta.list_keys``), so v5 slows with the broker's history as the broker does."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay.config import EMULATED_STORE, RunConfig
from bench.replay.replay import Replayer
from bench.trace.trace import read_events
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError
from engine.ids import Design, TxnID
from engine.records import Position
from metadata_v5.options import V5Options
from metadata_v5.store.records import StoreTxnRecords
from metadata_v5.store.registry import open_metadata
from metadata_v5.txnrecords import Op


def test_a_seeded_history_leaves_a_counter_per_txn_that_every_scan_walks() -> None:
    records = StoreTxnRecords(open_metadata(EMULATED_STORE), lambda deliver: deliver())
    records.seed_history(0, 50)
    assert records.count_ops() == 0 and records.count_headers() == 0  # collected: only the counters stay
    seq = records.next_txn_seq_each(0)
    assert seq == 50  # the coordinator numbers on after them
    txn = TxnID(Design.V5, 0, seq)
    rec = records.add_op(txn, Op("write", "s", Position(3, 1)))
    assert [r.txn for r in records.writes_scan("s")] == [txn]
    assert (records.last_scan_gets, records.last_scan_keys) == (1, 1 + 51)  # its record; 51 counters walked
    # 5.0.1's GC deletes the header alone (TxnMetadataStore.deleteHeader): the counter stays
    records.create_header(txn, 10_000, 0)
    records.delete_ops([rec])
    records.delete_header(txn, keep_sequence=True)
    assert records.writes_scan("s") == [] and (records.last_scan_gets, records.last_scan_keys) == (0, 51)
    with pytest.raises(ConfigError, match="history=5: the store has run txns of coordinator 0 already"):
        records.seed_history(0, 5)
    native = StoreTxnRecords(open_metadata("memory://"), lambda deliver: deliver())
    native.seed_history(0, 50)
    native.writes_scan("s")
    assert native.last_scan_keys == 0  # a native index walks nothing
    with pytest.raises(ConfigError, match="history must be >= 0"):
        V5Options(history=-1)


def test_a_listing_passes_every_memtable_entry_a_history_left_beside_the_keys_it_returns() -> None:
    """RocksDB's memtable keeps each version of a counter and each deleted record's put and
    tombstone, and the listing's iterator passes them all (bench.calibrate.store_probe timed it):
    a history txn of K op records leaves K counter versions and K puts and K tombstones, of which
    the listing returns the counter: 3K - 1 hidden entries. The memtable is the store's, so a
    handle opened later (a restarted broker replaying the WAL) passes them too."""
    from engine.clock import LatencyModel, VirtualScheduler
    from engine.metering import Meter
    from metadata_v5.metered import MeteredTxnRecords

    store = open_metadata(EMULATED_STORE)
    seeding = StoreTxnRecords(store.reopen(), lambda deliver: deliver())
    seeding.seed_history(0, 50, ops=3)
    records = StoreTxnRecords(store.reopen(), lambda deliver: deliver())
    txn = TxnID(Design.V5, 0, records.next_txn_seq_each(0))
    rec = records.add_op(txn, Op("write", "s", Position(3, 1)))  # one put and one counter version: both returned
    assert records.writes_scan("s") and (records.last_scan_keys, records.last_scan_entries) == (1 + 51, 50 * (3 * 3 - 1))
    records.delete_ops([rec])  # its put now hidden, and its tombstone
    records.writes_scan("s")
    assert (records.last_scan_keys, records.last_scan_entries) == (51, 50 * 8 + 2)
    records.delete_ops([rec])  # gone already: RocksDB writes no tombstone for it
    records.writes_scan("s")
    assert records.last_scan_entries == 50 * 8 + 2
    # billed as one walk: keys and entries, each per thousand, on the calling thread
    meter = Meter(LatencyModel().with_overrides(meta_list_keys=1_000, meta_list_entries=100), VirtualScheduler())
    metered = MeteredTxnRecords(records, meter)
    with meter.tab() as t:
        metered.writes_scan("s")
    assert (meter.billed["meta.list_keys"], meter.billed["meta.list_entries"]) == (51, 402)
    assert t.us == meter.of("meta.list") + round(51 * 1.0 + 402 * 0.1)
    with pytest.raises(ConfigError, match="history_ops must be >= 1"):
        V5Options(history=1, history_ops=0)


def test_a_replay_from_a_history_walks_it_in_every_scan_and_changes_nothing_else_at_no_cost(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 400, 3, trace)

    def run(history: int) -> tuple[dict[str, list[object]], dict[str, int]]:
        cfg = RunConfig(engine="v5", metadata_url=EMULATED_STORE, options={"history": history} if history else {})
        result = Replayer(cfg).run(read_events(trace))
        return result.txns, result.counts

    txns, counts = run(0)
    later_txns, later = run(200)
    scans = counts["tc.op_lists"] + counts["tb.cleanup_scans"]  # each walks the whole of /txn-op/
    assert scans > 0
    walked = later["billed.meta.list_keys"] - counts["billed.meta.list_keys"]
    assert walked % 200 == 0 and walked >= 200 * scans
    assert later["meta.scan_keys"] - counts["meta.scan_keys"] == walked  # billed as the store counted
    # the constants profile bills a walk nothing: the same outcomes at the same instants
    assert later_txns["outcome"] == txns["outcome"] and later_txns["end_ts_us"] == txns["end_ts_us"]
    walks = ("keys", "entries")
    assert ({k: v for k, v in later.items() if not any(w in k for w in walks)}
            == {k: v for k, v in counts.items() if not any(w in k for w in walks)})


def test_a_sweep_on_the_emulated_store_walks_and_reads_every_header_on_its_own_thread() -> None:
    """5.0.1's sweeps scan /txn/id by index (sweepTimeouts, sweepGc): on the standalone's store a
    listing of every header, then a storeGet of each (``meta.scan_get``); billed on the sweep executor's thread."""
    from engine.clock import LatencyModel, ResourceSpec, VirtualScheduler
    from engine.metering import Meter
    from metadata_v5.metered import MeteredTxnRecords
    from metadata_v5.txnrecords import SWEEP

    meter = Meter(LatencyModel(resources={"metadata": ResourceSpec(
        100, 1, kinds=frozenset({"meta.write", "meta.cas", "meta.list_keys"}),
        latency_kinds=frozenset({"meta.list_keys"}))}).with_overrides(meta_list_keys=2_000), VirtualScheduler())
    records = MeteredTxnRecords(StoreTxnRecords(open_metadata(EMULATED_STORE), lambda deliver: deliver()), meter)
    for seq in range(5):
        records.create_header(TxnID(Design.V5, 0, seq), timeout_us=1_000 * seq, created_us=0)
    before = dict(meter.billed)
    with records.on(SWEEP):
        expired, _ = records.expired(2_500, 100)
    assert expired == [TxnID(Design.V5, 0, s) for s in range(3)]
    billed = {k: v - before.get(k, 0) for k, v in meter.billed.items()}
    assert billed["meta.list"] == 1 and billed["meta.scan_get"] == 5 and billed["meta.list_keys"] == 5
    assert "meta.read" not in billed  # the scan's GETs are storeGets, not the metric's get
    _, capacity = meter.capacity_stats()
    assert capacity["metadata@sweep.requests"] == 1 and capacity["metadata@sweep.busy_us"] == 10  # 5 keys at 2 µs


def test_a_timed_out_txn_is_aborted_on_the_sweep_executors_thread(tmp_path: Path) -> None:
    """sweepTimeouts finds an open txn past its deadline and aborts it there: the header read,
    CAS and ops scan, then the events, on the sweep executor's thread, not the IO thread."""
    from collections import Counter

    from bench.trace.trace import TraceWriter
    from engine.clock import LatencyModel, ResourceSpec
    from engine.metering import Meter

    trace = tmp_path / "t.parquet"
    topic = "persistent://public/default/t"
    with TraceWriter(trace, metadata={"profile": "timeout", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=topic, subscription="s")
        w.add(1_000, "new_txn", txn="t0", timeout_ms=1_000)
        w.add(2_000, "publish", txn="t0", topic=topic, msg="m0", size=10)
    seen: Counter[tuple[str, str]] = Counter()
    original = Meter.bill

    def spy(self: Meter, kind: str, resource: str | None = None, key: str = "", times: int = 1) -> int:
        if resource == "metadata":
            seen[(kind, key)] += times
        return original(self, kind, resource, key, times)

    lat = LatencyModel(resources={"metadata": ResourceSpec(100, 1, kinds=frozenset({"meta.write", "meta.cas"}))})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Meter, "bill", spy)
        result = Replayer(RunConfig(engine="v5", latency=lat, drain_ms=130_000)).run(read_events(trace))
    assert result.counts["tc.timeouts"] == 1
    assert seen[("meta.cas", "sweep")] == 1  # the abort's CAS; the IO thread's is NEW_TXN's id counter
    assert seen[("meta.cas", "io")] == result.counts["tc.seq_cas"] == 1
    assert seen[("meta.write", "sweep")] == result.counts["tc.event_writes"] == 1  # its one segment's event


def test_a_brokers_history_is_seeded_with_the_traces_op_records_per_txn(tmp_path: Path) -> None:
    """The broker's warm-ups replay the trace itself, so each txn of its history wrote what a
    txn of the trace writes: its publishes and acks inside the txn, on average, rounded."""
    from tests.unit.test_trace import write
    from bench.trace.tracestats import summarize

    rows = [{"ts_us": 0, "op": "subscribe", "topic": "t", "subscription": "s"}]
    rows += [{"ts_us": 1 + i, "op": "new_txn", "txn": f"x{i}"} for i in range(3)]
    n = 0
    for i, ops in enumerate((3, 4, 4)):  # 11 op records over 3 txns: 3.67 each
        for _ in range(ops):
            n += 1
            rows.append({"ts_us": 10 + n, "op": "publish", "topic": "t", "msg": f"m{n}", "size": 1, "txn": f"x{i}"})
    rows += [{"ts_us": 100, "op": "publish", "topic": "t", "msg": "plain", "size": 1}]  # not in a txn
    rows += [{"ts_us": 200 + i, "op": "commit", "txn": f"x{i}"} for i in range(3)]
    summary = summarize(write(tmp_path / "t.parquet", rows))
    assert (summary.txn_ops, summary.txns, summary.ops_per_txn) == (11, 3, 4)
    cfg = RunConfig(engine="v5", metadata_url=EMULATED_STORE).with_history(200, summary.ops_per_txn)
    assert (cfg.options["history"], cfg.options["history_ops"]) == (200, 4)
    assert "history_ops" not in RunConfig(engine="v5").with_history(200).options  # one op each: as before
