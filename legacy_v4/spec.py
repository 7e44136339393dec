"""The v4 design as txnbench's registry sees it (:class:`engine.registry.EngineSpec`)."""

from __future__ import annotations

from typing import Any, Mapping

from engine.registry import EngineSpec, Opened, ReportRow, RunVariant, TestCombo
from legacy_v4.engine import v4_engine
from legacy_v4.options import V4Options

NAME = "v4"


def _open(metadata_url: str, namespace: str, options: Mapping[str, Any]) -> Opened:
    """v4 keeps all its state in the ledgers (markers, the TC log, snapshots, pending-ack logs):
    the metadata URL and the namespace are not its concern."""
    return Opened(v4_engine(**options))


def _test_combos() -> list[TestCombo]:
    def memory(services: Mapping[str, str]) -> Opened:
        return Opened(v4_engine())

    return [TestCombo(f"{NAME}/memory", memory),
            TestCombo(f"{NAME}/kafka", memory, needs=("kafka",), ledgers="kafka", polling_only=True)]


# Counts only v4 has (the report shows them as design-specific).
REPORT_ROWS = (
    ReportRow("Writes", "commit/abort markers (v4)", "ledger.appends.marker", "entries", True),
    ReportRow("Writes", "coordinator log appends (v4)", "tc.log_appends", "entries", True),
    ReportRow("Writes", "TB snapshot writes (v4)", "snapshot.writes", "entries", True),
    ReportRow("Writes", "pending-ack log appends (v4)", "pending_ack.appends", "entries", True),
    ReportRow("End txn", "END_TXN RPCs sent (v4)", "tc.end_txn.rpcs_sent", "RPCs", True),
    ReportRow("End txn", "END_TXN RPCs failed (v4)", "tc.end_txn.rpcs_failed", "RPCs", True),
    ReportRow("End txn", "END_TXN RPCs timed out (v4)", "tc.end_txn.rpcs_timed_out", "RPCs", True),
    ReportRow("End txn", "end-txn retry rounds (v4)", "tc.end_txn.retries", "rounds", True),
)

SPEC = EngineSpec(
    name=NAME,
    transactional=True,
    options_class=V4Options,
    open=_open,
    label=lambda options: NAME,
    describe=lambda options: "v4 as Pulsar 4.x/5.0.1 ships it (persistent:// topics)",
    variants=(RunVariant(NAME, {}),),
    option_help="a v4 setting (legacy_v4/options.py), e.g. snapshot_max_txn_count=500; repeatable",
    report_rows=REPORT_ROWS,
    # RecoveryStats components of legacy_v4.buffer, .pending_ack and .coordinator
    recovery_kinds={"tb": "tb", "pending-ack": "pending-ack", "tc": "tc"},
    # TransactionAggregator's coordinator families, TransactionBufferStats' marker counts
    metric_keys={"pulsar_txn_created": "tc.txns.created", "pulsar_txn_committed": "tc.txns.committed",
                 "pulsar_txn_aborted": "tc.txns.aborted", "pulsar_txn_timeout": "tc.txns.timed_out",
                 "pulsar_txn_append_log": "tc.log_appends", "pulsar_txn_tb_committed": "tb.markers.commit",
                 "pulsar_txn_tb_aborted": "tb.markers.abort"},
    test_combos=_test_combos,
)
