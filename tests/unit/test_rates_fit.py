"""Resources fitted to kept validations' saturated rates (bench/calibrate/rates_fit.py, ``calibrate --rates-from``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibrate import rates_fit
from bench.cli import EXIT_USAGE, main
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError
from engine.profile import LatencyProfile, resolve

DEFAULT = str(resolve("pulsar-standalone-5.0.0-M1"))


def test_nnls_recovers_non_negative_costs_and_never_gives_a_negative_one() -> None:
    costs = [10.0, 0.0, 200.0]
    rows = [[40, 12, 12], [27, 3, 3], [30, 5, 2]]
    got = rates_fit.nnls(rows, [sum(c * x for c, x in zip(costs, r)) for r in rows])
    assert got == pytest.approx(costs, abs=1e-6)
    # the unconstrained least squares wants a negative second cost here; the fit drops that kind
    got = rates_fit.nnls([[1, 1], [1, 2], [1, 3]], [10, 8, 6])
    assert got[1] == 0 and got[0] > 0


def _kept(folder: Path, name: str, v4_rates: list[float], busy: list[float]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"checks": [], "cores": 2, "saturation_repeat": {"v4": 1, "v5": 1},
                                "broker_saturation_runs": {"v4": v4_rates, "v5": [40.0, 50.0, 45.0]},
                                "broker_saturation_cpu": {"v4": [{"machine_busy_cores": b} for b in busy]},
                                "model_v5_history": {"asap": 0}, "model_v5_listeners": {"asap": 0}}))
    return path


def test_kept_runs_read_the_broker_rates_and_cores_and_refuse_what_they_cannot_fit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no validation there"):
        rates_fit.kept_runs(tmp_path)
    _kept(tmp_path / "kept", "gone", [100.0], [1.0])
    with pytest.raises(ConfigError, match=r"gone.json: its trace .*gone.parquet is missing"):
        rates_fit.kept_runs(tmp_path / "kept")
    (tmp_path / "gone.parquet").write_bytes(b"")
    (run,) = rates_fit.kept_runs(tmp_path / "kept")
    assert run.name == "gone" and run.cores == 2
    # a core's µs per committed txn: the median over the runs of busy cores over the rate
    _kept(tmp_path / "kept", "gone", [100.0, 400.0, 200.0], [1.0, 2.0, 1.0])
    assert rates_fit.kept_runs(tmp_path / "kept")[0].core_us_per_txn == pytest.approx(5_000)


def test_the_fitted_cores_give_the_model_the_brokers_v4_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate(load_profile("small"), 600, 1, tmp_path / "small600.parquet")
    broker_v4 = [280.0, 300.0, 320.0]  # below the model's rate without a bound on the cores
    _kept(tmp_path / "kept", "small600", broker_v4, [1.9, 1.9, 1.9])
    out = tmp_path / "fitted.json"
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "kept"), "--name", "fitted",
                 "--out", str(out)]) == 0
    prof = LatencyProfile.load(out)
    assert prof.name == "fitted"
    cpu = prof.resources["cpu"]
    assert cpu.concurrency == 2 and cpu.kind_service_us and set(cpu.kind_service_us) <= set(rates_fit.KINDS)
    record = prof.provenance["extra"]["pulsar.rates_fit"]
    model_v4 = record["check"]["small600"]["model"]["v4"]
    assert model_v4 == pytest.approx(300.0, rel=0.05)
    # every operation and the metadata writes stay; v5 is a check, not fitted
    before = LatencyProfile.load(DEFAULT)
    assert prof.operations == before.operations and prof.resources["metadata"] == before.resources["metadata"]
    assert record["check"]["small600"]["model"]["v5"] > 0 and record["check"]["small600"]["broker"]["v5"] == 45.0
    assert "cpu, the host's 2 cores" in prof.provenance["notes"] and record["at"] and record["command"]
    assert "resource cpu:" in capsys.readouterr().out


def test_rates_from_goes_with_refit_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--rates-from", str(tmp_path), "--out", str(tmp_path / "x.json")]) == EXIT_USAGE
    assert "error: calibrate --rates-from goes with --refit PROFILE" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_several_folders_are_fitted_together_each_run_named_by_its_folder(tmp_path: Path) -> None:
    # the same trace kept from two brokers, one a third faster: one fit between them, not either's
    generate(load_profile("small"), 600, 1, tmp_path / "small600.parquet")
    _kept(tmp_path / "monday", "small600", [280.0, 300.0, 320.0], [1.9, 1.9, 1.9])
    _kept(tmp_path / "tuesday", "small600", [380.0, 400.0, 420.0], [1.9, 1.9, 1.9])
    out = tmp_path / "fitted.json"
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "monday"),
                 "--rates-from", str(tmp_path / "tuesday"), "--out", str(out)]) == 0
    record = LatencyProfile.load(out).provenance["extra"]["pulsar.rates_fit"]
    assert record["from"] == [str(tmp_path / "monday"), str(tmp_path / "tuesday")]
    check = record["check"]
    assert set(check) == {"monday/small600", "tuesday/small600"}
    assert check["monday/small600"]["broker"]["v4"] == 300.0 and check["tuesday/small600"]["broker"]["v4"] == 400.0
    model = check["monday/small600"]["model"]["v4"]
    assert model == check["tuesday/small600"]["model"]["v4"] and 300.0 < model < 400.0


def test_several_folders_must_differ_in_name_and_share_the_hosts_cores(tmp_path: Path) -> None:
    (tmp_path / "small600.parquet").write_bytes(b"")
    _kept(tmp_path / "a" / "kept", "small600", [300.0], [1.9])
    _kept(tmp_path / "b" / "kept", "small600", [300.0], [1.9])
    prof = LatencyProfile.load(DEFAULT)
    with pytest.raises(ConfigError, match="two folders of one name"):
        rates_fit.fit(prof, [tmp_path / "a" / "kept", tmp_path / "b" / "kept"])
    (tmp_path / "a" / "small600.parquet").write_bytes(b"")
    (tmp_path / "b" / "small600.parquet").write_bytes(b"")
    four = _kept(tmp_path / "four", "small600", [300.0], [1.9])
    four.write_text(four.read_text().replace('"cores": 2', '"cores": 4'))
    with pytest.raises(ConfigError, match=r"hosts of different cores \(kept/small600 2, four/small600 4\)"):
        rates_fit.fit(prof, [tmp_path / "a" / "kept", tmp_path / "four"])


def test_a_pinned_core_cost_is_kept_and_the_others_fit_what_is_left(tmp_path: Path) -> None:
    generate(load_profile("small"), 600, 1, tmp_path / "small600.parquet")
    _kept(tmp_path / "kept", "small600", [280.0, 300.0, 320.0], [1.9, 1.9, 1.9])
    out = tmp_path / "pinned.json"
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "kept"),
                 "--core", "rpc.broker=40", "--out", str(out)]) == 0
    prof = LatencyProfile.load(out)
    record = prof.provenance["extra"]["pulsar.rates_fit"]
    assert record["core_us_pinned"] == {"rpc.broker": 40}
    assert prof.resources["cpu"].kind_service_us["rpc.broker"] == 40  # unscaled, whatever scale was chosen
    assert "rpc.broker" not in record["core_us_least_squares"] and record["core_us_least_squares"]
    # the rest carries the run's core time less the pinned kind's share of it
    calls = record["traces"]["small600"]["calls_per_txn"]
    per_txn = record["traces"]["small600"]["core_us_per_txn"]
    fitted = sum(calls[k] * c for k, c in record["core_us_least_squares"].items())
    assert fitted == pytest.approx(per_txn - 40 * calls["rpc.broker"], rel=0.02)
    assert "rpc.broker 40 µs pinned by --core" in prof.provenance["notes"]


@pytest.mark.parametrize(("core", "why"), [
    ("rpc.broker", "expected KIND=US"),
    ("rpc.broker=-3", "expected KIND=US"),
    ("ledger.append=10", "a kind of rpc, rpc.broker, consumer.deliver"),
    ("rpc.broker=999999", "the pinned costs alone exceed small600's"),
])
def test_a_bad_pinned_core_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                core: str, why: str) -> None:
    generate(load_profile("small"), 600, 1, tmp_path / "small600.parquet")
    _kept(tmp_path / "kept", "small600", [300.0], [1.9])
    out = tmp_path / "x.json"
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "kept"), "--core", core,
                 "--out", str(out)]) == EXIT_USAGE
    assert why in capsys.readouterr().err and not out.exists()


def test_core_goes_with_rates_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--refit", DEFAULT, "--core", "rpc=1", "--out", str(tmp_path / "x.json")]) == EXIT_USAGE
    assert "calibrate --core pins a core cost of the --rates-from fit" in capsys.readouterr().err


def test_by_process_the_broker_and_the_client_are_each_fitted_by_the_kinds_that_work_in_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate(load_profile("small"), 600, 1, tmp_path / "small600.parquet")
    kept = _kept(tmp_path / "kept", "small600", [280.0, 300.0, 320.0], [1.9, 1.9, 1.9])
    out = tmp_path / "x.json"
    # a run without the broker process's cores cannot be split
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "kept"), "--by-process",
                 "--out", str(out)]) == EXIT_USAGE
    assert "small600 did not record the broker process's busy cores" in capsys.readouterr().err
    v = json.loads(kept.read_text())
    v["broker_saturation_cpu"]["v4"] = [{"machine_busy_cores": 1.9, "broker_cores": b} for b in (0.7, 0.8, 0.9)]
    kept.write_text(json.dumps(v))
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "kept"), "--by-process",
                 "--core", "rpc=5", "--out", str(out)]) == EXIT_USAGE
    assert "rpc works in both processes" in capsys.readouterr().err and not out.exists()
    assert main(["calibrate", "--refit", DEFAULT, "--rates-from", str(tmp_path / "kept"), "--by-process",
                 "--out", str(out)]) == 0
    record = LatencyProfile.load(out).provenance["extra"]["pulsar.rates_fit"]
    trace = record["traces"]["small600"]
    # each process's core time per committed txn, the median over the runs
    assert trace["core_us_per_txn_by_process"] == {"broker": pytest.approx(0.8e6 / 300, abs=0.1),
                                                    "client": pytest.approx(1.1e6 / 300, abs=0.1)}
    sides = record["core_us_least_squares_by_process"]
    assert set(sides["client"]) <= set(rates_fit.CLIENT_KINDS)
    for side, costs in sides.items():  # one trace: each process's time is met by its own kinds
        assert sum(trace["calls_per_txn"][k] * c for k, c in costs.items()) == pytest.approx(
            trace["core_us_per_txn_by_process"][side], rel=0.02)
    for kind, cost in record["core_us_least_squares"].items():  # a kind's cost is its sides' (each rounded)
        assert cost == pytest.approx(sides.get("broker", {}).get(kind, 0) + sides.get("client", {}).get(kind, 0), abs=1)
    assert record["fitted_by_process"] is True
    assert f"kept in {tmp_path / 'kept'} (bench/calibrate/rates_fit.py)" in LatencyProfile.load(out).provenance["notes"]
    assert main(["calibrate", "--refit", DEFAULT, "--by-process", "--out", str(out)]) == EXIT_USAGE
    assert "calibrate --by-process splits the --rates-from fit by process" in capsys.readouterr().err
