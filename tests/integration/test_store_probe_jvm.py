"""The store probe (jvm/src/txnbench/probe, bench.calibrate.store_probe) with the broker's real
classes: the store it builds is laid out as the model's emulated store assumes (one sequence
counter per txn the store has held, beside the live op records), and its figures reach a profile."""

from __future__ import annotations

import pytest

from bench.calibrate import store_probe
from tests.conftest import PulsarBroker

pytestmark = pytest.mark.pulsar


def test_the_probe_scans_the_brokers_own_store_layout(pulsar: PulsarBroker) -> None:
    got = store_probe.measure(histories=(200, 800), lives=(1, 50), repeats=10)
    runs = {(r["history"], r["live"]): r for r in got["runs"]}
    assert set(runs) == {(200, 1), (200, 50), (800, 1), (800, 50)}
    for (history, live), r in runs.items():
        # TxnMetadataStore.appendOp's counter stays when its record is deleted: the listing holds both
        assert r["children"] == history + live, r
        assert r["scanned"] == 1  # listOpsByTxn streams the scanned txn's one op record, of all it GETs
        q = r["store_get_us"]
        assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"], r
        assert r["scan_us"] > 0 and r["list_us"] > 0
    assert got["scan_get_from"] == {"history": 800, "live": 50}
    assert got["scan_get_us"] == runs[(800, 50)]["store_get_us"]
    spec = store_probe.scan_get_spec(got)
    assert spec["p50"] >= 1 and list(spec.values()) == sorted(spec.values())
