"""The v5 design (PIP-473, the metadata store) as txnbench's registry sees it
(:class:`engine.registry.EngineSpec`): one column per :class:`~metadata_v5.options.Variant`."""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from engine.registry import CliFlag, EngineSpec, Opened, ReportRow, RunVariant, TestCombo
from metadata_v5.engine import open_v5
from metadata_v5.options import GcMode, V5Options, Variant
from metadata_v5.store.registry import namespaced_metadata_url, purge_metadata

NAME = "v5"

DESIGNS = {
    Variant.SHIPPED: "v5 as Pulsar 5.0.1 ships it (the released design)",
    Variant.PIP: "v5 as PIP-473's text describes it (header watches; not in any release)",
    Variant.STATE_EVENTS: "v5 with state-carrying events, no reconcile (an ablation; not in any release)",
}


def _variant(options: Mapping[str, Any]) -> Variant:
    return Variant(options.get("variant", V5Options.variant))


def _open(metadata_url: str, namespace: str, options: Mapping[str, Any]) -> Opened:
    """The run's store in its namespace on a shared backend; closing deletes what the run wrote
    there (a second run on the same Redis must not see it), after the store's handle closes."""
    url = namespaced_metadata_url(metadata_url, namespace)
    factory, close = open_v5(url, **options)
    if namespace and not metadata_url.startswith("memory:"):
        return Opened(factory, (lambda: purge_metadata(url), close))  # closers run last first
    return Opened(factory, (close,))


def _test_combos() -> list[TestCombo]:
    """Every variant on the embedded and the Redis store, plus the fallbacks: the shipped design
    on Pulsar's standalone store (the AbstractMetadataStore fallback) and the PIP's degraded
    store (no range watches)."""

    def combo(variant: Variant, backend: str) -> TestCombo:
        def open_(services: Mapping[str, str]) -> Opened:
            if backend == "redis":  # a fresh key prefix per test on the server the test command started
                url = f"{services['redis']}?prefix=t{uuid.uuid4().hex[:12]}:&exclusive=1"  # as a run's namespace is
            else:
                url = {"memory-degraded": "memory://?degraded=1",
                       "memory-emulated": "memory://?emulated=1"}.get(backend, "memory://")
            factory, close = open_v5(url, variant=variant)
            if backend == "redis":  # the server is shared by every test and campaign history: leave it empty
                return Opened(factory, (lambda: purge_metadata(url), close))
            return Opened(factory, (close,))

        # the shipped design breaks the crash tests' promises by design (PULSAR5_CODE.md D8, D13, D14)
        return TestCombo(f"{NAME}-{variant.value}/{backend}", open_, needs=("redis",) if backend == "redis" else (),
                         crash_safe=variant is not Variant.SHIPPED)

    out = [combo(v, b) for v in Variant for b in ("memory", "redis")]
    return out + [combo(Variant.SHIPPED, "memory-emulated"), combo(Variant.PIP, "memory-degraded")]


# Counts only v5 has. The two sweep rows compare across GC modes, so they get a verdict.
REPORT_ROWS = (
    ReportRow("Writes", "op records written (v5)", "meta.op_writes", "records", True),
    ReportRow("Writes", "header CAS, end-txn (v5)", "derived.header_cas", "CAS", True),
    ReportRow("Writes", "metadata records put or deleted (v5)", "meta.writes", "records", True),
    ReportRow("Writes", "metadata reads (v5)", "meta.reads", "records", True),
    ReportRow("Writes", "metadata index queries (v5)", "meta.index_queries", "queries", True),
    ReportRow("End txn", "event records written (v5 events)", "tc.event_writes", "records", True),
    ReportRow("Notifications", "watch events delivered (v5)", "meta.watch_events", "events", True),
    ReportRow("GC", "headers collected (v5)", "tc.gc.headers_deleted", "txns", False),
    ReportRow("GC", "finished txns still stored at the end, the GC backlog (v5)", "gc.finished_headers_kept", "txns", True),
    ReportRow("GC", "op records not collected at the end (v5)", "gc.op_records_outstanding", "records", True),
    ReportRow("GC", "op records force-deleted by GC (v5, PIP sweep)", "tc.gc.forced_op_deletes", "records", True, False),
    ReportRow("GC", "txns kept for slow participants (v5, safe sweep)", "tc.gc.waiting_for_participants", "txns", True, False),
)

SPEC = EngineSpec(
    name=NAME,
    transactional=True,
    options_class=V5Options,
    open=_open,
    label=lambda options: f"{NAME}-{_variant(options).value}",
    describe=lambda options: DESIGNS[_variant(options)],
    variants=tuple(RunVariant(f"{NAME}-{v.value}", {"variant": v}) for v in Variant),
    cli_flags=(
        CliFlag("--v5-variant", "variant", tuple(v.value for v in Variant), Variant.SHIPPED.value,
                "shipped: Pulsar 5.0.1's released design (default); pip: PIP-473's text "
                "(header watches); state-events: events carrying the state, no reconcile (ablation)"),
        CliFlag("--v5-gc", "gc", tuple(g.value for g in GcMode), GcMode.REPAIR.value,
                "repair: 5.0.1's GC, re-publishes events of finished txns with ops left (default); "
                "wait: keeps them and waits; force: the PIP's sweep, force-deletes them"),
    ),
    option_help="a v5 setting (metadata_v5/options.py), e.g. retention_ms=60000; repeatable",
    report_rows=REPORT_ROWS,
    # RecoveryStats components of metadata_v5's buffers, pending-ack stores and coordinator
    recovery_kinds={"tb-v5": "tb", "pending-ack-v5": "pending-ack", "tc-v5": "tc"},
    uses_metadata_store=True,
    # PIP-473 keeps the coordinator families and drops pulsar_txn_tb_*; op_writes is its own
    metric_keys={"pulsar_txn_created": "tc.header_creates", "pulsar_txn_committed": "tc.ended.committed",
                 "pulsar_txn_aborted": "tc.ended.aborted", "pulsar_txn_metadata_store_op_writes": "meta.op_writes"},
    test_combos=_test_combos,
)
