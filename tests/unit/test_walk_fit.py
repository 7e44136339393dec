"""The listing's walk fitted to kept validations' v5 rates at saturation (bench/calibrate/walk_fit.py,
``calibrate --walk-from``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibrate import walk_fit
from bench.calibrate.kept_fit import saturated_replay
from bench.calibrate.saturation import WALK
from bench.cli import EXIT_USAGE, main
from bench.trace.workloads import generate, load_profile
from engine.clock import Distribution
from engine.errors import ConfigError
from engine.profile import LatencyProfile, resolve

DEFAULT = str(resolve("pulsar-standalone-5.0.0-M1"))
LISTENERS = 40


def _kept(folder: Path, name: str, v5: list[float], before: list[int | None]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"checks": [], "cores": 2, "saturation_repeat": {"v4": 1, "v5": 1},
                                "broker_saturation_runs": {"v4": [900.0, 1000.0, 950.0], "v5": v5},
                                "broker_saturation_txns_before": {"v4": [1, 2, 3], "v5": before},
                                "model_v5_history": {"asap": 0}, "model_v5_listeners": {"asap": LISTENERS}}))
    return path


def test_kept_sets_read_each_v5_runs_history_and_refuse_what_they_cannot_fit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no validation there records the broker's v5 runs"):
        walk_fit.kept_sets(tmp_path)
    _kept(tmp_path / "kept", "unknown", [40.0, 50.0], [100, None])  # a run without its history: not usable
    with pytest.raises(ConfigError, match="no validation there"):
        walk_fit.kept_sets(tmp_path / "kept")
    _kept(tmp_path / "kept", "gone", [40.0, 50.0], [300, 100])
    with pytest.raises(ConfigError, match=r"gone.json: its trace .*gone.parquet is missing"):
        walk_fit.kept_sets(tmp_path / "kept")
    (tmp_path / "gone.parquet").write_bytes(b"")
    (kept,) = walk_fit.kept_sets(tmp_path / "kept")
    assert kept.name == "gone" and kept.runs == [(300, 40.0), (100, 50.0)] and kept.listeners == LISTENERS


def test_the_fit_recovers_the_walk_that_gave_the_v5_rates_and_keeps_the_rest(tmp_path: Path) -> None:
    """Two kept sets whose v5 rates at their runs' histories came from the model with a walk of
    4,000 µs per thousand keys: fitted from the default's, the walk comes out there, and nothing
    else moves."""
    trace = generate(load_profile("small"), 400, 1, tmp_path / "small400.parquet") and tmp_path / "small400.parquet"
    base = LatencyProfile.load(DEFAULT)
    truth = base.derived(operations={**base.operations, WALK: Distribution.constant(4_000)})
    histories = {"day1": [1_500, 300], "day2": [800]}  # runs in the order measured, not by history
    for day, hs in histories.items():
        rates = [saturated_replay(truth, dict(truth.resources), trace, {"v5": 1}, "v5", tmp_path / "rows", h,
                                  LISTENERS)[0] for h in hs]
        _kept(tmp_path / day / day, "small400", rates, hs)
        (tmp_path / day / "small400.parquet").write_bytes(trace.read_bytes())
    out = tmp_path / "fitted.json"
    assert main(["calibrate", "--refit", DEFAULT, "--walk-from", str(tmp_path / "day1" / "day1"),
                 "--walk-from", str(tmp_path / "day2" / "day2"), "--out", str(out)]) == 0
    prof = LatencyProfile.load(out)
    (walk,) = [v for _, v in prof.operations[WALK].points]
    assert walk == pytest.approx(4_000, rel=0.1) and walk != base.operations[WALK].points[0][1]
    assert {k: v for k, v in prof.operations.items() if k != WALK} == {
        k: v for k, v in base.operations.items() if k != WALK}
    assert prof.resources == base.resources
    record = prof.provenance["extra"]["pulsar.walk_fit"]
    assert record["walk_us_per_thousand"] == walk
    assert record["walk_before_us_per_thousand"] == base.operations[WALK].points[0][1]
    assert {n: x["txns_before"] for n, x in record["sets"].items()} == {"day1/small400": [1_500, 300],
                                                                      "day2/small400": [800]}
    assert record["command"] and f"{WALK} (a listing's walk" in prof.provenance["notes"]


def test_walk_from_goes_with_refit_alone_and_needs_the_stores_resource(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.json"
    assert main(["calibrate", "--walk-from", str(tmp_path), "--out", str(out)]) == EXIT_USAGE
    assert "error: calibrate --walk-from goes with --refit PROFILE" in capsys.readouterr().err
    assert main(["calibrate", "--refit", DEFAULT, "--walk-from", str(tmp_path), "--rates-from", str(tmp_path),
                 "--out", str(out)]) == EXIT_USAGE
    assert "--rates-from and --walk-from: fit one, then refit its output with the other" in capsys.readouterr().err
    constants = str(resolve("constants"))
    assert main(["calibrate", "--refit", constants, "--walk-from", str(tmp_path), "--out", str(out)]) == EXIT_USAGE
    assert "has no metadata resource whose threads a listing's walk (meta.list_keys) holds" in capsys.readouterr().err
    assert not out.exists()
