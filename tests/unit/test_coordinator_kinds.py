"""The coordinator requests' own handling (``coordinator.v4``/``coordinator.v5``): billed once per
request the design's coordinator answers, and measured by calibrate as the broker's new-txn less
the model's (bench/calibrate/coordinator_fit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibrate import coordinator_fit, fit_notes, hops_fit
from bench.calibrate.calibrate_pulsar import write_trace
from bench.cli import EXIT_USAGE, main
from engine.broker import BrokerConfig
from engine.clock import Distribution, LatencyModel
from engine.dispatcher import DispatchMode
from engine.memledger import MemoryLedgerFactory
from engine.profile import LatencyProfile, resolve
from engine.scripted import ScriptedClient
from legacy_v4 import v4_engine
from metadata_v5.engine import V5Engine
from metadata_v5.options import V5Options
from metadata_v5.store.registry import open_metadata

HANDLING_US = 700
TOPIC = "persistent://public/default/t"


def _times(design: str, **kinds: int) -> tuple[int, int, int, int]:
    """new-txn, a txn's first publish to a partition (its registration with the coordinator), its
    second, and its end-txn: each one's time in the model."""
    config = BrokerConfig(dispatch=DispatchMode.NOTIFY, latency=LatencyModel().with_overrides(**kinds))
    engine = (v4_engine() if design == "v4" else
              (lambda ctx: V5Engine(ctx, open_metadata("memory://"), V5Options(variant="shipped"))))
    s = ScriptedClient(MemoryLedgerFactory(), config, engine)
    s.subscribe(TOPIC, "sub")
    s.publish(TOPIC, "p")  # the topic loaded, its buffer ready
    s.run()
    t = s.new_txn()
    new_txn = s.broker.last_new_txn_us
    s.publish(TOPIC, "x0", txn=t)
    first = s.broker.last_publish_us
    s.run()
    s.publish(TOPIC, "x1", txn=t)
    second = s.broker.last_publish_us
    s.run()
    called = s.end(t)
    s.run()
    return new_txn, first, second, s.outcome_us[t] - called


@pytest.mark.parametrize("design", ["v4", "v5"])
def test_each_request_of_the_designs_coordinator_bills_its_handling_once_and_the_other_kind_nothing(
        design: str) -> None:
    other = "v5" if design == "v4" else "v4"
    base = _times(design)
    own = _times(design, **{f"coordinator.{design}": HANDLING_US})
    assert [b - a for a, b in zip(base, own)] == [HANDLING_US, HANDLING_US, 0, HANDLING_US]
    assert _times(design, **{f"coordinator.{other}": HANDLING_US}) == base


def test_a_profile_without_the_kinds_bills_them_nothing_and_writes_them_only_when_set() -> None:
    base = LatencyProfile.constants()
    assert base.operations["coordinator.v4"] == base.operations["coordinator.v5"] == Distribution.constant(0)
    assert "coordinator.v" not in base.to_text()
    ops = {**base.operations, "coordinator.v5": Distribution(((0.5, 100), (0.99, 900)))}
    text = LatencyProfile("x", {}, ops, {}).to_text()
    back = LatencyProfile.from_json(json.loads(text))
    assert back.operations["coordinator.v5"] == Distribution(((0.5, 100), (0.99, 900)))
    assert "coordinator.v4" not in text


def test_the_residual_is_the_brokers_less_the_models_never_negative_nor_decreasing() -> None:
    assert coordinator_fit._residual({"p50": 2_000, "p90": 2_600, "p99": 4_000},
                                     {"p50": 1_500, "p90": 2_000, "p99": 3_000}) == \
        Distribution(((0.5, 500), (0.9, 600), (0.99, 1_000)))
    assert coordinator_fit._residual({"p50": 1_000, "p90": 2_000, "p99": 2_500},
                                     {"p50": 1_200, "p90": 1_800, "p99": 2_400}) == \
        Distribution(((0.5, 0), (0.9, 200), (0.99, 200)))
    assert coordinator_fit._residual({"p50": 1, "p90": 1, "p99": 1}, {"p50": 5, "p90": 5, "p99": 5}) == \
        Distribution.constant(0)


def test_the_fit_gives_back_a_handling_the_broker_was_built_with(tmp_path: Path) -> None:
    """A 'broker' whose new-txn is the model's plus a known handling per design: the fit finds
    that handling, and the model's new-txn with it is the broker's."""
    samples = 20
    base = LatencyProfile.constants()
    without = coordinator_fit.model_new_txn(base, write_trace(tmp_path / "t.parquet", samples), 0)
    handling = {"v4": 450, "v5": 1_100}
    seen = {d: {f"{q}_us": without[d][q] + handling[d] for q in coordinator_fit.QUANTILES} for d in ("v4", "v5")}
    profile = LatencyProfile("b", {"samples": samples, "extra": {"pulsar.client_observed_us":
                                                                 {d: {"new_txn_us": s} for d, s in seen.items()}}},
                             base.operations, {})
    fitted, note = coordinator_fit.fit(profile)
    assert fitted.operations["coordinator.v4"] == Distribution.constant(450)
    assert fitted.operations["coordinator.v5"] == Distribution.constant(1_100)
    assert fitted.provenance["kinds"]["coordinator.v5"]["how"] == "residual"
    assert f"the model's with it { {q: seen['v5'][f'{q}_us'] for q in coordinator_fit.QUANTILES} })" in note
    assert coordinator_fit.fit(base) == (base, "")  # no probes recorded: nothing to fit


