"""The real Pulsar 5 broker as a replay target: the same small traces through both designs on
the broker and through the models give the same deliveries, per-subscription order and txn
outcomes; a plain message behind an open txn waits for it on both paths; bad input is one line.

Needs a broker (``scripts/pulsar.sh start DIR``; env ``TXNBENCH_PULSAR_URL``,
``TXNBENCH_PULSAR_ADMIN_URL``, ``TXNBENCH_PULSAR_DIR``): skips without one, fails when
``TXNBENCH_REQUIRE`` includes ``pulsar``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.cli import main
from bench.config import RunConfig
from bench.model_vs_broker import agreement
from bench.pulsar.run import pulsar_check, pulsar_replay
from bench.pulsar.target import PulsarTarget, parse_target
from bench.runner import replay_trace
from bench.trace import TraceWriter
from tests.conftest import service_url

pytestmark = pytest.mark.pulsar

SAMPLES = Path(__file__).resolve().parents[2] / "datasets" / "samples"
P0 = "persistent://public/bench/t0-partition-0"


@pytest.fixture(scope="module")
def target() -> PulsarTarget:
    url = service_url("pulsar")
    # short drains: these traces end with nothing in flight after a second or two
    return parse_target(url, os.environ.get("TXNBENCH_PULSAR_ADMIN_URL"), "trace",
                        os.environ.get("TXNBENCH_PULSAR_DIR"), drain_ms=5_000)


def _prefix(src: Path, rows: int, out: Path) -> Path:
    """The first ``rows`` rows of a sample: a valid trace (rows only refer to earlier rows)."""
    table = pq.read_table(src).slice(0, rows)
    pq.write_table(table, out)
    return out


def _blocking_trace(path: Path) -> Path:
    """A plain message stored behind an open txn's message on the same partition."""
    with TraceWriter(path, metadata={"profile": "blocking", "seed": "0"}) as w:
        w.add(0, "subscribe", topic=P0, subscription="s")
        w.add(100_000, "new_txn", txn="t0")
        w.add(150_000, "publish", txn="t0", topic=P0, msg="m0", size=10)
        w.add(200_000, "publish", topic=P0, msg="m1", size=10)
        w.add(700_000, "commit", txn="t0")
        w.add(800_000, "publish", topic=P0, msg="m2", size=10)
    return path


def _model(trace: Path, out: Path) -> dict[str, str]:
    manifest = replay_trace(trace, [RunConfig(engine="v4"), RunConfig(engine="v5")], out)
    return {run["config"]["engine"]: label for label, run in manifest["runs"].items()}


@pytest.mark.parametrize("sample", ["small", "omb-1-topic-16-partitions-1kb"])
def test_sample_prefix_agrees_with_the_models(tmp_path: Path, target: PulsarTarget, sample: str) -> None:
    trace = _prefix(SAMPLES / f"{sample}.parquet", 300, tmp_path / "t.parquet")
    labels = _model(trace, tmp_path / "model")
    manifest = pulsar_replay(trace, ["v4", "v5"], target, tmp_path / "broker")
    assert manifest["target"]["version"].startswith("5.")
    for design in ("v4", "v5"):
        run = manifest["runs"][design]
        assert run["target"] == "pulsar" and run["config"]["engine"] == design
        a = agreement(tmp_path / "model", labels[design], tmp_path / "broker", design)
        assert a.delivered_pairs[0] > 0
        assert a.delivered_equal, (design, a.only_model, a.only_broker)
        assert a.order_equal, (design, a.order_example)
        assert a.outcomes_equal, (design, a.outcome_examples)
    counts = json.loads((tmp_path / "broker" / "counts.json").read_text())
    assert counts["v4"]["tc.log_appends"] > 0  # the v4 coordinator logs every txn
    assert counts["v5"]["meta.writes"] > counts["v5"]["txns.started"]  # v5 keeps txns in the metadata store


def test_a_message_behind_an_open_txn_waits_for_it_on_both_paths(tmp_path: Path, target: PulsarTarget) -> None:
    trace = _blocking_trace(tmp_path / "t.parquet")
    labels = _model(trace, tmp_path / "model")
    pulsar_replay(trace, ["v4", "v5"], target, tmp_path / "broker")
    for where, per_design in (("model", labels), ("broker", {"v4": "v4", "v5": "v5"})):
        d = pq.read_table(tmp_path / where / "deliveries.parquet").to_pylist()
        t = pq.read_table(tmp_path / where / "txns.parquet").to_pylist()
        for design, label in per_design.items():
            first = {}
            for r in sorted((r for r in d if r["engine"] == label), key=lambda r: r["delivered_ts_us"]):
                first.setdefault(r["msg"], r["delivered_ts_us"])
            (txn,) = [r for r in t if r["engine"] == label]
            assert txn["outcome"] == "committed"
            assert list(first) == ["m0", "m1", "m2"], (where, design)
            # m1 was sent 500 ms before the commit, and still came after it was asked for
            assert first["m1"] >= txn["commit_requested_ts_us"], (where, design, first, txn)


def test_check_runs_the_checker_on_the_brokers_history(tmp_path: Path, target: PulsarTarget) -> None:
    summary = pulsar_check(_blocking_trace(tmp_path / "t.parquet"), ["v4", "v5"], target)
    j = summary.to_json()
    assert j["histories"] == 2 and j["deliveries"] == 6 and j["total_violations"] == 0, j


def test_bad_input_is_one_line_with_nothing_written(tmp_path: Path, target: PulsarTarget, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.parquet"
    with TraceWriter(trace) as w:
        w.add(0, "subscribe", topic=P0, subscription="s")
        w.add(5, "crash_tc")
    out = tmp_path / "res"
    code = main(["replay", "--trace", str(trace), "--target", target.service_url, "--admin-url", target.admin_url,
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "row 1" in err and "crash_tc" in err
    code = main(["replay", "--trace", str(_blocking_trace(tmp_path / "b.parquet")), "--target", "pulsar://127.0.0.1:1",
                 "--admin-url", "http://127.0.0.1:1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "unreachable" in err
    assert not out.exists() and not list(tmp_path.glob(".res*"))
