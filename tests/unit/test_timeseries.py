"""The per-second time series: sums to the run's counts, deterministic, merges across shards;
wall-time pacing and the mixed-backend refusal (bench.replay.walltime)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench.cli import main
from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.replay.runner import replay_trace
from bench.replay.timeseries import Series, merge_rows, table
from bench.trace.trace import read_events
from bench.replay.walltime import BEHIND_US, Pacing, mixed_backends, refuse_mixed
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ts") / "trace.parquet"
    generate(load_profile("small"), 1500, 7, path)
    return path


@pytest.mark.parametrize("engine", ["v4", "v5"])
def test_series_sums_to_the_runs_counts(trace: Path, engine: str) -> None:
    result = Replayer(RunConfig(engine=engine, drain_ms=5_000)).run(read_events(trace))
    rows = result.series
    t = table(rows).to_pydict()
    publishes = sum(result.latency[k]["count"] for k in ("publish_nontxn_us", "publish_txn_us") if k in result.latency)
    assert sum(t["publish_count"]) == publishes == result.counts["events.publish"] > 0
    assert sum(t["consume_count"]) == result.counts["deliveries"] > 0
    assert sum(t["commit_count"]) == result.counts["txns.committed"] > 0
    assert sum(t["abort_count"]) == result.counts["txns.aborted"] > 0
    assert sum(t["blocked_ms"]) * 1000 == result.counts["dispatch.blocked_us"] > 0
    # windows are contiguous, one per second of the run's clock, through its end
    assert t["window_start_us"] == [i * 1_000_000 for i in range(len(rows))]
    assert t["window_start_us"][-1] <= result.virtual_end_us < t["window_start_us"][-1] + 1_000_000
    assert all(r == c for r, c in zip(t["publish_per_s"], t["publish_count"]))  # 1 s windows
    assert t["backlog"][-1] == result.counts["undelivered_at_end"]
    busy = t["publish_count"].index(max(t["publish_count"]))
    assert t["publish_latency_p50_ms"][busy] <= t["publish_latency_p99_ms"][busy] <= t["publish_latency_max_ms"][busy]


def test_series_is_deterministic_in_virtual_time(trace: Path) -> None:
    a = Replayer(RunConfig(engine="v5", drain_ms=2_000)).run(read_events(trace))
    b = Replayer(RunConfig(engine="v5", drain_ms=2_000)).run(read_events(trace))
    assert table(a.series).equals(table(b.series))


def test_series_does_not_change_the_run(trace: Path) -> None:
    """Closing windows steps the clock to each window's end: nothing else may change."""
    cfg = RunConfig(engine="v4", drain_ms=3_000)
    with_series = Replayer(cfg).run(read_events(trace))
    plain = Replayer(cfg)
    plain._advance = lambda when_us: 2**62  # type: ignore[method-assign] # never close a window mid-run
    without = plain.run(read_events(trace))
    assert with_series.counts == without.counts
    assert with_series.latency == without.latency