def test_the_fit_takes_the_probes_measured_txns_over_the_whole_runs(tmp_path: Path) -> None:
    """A profile that recorded the probes' measured txns (``pulsar.client_measured_us``) is fitted
    to them, not to the whole runs' figures with their set-up; one that recorded only the whole
    runs (before 2026-11-27 07:40) to those, as it was."""
    samples = 20
    base = LatencyProfile.constants()
    without = coordinator_fit.model_new_txn(base, write_trace(tmp_path / "t.parquet", samples), 0)

    def record(extra_us: int) -> dict[str, dict[str, dict[str, int]]]:
        return {d: {"new_txn_us": {f"{q}_us": without[d][q] + extra_us for q in coordinator_fit.QUANTILES}}
                for d in ("v4", "v5")}

    whole, measured = record(9_000), record(300)
    both = LatencyProfile("b", {"samples": samples, "extra": {"pulsar.client_observed_us": whole,
                                                              "pulsar.client_measured_us": measured}},
                          base.operations, {})
    fitted, note = coordinator_fit.fit(both)
    assert fitted.operations["coordinator.v5"] == Distribution.constant(300) and "over the measured ones" in note
    older = LatencyProfile("o", {"samples": samples, "extra": {"pulsar.client_observed_us": whole}}, base.operations, {})
    fitted, note = coordinator_fit.fit(older)
    assert fitted.operations["coordinator.v5"] == Distribution.constant(9_000) and "both over the whole run" in note


def test_a_whole_runs_tail_is_not_fitted_and_the_measured_txns_is(tmp_path: Path) -> None:
    """Over the whole runs the kind stops at its p90: their p99 is not the request's handling (the
    first txns' set-up); over the measured txns the p99 is fitted as the rest."""
    samples = 20
    base = LatencyProfile.constants()
    without = coordinator_fit.model_new_txn(base, write_trace(tmp_path / "t.parquet", samples), 0)
    extra_us = {"p50": 200, "p90": 300, "p99": 20_000}
    seen = {d: {"new_txn_us": {f"{q}_us": without[d][q] + extra_us[q] for q in coordinator_fit.QUANTILES}}
            for d in ("v4", "v5")}
    whole = LatencyProfile("w", {"samples": samples, "extra": {"pulsar.client_observed_us": seen}}, base.operations, {})
    fitted, note = coordinator_fit.fit(whole)
    assert fitted.operations["coordinator.v5"] == Distribution(((0.5, 200), (0.9, 300), (0.99, 300)))
    assert "p99 is its p90" in note
    measured = LatencyProfile("m", {"samples": samples, "extra": {"pulsar.client_observed_us": seen,
                                                                  "pulsar.client_measured_us": seen}},
                              base.operations, {})
    fitted, _ = coordinator_fit.fit(measured)
    assert fitted.operations["coordinator.v5"] == Distribution(((0.5, 200), (0.9, 300), (0.99, 20_000)))


