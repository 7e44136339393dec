"""metrics.txt: valid OpenMetrics under Pulsar's and the PIP's names; served live on a port."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from bench.replay.config import RunConfig
from bench.replay.measure import Histograms
from bench.replay.openmetrics import LiveServer, live_source, render, result_families, run_families
from bench.replay.replay import Replayer
from bench.replay.runner import replay_trace
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("om")
    generate(load_profile("small"), 1200, 5, d / "trace.parquet")
    replay_trace(d / "trace.parquet", [RunConfig(engine="v4", drain_ms=5_000), RunConfig(engine="v5", drain_ms=5_000)],
                 d / "res")
    return d / "res"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):  # raises on anything that is not OpenMetrics
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_txt_parses_and_carries_the_runs_counts(results: Path) -> None:
    text = (results / "metrics.txt").read_text()
    assert text.rstrip().endswith("# EOF")
    samples = _samples(text)
    counts = json.loads((results / "counts.json").read_text())
    labels = {"v4": (("design", "v4"), ("engine", "v4")), "v5-shipped": (("design", "v5"), ("engine", "v5-shipped"))}
    for label, lab in labels.items():
        for key, value in counts[label].items():  # every exact count, under txnbench_count_total
            assert samples[("txnbench_count_total", tuple(sorted((*lab, ("count", key)))))] == value
    v4, v5 = labels["v4"], labels["v5-shipped"]
    # Pulsar's coordinator names (TransactionAggregator) for both designs
    assert samples[("pulsar_txn_committed_total", v4)] == counts["v4"]["tc.txns.committed"] > 0
    assert samples[("pulsar_txn_committed_total", v5)] == counts["v5-shipped"]["tc.ended.committed"] > 0
    assert samples[("pulsar_txn_append_log_total", v4)] == counts["v4"]["tc.log_appends"]
    assert samples[("pulsar_txn_tb_committed_total", v4)] == counts["v4"]["tb.markers.commit"]
    # the PIP's metadata-store names for v5 only; no pulsar_txn_tb_* for v5 (the PIP drops them)
    assert samples[("pulsar_txn_metadata_store_op_writes_total", v5)] == counts["v5-shipped"]["meta.op_writes"] > 0
    assert samples[("pulsar_txn_metadata_store_header_cas_total", tuple(sorted((*v5, ("result", "ok")))))] \
        == counts["v5-shipped"]["tc.header_cas.ok"]
    assert ("pulsar_txn_metadata_store_outstanding_op_records", v5) in samples
    assert ("pulsar_txn_metadata_store_index_query_seconds_count", v5) in samples  # the engine's own histogram
    assert not any(name.startswith("pulsar_txn_tb_") and lab == v5 for name, lab in samples)
    assert not any(name.startswith("pulsar_txn_metadata_store_") and lab[:2] == v4 for name, lab in samples)


def test_histograms_follow_latency_json(results: Path) -> None:
    samples = _samples((results / "metrics.txt").read_text())
    latency = json.loads((results / "latency.json").read_text())
    lab = (("design", "v4"), ("engine", "v4"))
    for name, s in latency["v4"].items():
        base = f"txnbench_{name[:-3]}_seconds"
        assert samples[(base + "_count", lab)] == s["count"] > 0
        assert samples[(base + "_sum", lab)] == pytest.approx(s["sum_us"] / 1e6)
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                         if k[0] == base + "_bucket" and dict(k[1])["engine"] == "v4")
        values = [v for _, v in buckets]
        assert values == sorted(values) and values[-1] == s["count"]  # cumulative, +Inf holds all


def test_buckets_count_values_at_or_below_their_bound() -> None:
    h = Histograms()
    for v in (50, 900, 1000, 4000, 2_000_000):
        h.record("end_txn_us", v)
    fams = run_families("x", "v4", {}, h.summary())
    samples = _samples(render(fams).decode())
    le = {dict(k[1])["le"]: v for k, v in samples.items() if k[0] == "txnbench_end_txn_seconds_bucket"}
    assert le["0.0001"] == 1 and le["0.001"] == 3 and le["0.005"] == 4 and le["1.0"] == 4 and le["2.5"] == 5
    assert le["+Inf"] == 5


def test_a_run_with_both_designs_is_one_family_per_name() -> None:
    counts = {"a": {"tc.txns.committed": 2}, "b": {"tc.ended.committed": 3}}
    runs = {"a": {"config": {"engine": "v4"}}, "b": {"config": {"engine": "v5"}}}
    text = render(result_families(runs, counts, {})).decode()
    assert text.count("# TYPE pulsar_txn_committed counter") == 1
    samples = _samples(text)
    assert samples[("pulsar_txn_committed_total", (("design", "v4"), ("engine", "a")))] == 2
    assert samples[("pulsar_txn_committed_total", (("design", "v5"), ("engine", "b")))] == 3


def _scrape(port: int) -> str:
    """GET /metrics as a Prometheus server asking for OpenMetrics does."""
    accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=accept)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def test_live_server_serves_a_running_replay(tmp_path: Path) -> None:
    generate(load_profile("small"), 400, 3, tmp_path / "t.parquet")
    server = LiveServer(0)
    try:
        replayer = Replayer(RunConfig(engine="v4", drain_ms=2_000))
        server.add(live_source(replayer, "v4"))
        from bench.trace.trace import read_events

        steps = replayer.steps(read_events(tmp_path / "t.parquet"), every=100)
        next(steps)  # mid-run: 100 events applied
        mid = _samples(_scrape(server.port))
        assert mid[("txnbench_count_total", (("count", "events.publish"), ("design", "v4"), ("engine", "v4")))] > 0
        for _ in steps:
            pass
        end = _samples(_scrape(server.port))
        assert end[("txnbench_count_total", (("count", "deliveries"), ("design", "v4"), ("engine", "v4")))] \
            == replayer.counts["deliveries"] > 0
        assert ("txnbench_backlog", (("design", "v4"), ("engine", "v4"))) in end
    finally:
        server.close()


def test_a_busy_port_is_one_clear_error() -> None:
    server = LiveServer(0)
    try:
        with pytest.raises(ConfigError, match=rf"--prometheus-port {server.port}: cannot listen"):
            LiveServer(server.port)
    finally:
        server.close()


def test_a_negative_count_is_a_gauge_not_a_counter() -> None:
    text = render(run_families("pulsar-v4", "v4", {"ledger.bytes.marker": -3, "deliveries": 4})).decode()
    samples = _samples(text)  # the parser refuses a negative counter: this one parses
    assert samples[("txnbench_count_signed", (("count", "ledger.bytes.marker"), ("design", "v4"), ("engine", "pulsar-v4")))] == -3
    assert samples[("txnbench_count_total", (("count", "deliveries"), ("design", "v4"), ("engine", "pulsar-v4")))] == 4


def test_recorded_buckets_are_what_hdrs_recorded_iterator_yields() -> None:
    """``_recorded`` finds the non-empty buckets with numpy; hdrh's own iterator is the oracle."""
    from hdrh.histogram import HdrHistogram

    from bench.replay.openmetrics import _recorded

    h = HdrHistogram(1, 3_600_000_000, 3)
    for v in (1, 2, 2, 999, 1_000, 1_001, 65_536, 1_234_567, 3_599_999_999):
        h.record_value(v)
    expected = [(i.value_iterated_to, i.count_at_value_iterated_to) for i in h.get_recorded_iterator()]
    assert _recorded(h) == expected and sum(c for _, c in expected) == 9
    assert _recorded(HdrHistogram(1, 1000, 2)) == []
