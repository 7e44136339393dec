"""bench.trace.repeated: a trace's rows N times over, each pass with its own txn and message ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pulsar.validate_run import groups, repeats_for, saturation_traces
from bench.trace.repeated import write_repeated
from bench.trace.trace import TraceWriter, read_events, trace_metadata, validate
from engine.errors import TraceError

T = "persistent://public/default/t-partition-0"


def _trace(path: Path, *, crash: bool = False) -> Path:
    with TraceWriter(path, metadata={"profile": "hand", "seed": "7"}, optional=("sub_type",)) as w:
        w.add(0, "subscribe", topic=T, subscription="s", sub_type="Shared")
        w.add(10, "new_txn", txn="t0", timeout_ms=5000)
        w.add(20, "publish", txn="t0", topic=T, msg="m0", size=8)
        w.add(30, "publish", topic=T, msg="p0", size=8, key="k")
        w.add(40, "commit", txn="t0")
        w.add(50, "ack", topic=T, msg="m0", subscription="s", ack_kind="individual")
        if crash:
            w.add(60, "crash_broker")
        w.add(90, "ack", topic=T, msg="p0", subscription="s", ack_kind="cumulative")
    return path


def test_each_pass_has_its_own_ids_after_the_last_and_subscribes_once(tmp_path: Path) -> None:
    src = _trace(tmp_path / "t.parquet")
    out = write_repeated(src, tmp_path / "r.parquet", 3)
    assert validate(out) == 1 + 3 * 6
    rows = list(read_events(out))
    assert [e.op for e in rows].count("subscribe") == 1
    assert [e.txn for e in rows if e.op == "new_txn"] == ["t0", "t0.r1", "t0.r2"]
    assert [e.msg for e in rows if e.op == "ack"] == ["m0", "p0", "m0.r1", "p0.r1", "m0.r2", "p0.r2"]
    assert [e.ts_us for e in rows if e.op == "commit"] == [40, 40 + 91, 40 + 2 * 91]  # after the last row (90)
    second = [e for e in rows if e.txn == "t0.r1" or (e.msg or "").endswith(".r1")]
    first = [e for e in rows[1:7]]
    # every other column is the first pass's
    assert [e._replace(row=0, ts_us=0, txn=None, msg=None) for e in second] == \
           [e._replace(row=0, ts_us=0, txn=None, msg=None) for e in first]
    assert rows[0].sub_type == "Shared" and trace_metadata(out) == {"profile": "hand", "seed": "7", "repeated": "3"}


def test_once_is_the_trace_itself(tmp_path: Path) -> None:
    src = _trace(tmp_path / "t.parquet")
    out = write_repeated(src, tmp_path / "r.parquet", 1)
    assert [e._replace(row=0) for e in read_events(out)] == [e._replace(row=0) for e in read_events(src)]


def test_a_row_that_changes_the_cluster_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    src = _trace(tmp_path / "t.parquet", crash=True)
    with pytest.raises(TraceError, match=r"t\.parquet: row 6: a crash_broker row cannot be repeated"):
        write_repeated(src, tmp_path / "r.parquet", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_validate_replays_such_a_trace_once_and_says_so(tmp_path: Path) -> None:
    said: list[str] = []
    src = _trace(tmp_path / "t.parquet", crash=True)
    assert saturation_traces(src, tmp_path, {"v4": 4, "v5": 1}, said.append) == {"v4": src, "v5": src}
    assert said == ["saturation: the trace's rows once (row 6 is a crash_broker, which cannot repeat)"]


def test_each_design_gets_the_passes_a_one_second_phase_needs(tmp_path: Path) -> None:
    """validate's asap runs: passes = the txn phase wanted x the first warm-up run's rate / the
    trace's txns, at least 1 (v5: slow enough already), at most 32; 1 where no rate was measured."""
    assert repeats_for({"v4": 700.0, "v5": 95.0}, 100) == {"v4": 7, "v5": 1}
    assert repeats_for({"v4": 701.0, "v5": 0.0}, 100) == {"v4": 8, "v5": 1}
    assert repeats_for({"v4": 1e9, "v5": 250.0}, 100, phase_s=1.0) == {"v4": 32, "v5": 3}
    assert repeats_for({}, 100) == {"v4": 1, "v5": 1}
    plain = _trace(tmp_path / "plain.parquet")
    traces = saturation_traces(plain, tmp_path, {"v4": 4, "v5": 1})
    assert traces == {"v4": tmp_path / "saturation-trace-x4.parquet", "v5": plain}
    assert validate(traces["v4"]) == 1 + 4 * 6
    # one set per design when their traces differ, else one set of both
    assert groups(traces) == [(traces["v4"], ["v4"], "-v4"), (plain, ["v5"], "-v5")]
    assert groups({"v4": plain, "v5": plain}) == [(plain, ["v4", "v5"], "")]
    assert saturation_traces(plain, tmp_path, {"v4": 1, "v5": 1}) == {"v4": plain, "v5": plain}