def test_a_coordinator_only_refit_fits_those_kinds_on_the_calibrations_hops_and_keeps_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``calibrate --refit PROFILE --coordinator-only``: the default's coordinator kinds fitted
    again, on its hops as calibrated (before the hops fit's scale, as a structural refit fits
    them), every other kind, the resources and the other fits' notes as they were."""
    default = str(resolve("pulsar-standalone-5.0.0-M1"))
    source = LatencyProfile.load(default)
    out = tmp_path / "coord.json"
    assert main(["calibrate", "--refit", default, "--coordinator-only", "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    kinds = ("coordinator.v4", "coordinator.v5")
    v5 = got.operations["coordinator.v5"]
    assert v5.at(0.99) == v5.at(0.9)  # fitted over whole runs: no tail (23,752 µs before 2026-11-29)
    on_scaled, _ = coordinator_fit.fit(source)
    assert got.operations["coordinator.v5"] != on_scaled.operations["coordinator.v5"]
    assert got.operations["coordinator.v5"] == coordinator_fit.fit(hops_fit.unscaled(source))[0].operations["coordinator.v5"]
    assert {k: d for k, d in got.operations.items() if k not in kinds} == \
        {k: d for k, d in source.operations.items() if k not in kinds}
    assert got.resources == source.resources
    before, after = str(source.provenance["notes"]), str(got.provenance["notes"])
    cut = before.index("coordinator.v4/v5: ")
    assert after.count("coordinator.v4/v5: ") == 1 and after.startswith(before[:cut])
    # the resources' and later fits' notes; the kept new-txns' fit, whose coordinator.v4 this replaced, says so
    when = got.provenance["coordinator_refitted"]["at"]
    new_txn = next(n for n in fit_notes.split(before)[1] if n.startswith(fit_notes.NEW_TXN))
    said = (f"{new_txn} [replaced by the refit of {when}: its coordinator.v4 fitted again to the calibration's own "
            "records; calibrate --new-txn-from to fit it to the kept runs again]")
    assert after.endswith(before[before.index("; resources", cut):].replace(new_txn, said)) and said in after
    assert got.provenance["extra"]["pulsar.new_txn_fit"]["replaced"] == {"at": when, "what": ["coordinator.v4"]}
    assert "re-fitted" in after[cut:after.index("; resources", cut)]
    assert got.provenance["coordinator_refitted"]["at"] and \
        got.provenance["coordinator_refitted"]["command"].startswith("txnbench calibrate")
    for bad in (["calibrate", "--coordinator-only", "--out", str(tmp_path / "x.json")],
                ["calibrate", "--refit", default, "--coordinator-only", "--hops-from", str(tmp_path),
                 "--out", str(tmp_path / "x.json")]):
        assert main(bad) == EXIT_USAGE
        assert "--coordinator-only goes with --refit PROFILE alone" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_coordinator_only_refit_of_one_design_keeps_the_others_kind_and_its_fit(tmp_path: Path) -> None:
    """``--coordinator-only v5``: ``coordinator.v5`` fitted again as the refit of both fits it;
    ``coordinator.v4``, which the ``--new-txn-from`` fit gave, kept, and that fit's note and
    record not marked replaced."""
    default = str(resolve("pulsar-standalone-5.0.0-M1"))
    source = LatencyProfile.load(default)
    out = tmp_path / "v5.json"
    assert main(["calibrate", "--refit", default, "--coordinator-only", "v5", "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    both, _ = coordinator_fit.fit(hops_fit.unscaled(source))
    assert got.operations["coordinator.v5"] == both.operations["coordinator.v5"]
    assert got.operations["coordinator.v4"] == source.operations["coordinator.v4"] != both.operations["coordinator.v4"]
    assert {k: d for k, d in got.operations.items() if k != "coordinator.v5"} == \
        {k: d for k, d in source.operations.items() if k != "coordinator.v5"}
    assert got.provenance["kinds"]["coordinator.v4"] == source.provenance["kinds"]["coordinator.v4"]
    notes = str(got.provenance["notes"])
    assert notes.count("coordinator.v4/v5: ") == 1 and "; coordinator.v4 kept as it was)" in notes
    assert "coordinator.v4: the client's new-txn" not in notes.split("coordinator.v4/v5: ")[1].split("; resources")[0]
    assert "[replaced by the refit of" not in notes
    assert "replaced" not in got.provenance["extra"]["pulsar.new_txn_fit"]


def test_the_txn_probes_figures_leave_out_the_warm_up_txns(tmp_path: Path) -> None:
    """``calibrate_pulsar.txn_probes``: per op kind over the measured txns ``t{i}``/``x{i}``/``p{i}``
    (i >= WARMUP_TXNS) only; failed ops and other events are not counted."""
    from bench.calibrate.calibrate_pulsar import WARMUP_TXNS, txn_probes

    lines = []
    for i in range(WARMUP_TXNS + 10):
        slow = 50_000 if i < WARMUP_TXNS else 0  # the warm-up's set-up
        t0 = i * 40_000
        lines += [{"ev": "op", "op": "new_txn", "txn": f"t{i}", "start_us": t0, "end_us": t0 + 2_000 + i + slow, "ok": True},
                  {"ev": "op", "op": "publish", "txn": f"t{i}", "msg": f"x{i}", "start_us": t0, "end_us": t0 + 4_000, "ok": True},
                  {"ev": "op", "op": "publish", "msg": f"p{i}", "start_us": t0, "end_us": t0 + 2_100, "ok": True},
                  {"ev": "op", "op": "commit", "txn": f"t{i}", "start_us": t0, "end_us": t0 + 5_000 + slow, "ok": True},
                  {"ev": "deliver", "msg": f"p{i}", "t_us": t0 + 9_000}]
    lines.append({"ev": "op", "op": "new_txn", "txn": f"t{WARMUP_TXNS + 10}", "start_us": 0, "end_us": 99_999, "ok": False})
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got = txn_probes(path)
    first = 2_000 + WARMUP_TXNS
    assert got["new_txn_us"] == {"count": 10, "p50_us": first + 4, "p90_us": first + 8, "p99_us": first + 9, "max_us": first + 9}
    assert got["end_txn_us"]["max_us"] == 5_000 and got["publish_txn_us"]["p50_us"] == 4_000
    assert got["publish_nontxn_us"] == {"count": 10, "p50_us": 2_100, "p90_us": 2_100, "p99_us": 2_100, "max_us": 2_100}