def _gauges(values: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
    it = iter(values)
    return lambda: next(it)


def test_windows_and_merge_of_shards() -> None:
    a = Series("v4", _gauges([(3, 100), (1, 250)]))
    a.count("publish", 2)
    a.latency("publish", 1000)
    a.latency("publish", 3000)
    a.close()
    a.count("consume")
    a.finish(1_500_000)
    b = Series("v4", _gauges([(2, 0)]))
    b.count("publish")
    b.latency("publish", 5000)
    b.finish(10)
    merged = table(merge_rows([a.rows, b.rows])).to_pydict()
    assert merged["window_start_us"] == [0, 1_000_000]
    assert merged["publish_count"] == [3, 0]
    assert merged["consume_count"] == [0, 1]
    assert merged["backlog"] == [5, 1]
    assert merged["blocked_ms"] == [0.1, 0.15]
    assert merged["publish_latency_max_ms"][0] == pytest.approx(5.0, rel=1e-3)
    assert merged["publish_latency_p50_ms"][0] == pytest.approx(3.0, rel=1e-3)
    assert merged["publish_latency_p50_ms"][1] is None


# -- wall time ------------------------------------------------------------------------------------


def test_mixed_backends_are_refused_in_wall_time_unless_allowed() -> None:
    v4 = RunConfig(engine="v4", metadata_url="redis://127.0.0.1:1", time_mode="wall")
    v5 = RunConfig(engine="v5", metadata_url="redis://127.0.0.1:1", time_mode="wall")
    with pytest.raises(ConfigError, match=r"mixed backends in wall time: v4 on memory:// \(in-memory\).*--allow-mixed"):
        refuse_mixed([v4, v5], allow_mixed=False)
    assert "redis://" in (refuse_mixed([v4, v5], allow_mixed=True) or "")
    # like with like: both engines on real services, one engine alone, or virtual time
    real: dict[str, Any] = dict(ledger_url="kafka://127.0.0.1:1", metadata_url="redis://127.0.0.1:1", time_mode="wall")
    assert mixed_backends([RunConfig(engine="v4", **real), RunConfig(engine="v5", **real)]) is None
    assert mixed_backends([v5]) is None
    assert mixed_backends([RunConfig(engine="v4", metadata_url="redis://x:1"),
                           RunConfig(engine="v5", metadata_url="redis://x:1")]) is None
    # a real ledger with in-memory metadata: v5's transaction state is free, v4's is not
    half: dict[str, Any] = dict(ledger_url="kafka://127.0.0.1:1", time_mode="wall")
    assert mixed_backends([RunConfig(engine="v4", **half), RunConfig(engine="v5", **half)]) is not None


def test_cli_refuses_mixed_backends_before_writing(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res"
    code = main(["replay", "--trace", str(trace), "--engine", "both", "--metadata", "redis://127.0.0.1:1",
                 "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "mixed backends in wall time" in err and "--allow-mixed" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_pacing_records_offered_achieved_and_lag() -> None:
    p = Pacing()
    for ts, now in ((0, 50), (500_000, 500_100), (1_000_000, 1_300_000)):
        p.issued(ts, now)
    r = p.rates()
    assert r["offered_rows_per_s"] == 3.0  # 3 rows over the trace's 1 s
    assert r["achieved_rows_per_s"] == round(3 / 1.29995, 1)
    assert r["max_lag_us"] == 300_000 > BEHIND_US and r["fell_behind"] is True


def test_a_wall_time_run_records_its_pace(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 300, 2, trace)
    manifest = replay_trace(trace, [RunConfig(engine="v4", time_mode="wall", drain_ms=200)], tmp_path / "res")
    run = json.loads((tmp_path / "res" / "manifest.json").read_text())["runs"]["v4"]
    assert run == manifest["runs"]["v4"]
    rates = run["rates"]
    assert rates["offered_rows_per_s"] > 0 and rates["achieved_rows_per_s"] > 0
    assert run["max_lag_us"] == rates["max_lag_us"] >= 0
    assert rates["fell_behind"] == (rates["max_lag_us"] > BEHIND_US)
    series = pq.read_table(tmp_path / "res" / "timeseries.parquet").to_pydict()
    counts = json.loads((tmp_path / "res" / "counts.json").read_text())["v4"]
    assert sum(series["publish_count"]) == counts["events.publish"]
    # virtual runs have no pace to report
    replay_trace(trace, [RunConfig(engine="v4", drain_ms=200)], tmp_path / "virt")
    assert "rates" not in json.loads((tmp_path / "virt" / "manifest.json").read_text())["runs"]["v4"]


def test_rows_applied_one_by_one_fill_the_same_windows(tmp_path: Path) -> None:
    """A caller that applies rows itself (the Kafka stream) gets the same per-window counts:
    a sample past the open window's end closes it."""
    trace = tmp_path / "long.parquet"
    generate(load_profile("small"), 6000, 3, trace)  # about 2.4 s of trace time
    cfg = RunConfig(engine="v4", drain_ms=4_000)
    stepped = table(Replayer(cfg).run(read_events(trace)).series).to_pydict()
    r = Replayer(cfg)
    last = 0
    for e in read_events(trace):
        r.apply(e)
        last = e.ts_us
    r.sched.run_until(last + cfg.drain_ms * 1000)
    applied = table(r._result(0, 0.0).series).to_pydict()
    r.broker.close()
    r.setup.close()
    for col in ("window_start_us", "publish_count", "consume_count", "commit_count", "abort_count",
                "end_to_end_latency_p99_ms"):
        assert applied[col] == stepped[col], col
    assert sum(1 for n in applied["consume_count"] if n) > 1


def test_rows_applied_one_by_one_in_wall_time_record_their_pace(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 200, 4, trace)
    r = Replayer(RunConfig(engine="v4", time_mode="wall", drain_ms=0))
    rows = list(read_events(trace))
    for e in rows:
        r.apply(e)
    result = r._result(len(rows), 0.0)
    r.broker.close()
    r.setup.close()
    assert result.rates is not None and result.rates["max_lag_us"] >= 0
    assert result.rates["offered_rows_per_s"] == round(len(rows) / ((rows[-1].ts_us - rows[0].ts_us) / 1e6), 1)


def test_a_broker_runs_series_comes_from_its_client_events() -> None:
    from bench.pulsar.fold import EventFold
    from bench.pulsar.series import broker_series
    from tests.unit.test_pulsar_fold import EVENTS, ROWS, B, T

    f = EventFold("v4", ROWS, {B: T}, trace_span_us=10_000)
    for ev in EVENTS:
        f.feed(ev)
    f.finish()
    t = table(broker_series(f, window_us=1000)).to_pydict()
    # worked out by hand from EVENTS: answers at 400/700/3600 (publish), 3000 (commit), 4500 (abort),
    # 5100 (a failed commit); deliveries at 500, 2500, 6000 (m0 again)
    assert t["window_start_us"] == [0, 1000, 2000, 3000, 4000, 5000, 6000]
    assert t["publish_count"] == [2, 0, 0, 1, 0, 0, 0]
    assert t["consume_count"] == [1, 0, 1, 0, 0, 0, 1]
    assert t["commit_count"] == [0, 0, 0, 1, 0, 0, 0]
    assert t["abort_count"] == [0, 0, 0, 0, 1, 0, 0]
    # m0 (sent 100, first delivered 500) and m1 (sent 200 in t0, committed; delivered 2500); m2 aborted
    assert t["backlog"] == [1, 1, 0, 0, 0, 0, 0]
    assert t["end_to_end_latency_max_ms"][0] == pytest.approx(0.4, rel=1e-3)
    assert t["end_to_end_latency_max_ms"][2] == pytest.approx(2.3, rel=1e-3)
    assert t["end_txn_latency_max_ms"][3:6] == pytest.approx([2.0, 0.5, 0.1], rel=1e-3)
    assert t["blocked_ms"] == [None] * 7  # not observable from outside the broker
