"""The v4 coordinator's handling fitted to kept validations' new-txns (bench/calibrate/new_txn_fit.py,
``calibrate --new-txn-from``), and what a refit of the calibration's own fits says of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibrate import fit_notes, new_txn_fit
from bench.cli import EXIT_USAGE, main
from bench.trace.workloads import generate, load_profile
from engine.clock import Distribution
from engine.errors import ConfigError
from engine.profile import LatencyProfile, resolve

DEFAULT = str(resolve("pulsar-standalone-5.0.0-M1"))


def _kept(folder: Path, name: str, rows: dict[str, int]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    checks = [{"design": "v5", "metric": "new-txn p50", "broker": 9_999}]  # another design's row: not read
    checks += [{"design": "v4", "metric": r, "broker": v} for r, v in rows.items()]
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"checks": checks}))
    return path


def test_kept_new_txns_need_both_rows_and_their_trace(tmp_path: Path) -> None:
    _kept(tmp_path / "kept", "half", {"new-txn p50": 2_000})
    with pytest.raises(ConfigError, match="no validation there kept the broker's v4 'new-txn p50' and 'new-txn p99'"):
        new_txn_fit.kept_new_txns(tmp_path / "kept")
    _kept(tmp_path / "kept", "gone", {"new-txn p50": 2_000, "new-txn p99": 6_000})
    with pytest.raises(ConfigError, match=r"gone.json: its trace .*gone.parquet is missing"):
        new_txn_fit.kept_new_txns(tmp_path / "kept")
    (tmp_path / "gone.parquet").write_bytes(b"")
    (kept,) = new_txn_fit.kept_new_txns(tmp_path / "kept", qualified=True)
    assert kept[0] == "kept/gone" and kept[2] == {"new-txn p50": 2_000, "new-txn p99": 6_000}


def test_the_kinds_shape_has_its_tail_above_its_p90_only() -> None:
    assert new_txn_fit.handling(300, 300) == Distribution.constant(300)
    tail = new_txn_fit.handling(300, 4_000)
    assert tail.points == ((0.5, 300), (0.9, 300), (0.99, 4_000))


def test_the_fitted_handling_gives_the_model_the_brokers_new_txn(tmp_path: Path) -> None:
    """Brokers whose new-txns are the model's with a known handling: the fit finds it again (to
    the grid's steps), keeps every other kind and the resources, and says so."""
    trace = tmp_path / "small600.parquet"
    generate(load_profile("small"), 600, 1, trace)
    source = LatencyProfile.load(DEFAULT)
    truth = source.derived(operations={**source.operations, new_txn_fit.KIND: new_txn_fit.handling(400, 3_000)})
    p50, p99 = new_txn_fit.model_new_txn(truth, trace)
    assert (p50, p99) != new_txn_fit.model_new_txn(source, trace)  # the default's own fit is not it: work to do
    _kept(tmp_path / "monday", "small600", {"new-txn p50": p50, "new-txn p99": p99})
    _kept(tmp_path / "tuesday", "small600", {"new-txn p50": p50, "new-txn p99": p99})
    out = tmp_path / "fitted.json"
    assert main(["calibrate", "--refit", DEFAULT, "--new-txn-from", str(tmp_path / "monday"),
                 "--new-txn-from", str(tmp_path / "tuesday"), "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    record = got.provenance["extra"]["pulsar.new_txn_fit"]
    assert abs(record["p50_us"] - 400) <= 2 * new_txn_fit.STEP
    assert abs(record["p99_us"] - 3_000) <= 3_000 * 0.15
    assert got.operations[new_txn_fit.KIND] == new_txn_fit.handling(record["p50_us"], record["p99_us"])
    assert record["was"] == [list(p) for p in source.operations[new_txn_fit.KIND].points]
    assert set(record["broker"]) == {"monday/small600", "tuesday/small600"}
    fitted = new_txn_fit.model_new_txn(got, trace)
    assert record["model"]["small600"] == {"new-txn p50": fitted[0], "new-txn p99": fitted[1]}
    assert abs(fitted[0] - p50) <= p50 * 0.03
    assert {k: v for k, v in got.operations.items() if k != new_txn_fit.KIND} == \
        {k: v for k, v in source.operations.items() if k != new_txn_fit.KIND}
    assert got.resources == source.resources
    # the default's own fit's note gives way to this one
    notes = source.provenance["notes"]
    assert notes.count(new_txn_fit.NOTE) == got.provenance["notes"].count(new_txn_fit.NOTE) == 1
    # the calibration's and the other later fits' notes as they were, then this fit's
    others = fit_notes.without_own(notes, "pulsar.new_txn_fit")
    assert got.provenance["notes"].startswith(others + "; " + new_txn_fit.NOTE)
    assert "in 2 kept validations in " in got.provenance["notes"]
    assert got.provenance["kinds"][new_txn_fit.KIND]["how"] == "new_txn_fit"

    # fitting the coordinator kinds again to the calibration's probes replaces it: its note and record say so
    again = tmp_path / "again.json"
    assert main(["calibrate", "--refit", str(out), "--coordinator-only", "--out", str(again)]) == 0
    redone = LatencyProfile.load(again)
    assert redone.operations[new_txn_fit.KIND] != got.operations[new_txn_fit.KIND]
    when = redone.provenance["coordinator_refitted"]["at"]
    assert redone.provenance["extra"]["pulsar.new_txn_fit"]["replaced"] == {"at": when, "what": [new_txn_fit.KIND]}
    redone_notes = fit_notes.split(redone.provenance["notes"])[1]
    assert next(n for n in redone_notes if n.startswith(new_txn_fit.NOTE)).endswith(
        f" [replaced by the refit of {when}: its coordinator.v4 fitted again to the calibration's own records; "
        "calibrate --new-txn-from to fit it to the kept runs again]")
    assert redone.provenance["notes"].count("coordinator.v4 fitted to the v4 new-txn") == 1


def test_new_txn_from_goes_with_refit_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "p.json")
    assert main(["calibrate", "--new-txn-from", str(tmp_path), "--out", out]) == EXIT_USAGE
    assert "--new-txn-from goes with --refit PROFILE" in capsys.readouterr().err
    assert main(["calibrate", "--refit", DEFAULT, "--new-txn-from", str(tmp_path), "--hops-from", str(tmp_path),
                 "--out", out]) == EXIT_USAGE
    assert "fit one, then refit its output with the other" in capsys.readouterr().err
    assert not Path(out).exists()
