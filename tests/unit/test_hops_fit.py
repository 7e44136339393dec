"""A profile's hops and appends scaled to kept validations' plain publishes (bench/calibrate/hops_fit.py,
``calibrate --hops-from``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibrate import hops_fit
from bench.cli import EXIT_USAGE, main
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError
from engine.profile import LatencyProfile, resolve

DEFAULT = str(resolve("pulsar-standalone-5.0.0-M1"))


def _kept(folder: Path, name: str, p50_us: int | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    checks = [{"design": "v5", "metric": hops_fit.ROW, "broker": 9_999}]  # another design's row: not read
    if p50_us is not None:
        checks.append({"design": "v4", "metric": hops_fit.ROW, "broker": p50_us})
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"checks": checks}))
    return path


def test_kept_publishes_read_the_brokers_v4_plain_publish_p50_and_refuse_what_they_cannot_fit(tmp_path: Path) -> None:
    _kept(tmp_path / "kept", "none", None)
    with pytest.raises(ConfigError, match="no validation there kept the broker's v4 'publish \\(plain\\) p50'"):
        hops_fit.kept_publishes(tmp_path / "kept")
    _kept(tmp_path / "kept", "gone", 2_000)
    with pytest.raises(ConfigError, match=r"gone.json: its trace .*gone.parquet is missing"):
        hops_fit.kept_publishes(tmp_path / "kept")
    (tmp_path / "gone.parquet").write_bytes(b"")
    (kept,) = hops_fit.kept_publishes(tmp_path / "kept", qualified=True)
    assert kept.name == "kept/gone" and kept.broker_p50_us == 2_000


def test_scaled_multiplies_every_point_of_the_publish_kinds_only() -> None:
    prof = LatencyProfile.load(DEFAULT)
    half = hops_fit.scaled(prof, 0.5)
    for kind in hops_fit.KINDS:
        assert half.operations[kind].points == tuple((q, round(v * 0.5)) for q, v in prof.operations[kind].points)
    assert {k: d for k, d in half.operations.items() if k not in hops_fit.KINDS} == \
        {k: d for k, d in prof.operations.items() if k not in hops_fit.KINDS}
    assert half.resources == prof.resources


def test_the_fitted_scale_gives_the_model_the_brokers_plain_publish(tmp_path: Path) -> None:
    generate(load_profile("small"), 600, 1, tmp_path / "small600.parquet")
    # a broker a fifth quicker on a plain publish than the model of the profile's calibration (its
    # hops as measured, before the scale it was shipped with), on two days
    model = hops_fit.model_p50(hops_fit.unscaled(LatencyProfile.load(DEFAULT)), tmp_path / "small600.parquet")
    _kept(tmp_path / "monday", "small600", round(model * 0.78))
    _kept(tmp_path / "tuesday", "small600", round(model * 0.82))
    out = tmp_path / "fitted.json"
    assert main(["calibrate", "--refit", DEFAULT, "--hops-from", str(tmp_path / "monday"),
                 "--hops-from", str(tmp_path / "tuesday"), "--name", "quicker", "--out", str(out)]) == 0
    prof = LatencyProfile.load(out)
    record = prof.provenance["extra"]["pulsar.hops_fit"]
    assert prof.name == "quicker" and record["at"] and record["command"]
    assert 0.75 <= record["scale"] <= 0.85
    assert set(record["model_p50_us"]) == {"monday/small600", "tuesday/small600"}
    got = hops_fit.model_p50(prof, tmp_path / "small600.parquet")
    assert got == record["model_p50_us"]["monday/small600"]
    assert model * 0.75 <= got <= model * 0.85
    assert prof.provenance["kinds"]["rpc"]["scaled"]["by"] == record["scale"]
    assert prof.resources == LatencyProfile.load(DEFAULT).resources
    # fitted again, the fitted profile gives the same scale and kinds: not scaled twice
    again = tmp_path / "again.json"
    assert main(["calibrate", "--refit", str(out), "--hops-from", str(tmp_path / "monday"),
                 "--hops-from", str(tmp_path / "tuesday"), "--out", str(again)]) == 0
    twice = LatencyProfile.load(again)
    assert twice.provenance["extra"]["pulsar.hops_fit"]["scale"] == record["scale"]
    assert {k: twice.operations[k] for k in hops_fit.KINDS} == {k: prof.operations[k] for k in hops_fit.KINDS}


def test_hops_from_goes_with_refit_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--hops-from", str(tmp_path), "--out", str(tmp_path / "x.json")]) == EXIT_USAGE
    assert "error: calibrate --hops-from goes with --refit PROFILE" in capsys.readouterr().err
    assert main(["calibrate", "--refit", DEFAULT, "--hops-from", str(tmp_path), "--rates-from", str(tmp_path),
                 "--out", str(tmp_path / "x.json")]) == EXIT_USAGE
    assert "error: calibrate --hops-from and --rates-from: fit one, then refit its output" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_two_folders_of_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two folders of one name"):
        hops_fit.fit(LatencyProfile.load(DEFAULT), [tmp_path / "a" / "kept", tmp_path / "b" / "kept"])


def test_a_structural_refit_fits_from_the_calibrations_own_hops_then_scales_them_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.calibrate import saturation
    from bench.calibrate.calibrate_pulsar import rpc_of
    from bench.calibrate.hop_fit import as_distribution

    monkeypatch.setattr(saturation, "with_resources", lambda profile, rates, measured: (profile, "kept"))
    source = LatencyProfile.load(DEFAULT)
    was = hops_fit.unscaled(source)
    record = source.provenance["extra"]["pulsar.hops_fit"]
    assert [list(p) for p in was.operations["ledger.append"].points] == record["was"]["ledger.append"]
    assert was.operations["rpc"] != source.operations["rpc"]  # the default's hops were scaled
    out = tmp_path / "refit.json"
    assert main(["calibrate", "--refit", DEFAULT, "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    probe = source.provenance["extra"]["pulsar.rpc_probe_us"]
    hop = as_distribution(rpc_of(probe["publish"], probe["append"]))  # what the refit fits rpc to
    again = hops_fit.scaled(was.derived(operations={**was.operations, "rpc": hop, "consumer.deliver": hop}),
                            record["scale"])
    for kind in hops_fit.KINDS:
        assert got.operations[kind] == again.operations[kind]
    assert got.provenance["extra"]["pulsar.hops_fit"]["scale"] == record["scale"]
    assert f"scaled x{record['scale']} again after the refit" in got.provenance["notes"]
