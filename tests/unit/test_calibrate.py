"""``txnbench calibrate`` against the suite's Redis, with a few samples: a loadable profile whose
metadata kinds are measured distributions, the others kept from the constants and said so, and
nothing left behind on the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibrate import calibrate as cal
from bench.cli import main
from engine.clock import DEFAULT_LATENCIES_US
from engine.profile import LatencyProfile


def test_percentiles_are_nearest_rank_values_that_were_seen() -> None:
    got = cal.percentiles(list(range(1, 1001)))
    assert got == {"p0": 1, "p50": 500, "p90": 900, "p99": 990, "p999": 999, "max": 1000}


def test_calibrate_redis_writes_a_profile_of_the_metadata_operations(redis_url: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import redis as redislib

    monkeypatch.setattr(cal, "SWEEP_S", 0.05)
    monkeypatch.setattr(cal, "WARMUP", 2)
    out = tmp_path / "r.json"
    assert main(["calibrate", "--redis", redis_url, "--samples", "12", "--out", str(out)]) == 0
    prof = LatencyProfile.load(out)
    assert prof.name == "redis-local" and prof.provenance["samples"] == 12 and prof.provenance["versions"]["redis"]
    for kind in ("meta.read", "meta.write", "meta.cas", "meta.list", "meta.watch"):
        d = prof.operations[kind]
        assert not d.is_constant and 0 < d.points[0][1] <= d.nominal_us <= d.points[-1][1], kind
        assert f"{kind} [redis]:" in prof.provenance["notes"]
    for kind in ("ledger.append", "rpc"):
        assert prof.operations[kind].points == ((0.5, DEFAULT_LATENCIES_US[kind]),)
    assert "kept from constants" in prof.provenance["notes"] and "ledger.append" in prof.provenance["notes"]
    assert prof.resources["metadata"].concurrency == 1 and prof.resources["metadata"].service_us >= 1
    assert "calibrate --redis" in prof.provenance["command"] or prof.provenance["command"] == "txnbench calibrate"
    assert "meta.read" in capsys.readouterr().out
    assert not redislib.Redis.from_url(redis_url).keys("txnbench-calib-*")  # purged
    assert json.loads(out.read_text())["operations"]["meta.pipelined"]["constant"] >= 1


def test_calibrate_without_a_backend_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--out", str(tmp_path / "x.json")]) == 2
    assert "at least one of --redis" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
