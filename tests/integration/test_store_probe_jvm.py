"""The store probe (jvm/src/txnbench/probe, bench.calibrate.store_probe) with the broker's real
classes: the store it builds is laid out as the model's emulated store assumes (one sequence
counter per txn the store has held, beside the live op records), and its figures are summed up."""

from __future__ import annotations

import pytest

from bench.calibrate import store_probe
from tests.conftest import PulsarBroker

pytestmark = pytest.mark.pulsar


def test_the_probe_scans_the_brokers_own_store_layout(pulsar: PulsarBroker) -> None:
    got = store_probe.measure(histories=(200, 800), lives=(1, 50), ops=(1, 3), repeats=10,
                              listeners=(0, 100), notify_writes=50, handoffs=200)
    runs = {(r["ops"], r["history"], r["live"]): r for r in got["runs"]}
    assert set(runs) == {(k, h, n) for k in (1, 3) for h in (200, 800) for n in (1, 50)}
    for (ops, history, live), r in runs.items():
        # TxnMetadataStore.appendOp's counter stays when its records are deleted: the listing holds both
        assert r["children"] == history + live * ops, r
        assert r["scanned"] == ops  # listOpsByTxn streams the scanned txn's own records, of all it GETs
        q = r["store_get_us"]
        assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"], r
        assert r["scan_us"] > 0 and r["list_us"] > 0 and r["writes_scan_us"] > 0
    assert got["scan_get_from"] == {"history": 800, "live": 50}
    assert got["scan_get_us"] == runs[(1, 800, 50)]["store_get_us"]
    assert set(got["walk_us_per_thousand_by_ops"]) == {"1", "3"} and got["walk_fit"] is not None
    assert "decode_us_per_record" in got  # the runs of 50 txns x 3 ops decode 150 records a scan
    # a key created or deleted under /txn/op: its own notification, and ChildrenChanged for /txn/op
    # and /txn (AbstractMetadataStore.parent stops below "/"); the marker's update one more
    assert [(r["listeners"], r["notifications"]) for r in got["notify_runs"]] == [(0, 6 * 50 + 1), (100, 6 * 50 + 1)]
    assert got["notify_fit"]["notifications_per_key"] == 3.0
    # the hand-off: the last half of the puts, each waited for at its listener, which starts on the
    # store's executor once the put has committed (storePut -> receivedNotification -> supplyAsync)
    ho = got["handoff"]
    assert ho["handoffs"] == 100
    for q in (ho["put_us"], ho["listener_us"]):
        assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"], ho
    spec = store_probe.scan_get_spec(got)
    assert spec["p50"] >= 1 and list(spec.values()) == sorted(spec.values())


def test_the_hand_off_alone(pulsar: PulsarBroker) -> None:
    """``measure_handoff``: the notification probe without its fan-out rounds (an empty
    ``--listeners``), as ``calibrate --refit PROFILE --watch-only`` runs it."""
    line = store_probe.measure_handoff(handoffs=200)
    assert line["handoffs"] == 100
    for q in (line["put_us"], line["listener_us"]):
        assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"], line
    spec = store_probe.watch_spec(line)
    assert spec["p50"] >= 1 and list(spec.values()) == sorted(spec.values())
