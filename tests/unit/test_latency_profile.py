"""Latency profiles as data (engine.profile): the file format and its errors, deterministic
sampling, byte-identical results with the shipped constants, the manifest record and the A/B
refusal between runs modelled with different profiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.config import RunConfig
from bench.runner import replay_trace
from bench.trace import TraceWriter
from engine.clock import DEFAULT_LATENCIES_US, Distribution, LatencyModel
from engine.errors import ConfigError
from engine.profile import LATENCY_DIR, LatencyProfile

T = "persistent://public/p/t0-partition-0"


def _ops(**changed: object) -> dict[str, object]:
    ops: dict[str, object] = {k: {"constant": v} for k, v in DEFAULT_LATENCIES_US.items()}
    ops.update(changed)
    return ops


SPREAD = {"p0": 400, "p50": 900, "p90": 1500, "p99": 4000, "max": 9000}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lp") / "t.parquet"
    with TraceWriter(path, metadata={"profile": "hand", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        for i in range(4):
            w.add(10 + 100 * i, "new_txn", txn=f"t{i}")
            w.add(20 + 100 * i, "publish", txn=f"t{i}", topic=T, msg=f"x{i}", size=1)
            w.add(30 + 100 * i, "publish", topic=T, msg=f"p{i}", size=1)
            w.add(40 + 100 * i, "commit", txn=f"t{i}")
    return path


def test_the_shipped_constants_file_is_what_the_code_writes_and_loads_back_equal(tmp_path: Path) -> None:
    built = LatencyProfile.constants()
    shipped = LatencyProfile.load(LATENCY_DIR / "constants.json")
    assert (LATENCY_DIR / "constants.json").read_text() == built.to_text()
    assert shipped.sha256 == built.sha256 and shipped.operations == built.operations
    assert shipped.to_latency_model().latencies_us == DEFAULT_LATENCIES_US
    prof = LatencyProfile.from_json({"name": "x", "operations": _ops(**{"ledger.append": SPREAD}),
                                     "resources": {"bookie": {"service_us": 200, "concurrency": 2}}})
    again = LatencyProfile.load(prof.save(tmp_path / "x.json").path or "")
    assert again.operations == prof.operations and again.resources == prof.resources
    assert again.to_latency_model().resources["bookie"].concurrency == 2


@pytest.mark.parametrize("data, key", [
    ({"name": "b", "operations": _ops(**{"ledger.bogus": {"constant": 1}})}, "operations.ledger.bogus"),
    ({"name": "b", "operations": {k: v for k, v in _ops().items() if k != "meta.cas"}}, "operations.meta.cas"),
    ({"name": "b", "operations": _ops(**{"rpc": {"p90": 5, "max": 9}})}, "operations.rpc.p50"),
    ({"name": "b", "operations": _ops(**{"rpc": {"p50": 50, "p90": 40}})}, "operations.rpc.p90"),
    ({"name": "b", "operations": _ops(**{"rpc": {"constant": -1}})}, "operations.rpc.constant"),
    ({"name": "b", "operations": _ops(), "resources": {"bookie": {"service_us": 1, "concurrency": 0}}},
     "resources.bookie.concurrency"),
])
def test_a_bad_profile_is_one_config_error_naming_the_file_and_the_key(tmp_path: Path, data: object, key: str) -> None:
    path = _write(tmp_path / "bad.json", data)
    with pytest.raises(ConfigError) as err:
        LatencyProfile.load(path)
    assert str(path) in str(err.value) and f"{key}:" in str(err.value)


def test_percentiles_are_sampled_by_inverse_cdf_with_linear_interpolation() -> None:
    d = Distribution(((0.0, 400), (0.5, 900), (0.9, 1500), (1.0, 9000)))
    assert [d.at(u) for u in (0.0, 0.25, 0.5, 0.7, 0.95)] == [400, 650, 900, 1200, 5250]
    clamped = Distribution(((0.5, 900), (0.9, 1500)))  # no p0 / max: no invented tails
    assert clamped.at(0.1) == 900 and clamped.at(0.99) == 1500


def test_draws_are_per_seed_and_kind_and_one_kind_does_not_shift_another() -> None:
    prof = LatencyProfile.from_json({"name": "d", "operations": _ops(**{"ledger.append": SPREAD, "meta.cas": SPREAD})})
    m = prof.to_latency_model(seed=7)
    first = [m.of("ledger.append") for _ in range(50)]
    again = m.fresh()
    interleaved = []
    for _ in range(50):
        again.of("meta.cas")
        interleaved.append(again.of("ledger.append"))
    assert interleaved == first and len(set(first)) > 10 and all(400 <= v <= 9000 for v in first)
    assert [prof.to_latency_model(seed=8).of("ledger.append") for _ in range(50)] != first
    assert m.of("rpc") == 200  # constants draw nothing
    assert m.with_overrides(ledger_append=5).of("ledger.append") == 5


def _result(trace: Path, out: Path, latency: LatencyModel, profile: LatencyProfile | None) -> Path:
    # a short drain: the trace's txns end within its 400 µs, and the default 70 s of polling costs CPU
    replay_trace(trace, [RunConfig(engine=e, latency=latency, latency_profile=profile, drain_ms=2_000)
                         for e in ("v4", "v5")], out)
    return out


def test_constants_file_gives_byte_identical_results_and_a_distribution_is_seeded(trace: Path, tmp_path: Path) -> None:
    builtin = _result(trace, tmp_path / "builtin", LatencyModel(), None)
    shipped = LatencyProfile.load(LATENCY_DIR / "constants.json")
    from_file = _result(trace, tmp_path / "file", shipped.to_latency_model(), shipped)
    for name in ("counts.json", "latency.json", "deliveries.parquet", "txns.parquet"):
        assert (builtin / name).read_bytes() == (from_file / name).read_bytes(), name
    rec = json.loads((from_file / "manifest.json").read_text())["runs"]["v4"]["config"]["latency_profile"]
    assert rec["name"] == "constants" and rec["sha256"] == shipped.sha256 and rec["path"].endswith("constants.json")

    wide = LatencyProfile.from_json({"name": "wide", "operations": _ops(**{k: SPREAD for k in ("ledger.append", "rpc", "meta.cas")})})
    runs = [_result(trace, tmp_path / f"s{seed}-{i}", wide.to_latency_model(seed), wide)
            for i, seed in enumerate((1, 1, 2))]
    lat = [(r / "latency.json").read_bytes() for r in runs]
    assert lat[0] == lat[1] and lat[0] != lat[2] and lat[0] != (builtin / "latency.json").read_bytes()
    import pyarrow.parquet as pq

    got = [set(zip(*pq.read_table(r / "deliveries.parquet", columns=["subscription", "msg"]).to_pydict().values()))
           for r in runs]
    assert got[0] == got[2] and len(got[0]) == 8


def test_report_refuses_an_a_b_of_runs_with_different_profiles(trace: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    base = _result(trace, tmp_path / "a", LatencyModel(), None)
    other = LatencyProfile.from_json({"name": "other", "operations": _ops(rpc={"constant": 250})}).save(tmp_path / "o.json")
    new = _result(trace, tmp_path / "b", other.to_latency_model(), other)
    assert main(["report", "--results", str(base), str(new), "--out", str(tmp_path / "r")]) == 0
    (comp,) = json.loads((tmp_path / "r" / "summary.json").read_text())["comparisons"]
    assert comp["comparable"] is False and "different latency profiles" in comp["why_not"]
    assert "constants" in comp["why_not"] and "other" in comp["why_not"]


def test_cli_latency_flags_reach_the_manifest_and_bad_ones_are_one_line(trace: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "bad.json", {"name": "b", "operations": _ops(rpc={"p50": 5, "p90": 4})})
    assert main(["replay", "--trace", str(trace), "--engine", "v4", "--out", str(tmp_path / "x"),
                 "--latency-profile", str(bad), "--drain-ms", "2000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "operations.rpc.p90" in err and not (tmp_path / "x").exists()
    assert main(["replay", "--trace", str(trace), "--engine", "v4", "--out", str(tmp_path / "x"),
                 "--latency", "meta.nope=3"]) == 2
    assert "--latency 'meta.nope=3'" in capsys.readouterr().err
    assert main(["replay", "--trace", str(trace), "--engine", "v4", "--out", str(tmp_path / "y"),
                 "--latency-profile", "constants", "--latency", "rpc=250", "--latency-seed", "3", "--drain-ms", "2000"]) == 0
    cfg = json.loads((tmp_path / "y" / "manifest.json").read_text())["runs"]["v4"]["config"]
    assert cfg["latency"]["rpc"] == 250
    assert cfg["latency_profile"]["overrides"] == {"rpc": 250} and cfg["latency_profile"]["seed"] == 3
