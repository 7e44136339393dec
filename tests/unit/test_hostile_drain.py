"""Issue 20, the drain: a run that ends with messages undelivered or committed txns not visible
says so and exits 1; --drain-max-ms extends the drain until the system is quiescent; the
model's default virtual-time results do not change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.trace.trace import TraceWriter, read_events
from engine.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
T = "persistent://public/bench/t0"


def _trace(path: Path) -> Path:
    """A txn committed by the last row: its messages become visible only after the commit's
    modelled round trips (virtual time), i.e. during the drain."""
    with TraceWriter(path) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        w.add(10, "new_txn", txn="t1", timeout_ms=60_000)
        w.add(20, "publish", txn="t1", topic=T, msg="m1", size=10)
        w.add(30, "publish", topic=T, msg="m2", size=10)
        w.add(40, "commit", txn="t1")
    return path


@pytest.mark.parametrize("engine", ["v4", "v5"])
def test_a_short_drain_leaves_work_in_flight_and_the_extension_waits_for_it(tmp_path: Path, engine: str) -> None:
    trace = _trace(tmp_path / "t.parquet")
    short = Replayer(RunConfig(engine=engine, drain_ms=0)).run(read_events(trace))
    # m1 waits for t1's new_txn answer and m2 for m1 (one producer per topic), the commit for both
    assert short.in_flight == {"undelivered": 0, "committed_not_visible": 0, "ending_txns": 1, "unsent": 2}
    extended = Replayer(RunConfig(engine=engine, drain_ms=0, drain_max_ms=60_000)).run(read_events(trace))
    assert extended.in_flight == {"undelivered": 0, "committed_not_visible": 0, "ending_txns": 0, "unsent": 0}
    assert 0 < extended.drained_us < 60_000_000  # stopped once quiescent, not at the bound
    assert extended.counts["deliveries"] == 2


def test_default_drain_is_unchanged_and_quiescent(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    r = Replayer(RunConfig(engine="v5")).run(read_events(trace))
    assert r.drained_us == 70_000_000 and not any(r.in_flight.values())


def test_drain_max_below_drain_is_refused() -> None:
    with pytest.raises(ConfigError, match="drain_max_ms"):
        RunConfig(drain_ms=100, drain_max_ms=10)


def test_cli_says_so_and_exits_1_when_not_quiescent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = tmp_path / "out"
    code = main(["replay", "--trace", str(trace), "--engine", "v4", "--drain-ms", "0", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "v4: not quiescent" in err and "1 txns still ending, 2 rows not sent yet" in err, err
    drain = json.loads((out / "manifest.json").read_text())["runs"]["v4"]["drain"]
    assert drain["quiescent"] is False and drain["in_flight"]["ending_txns"] == 1
    code = main(["replay", "--trace", str(trace), "--engine", "v4", "--drain-ms", "0", "--drain-max-ms", "60000",
                 "--no-progress", "--out", str(tmp_path / "out2")])
    assert code == 0, capsys.readouterr().err


def test_v4_on_sealed_segments_reports_the_txns_it_never_makes_visible(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # the sample trace where v4 cannot write commit markers to sealed segments: exit 0 hid it
    code = main(["replay", "--trace", str(ROOT / "datasets" / "samples" / "sealed-segments.parquet"), "--engine", "both",
                 "--no-progress", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "v4: not quiescent" in err and "v5" not in err, err


def test_the_warning_names_the_remedy_by_time_mode() -> None:
    from bench.replay.runner import not_quiescent

    drain = {"ran_ms": 5000, "quiescent": False, "in_flight": {"undelivered": 71, "committed_not_visible": 13}}
    wall, virtual = (not_quiescent({"runs": {"v4": {"time_mode": mode, "drain": drain}}}) for mode in ("wall", "virtual"))
    assert wall == ["v4: not quiescent after draining 5000 ms: 71 messages undelivered, 13 committed txns not visible, "
                    "0 txns still ending (results are incomplete; raise --drain-max-ms)"]
    assert "never delivers them" in virtual[0]
    assert not_quiescent({"runs": {"v4": {"drain": {**drain, "quiescent": True}}}}) == []
