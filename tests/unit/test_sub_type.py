"""The subscription type: an optional trace column on ``subscribe`` rows (old traces load, null
is Failover), a profile field, and the polling it picks in a replay (D19/D20)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.trace.trace import TraceWriter, read_events, validate
from bench.trace.workloads import Profile, generate, load_profile
from engine.errors import ConfigError, TraceError
from tests.unit.test_trace import T


def _write(path: Path, rows: list[dict[str, Any]], optional: tuple[str, ...] = ("sub_type",)) -> Path:
    with TraceWriter(path, optional=optional) as w:
        for r in rows:
            r = dict(r)
            w.add(r.pop("ts_us"), r.pop("op"), **r)
    return path


def _pinned(sub_type: str | None) -> list[dict[str, Any]]:
    """A txn pins the topic for 1 s while plain messages queue behind it."""
    rows: list[dict[str, Any]] = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s", "sub_type": sub_type},
        {"ts_us": 10_000, "op": "new_txn", "txn": "t1"},
        {"ts_us": 10_010, "op": "publish", "txn": "t1", "topic": T, "msg": "x", "size": 10},
    ]
    rows += [{"ts_us": 20_000 + i, "op": "publish", "topic": T, "msg": f"p{i}", "size": 10} for i in range(3)]
    rows.append({"ts_us": 1_010_000, "op": "commit", "txn": "t1"})
    return rows


def test_the_column_is_optional_and_checked(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.parquet", [{"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"}], ())
    assert "sub_type" not in pq.read_schema(old).names
    assert [e.sub_type for e in read_events(old)] == [None] and validate(old) == 1
    new = _write(tmp_path / "new.parquet", _pinned("Shared"))
    assert [e.sub_type for e in read_events(new)][0] == "Shared" and validate(new) == 7
    bad = _write(tmp_path / "bad.parquet", _pinned("Round_Robin"))
    with pytest.raises(TraceError, match="row 0: sub_type must be one of"):
        validate(bad)
    rows = _pinned(None)
    rows[1]["sub_type"] = "Shared"
    misplaced = _write(tmp_path / "misplaced.parquet", rows)
    with pytest.raises(TraceError, match="row 1: sub_type is for subscribe rows"):
        list(read_events(misplaced))
    with pytest.raises(TraceError, match="not opened with"):
        _write(tmp_path / "x.parquet", _pinned("Shared"), ())


def test_a_profile_names_the_type_and_the_trace_carries_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sub_type"):
        Profile.from_dict({"name": "x", "sub_type": "Round_Robin"})
    default = tmp_path / "default.parquet"
    generate(load_profile("small"), 200, 1, default)
    assert "sub_type" not in pq.read_schema(default).names  # Failover: the trace as before
    shared = tmp_path / "shared.parquet"
    generate(replace(load_profile("small"), sub_type="Key_Shared"), 200, 1, shared)
    subs = [e for e in read_events(shared) if e.op == "subscribe"]
    assert subs and {e.sub_type for e in subs} == {"Key_Shared"}


@pytest.mark.parametrize("engine", ["v4", "v5"])
def test_the_replay_polls_as_the_subscription_type_does(tmp_path: Path, engine: str) -> None:
    counts = {}
    for sub_type in (None, "Exclusive", "Shared"):
        trace = _write(tmp_path / f"{sub_type}.parquet", _pinned(sub_type))
        result = Replayer(RunConfig(engine=engine)).run(read_events(trace))
        assert sorted(result.deliveries["msg"]) == ["p0", "p1", "p2", "x"]
        counts[sub_type] = result.counts
    assert counts[None]["subscriptions.Failover"] == 1 and counts["Shared"]["subscriptions.Shared"] == 1
    failover, exclusive, shared = (counts[t]["dispatch.empty_reads"] for t in (None, "Exclusive", "Shared"))
    # blocked ~1 s: every 10 ms single-active, every 11-20 ms Shared (D19)
    assert failover == exclusive and 95 <= failover <= 110
    assert 45 <= shared <= 60


def test_an_untyped_subscription_takes_the_type_the_runs_client_gives_it(tmp_path: Path) -> None:
    """RunConfig.sub_types: what the broker's trace client makes of untyped subscriptions (v5's
    V5 SDK consumers, bench.pulsar.rows.v5_sdk_sub_types); the trace's own type comes first."""
    untyped = _write(tmp_path / "untyped.parquet", _pinned(None))
    typed = _write(tmp_path / "typed.parquet", _pinned("Exclusive"))
    client = ((T, "s", "Shared"),)
    runs = {(name, given): Replayer(RunConfig(engine="v5", sub_types=given)).run(read_events(trace)).counts
            for name, trace in (("untyped", untyped), ("typed", typed)) for given in ((), client)}
    assert runs[("untyped", ())]["subscriptions.Failover"] == 1
    assert runs[("untyped", client)]["subscriptions.Shared"] == 1
    assert runs[("typed", client)]["subscriptions.Exclusive"] == 1
    # blocked ~1 s: the client's Shared polls every 11-20 ms, not the default's 10 ms (D19)
    assert 45 <= runs[("untyped", client)]["dispatch.empty_reads"] <= 60
    assert 95 <= runs[("untyped", ())]["dispatch.empty_reads"] <= 110
    with pytest.raises(ConfigError, match="sub_types: .* s: unknown subscription type 'Round_Robin'"):
        RunConfig(sub_types=((T, "s", "Round_Robin"),))


def test_the_clients_types_go_through_the_manifest_and_back_to_a_spark_worker() -> None:
    import json

    from bench.scale.spark import _config_from_dict

    cfg = RunConfig(engine="v5", sub_types=((T, "s", "Shared"),))
    d = json.loads(json.dumps(cfg.as_dict()))
    assert d["sub_types"] == [[T, "s", "Shared"]]
    assert _config_from_dict(d).sub_types == ((T, "s", "Shared"),)
