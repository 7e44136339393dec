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
    assert {k: v for k, v in later.items() if "keys" not in k} == {k: v for k, v in counts.items() if "keys" not in k}
