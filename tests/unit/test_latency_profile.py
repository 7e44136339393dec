"""Latency profiles as data (engine.profile): the file format and its errors, deterministic
sampling, byte-identical results with the shipped constants, the manifest record and the A/B
refusal between runs modelled with different profiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.replay.config import RunConfig
from bench.trace.trace import TraceWriter
from engine.clock import DEFAULT_LATENCIES_US, Distribution, LatencyModel, ResourceSpec
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


@pytest.fixture(scope="module")
def plain_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plain publishes, all delivered before the last row: quiescent without a drain (a drain's
    long latencies make the metrics export of each result cost seconds of CPU)."""
    path = tmp_path_factory.mktemp("lp") / "plain.parquet"
    with TraceWriter(path, metadata={"profile": "hand", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        for i in range(3):
            w.add(10 + i, "publish", topic=T, msg=f"p{i}", size=1)
        w.add(50_000, "subscribe", topic=T, subscription="late")
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
    occupied = LatencyProfile.from_json({"name": "y", "operations": _ops(), "resources": {
        "bookie": {"service_us": "latency", "concurrency": 3, "shared": True},
        "metadata": {"service_us": 900, "concurrency": 1, "kinds": ["meta.write", "meta.cas"]}}})
    back = LatencyProfile.load(occupied.save(tmp_path / "y.json").path or "")
    assert back.resources == occupied.resources
    assert back.resources["bookie"] == ResourceSpec(None, 3, shared=True)
    assert back.resources["metadata"].kinds == frozenset({"meta.write", "meta.cas"})
    assert '"service_us": "latency"' in (tmp_path / "y.json").read_text()
    cores = LatencyProfile.from_json({"name": "z", "operations": _ops(), "resources": {
        "cpu": {"service_us": {"rpc": 13, "rpc.broker": 246}, "concurrency": 2}}})
    assert cores.resources["cpu"] == ResourceSpec(0, 2, True, frozenset({"rpc", "rpc.broker"}), frozenset(),
                                                  {"rpc": 13, "rpc.broker": 246})
    assert LatencyProfile.load(cores.save(tmp_path / "z.json").path or "").resources == cores.resources


@pytest.mark.parametrize("data, key", [
    ({"name": "b", "operations": _ops(**{"ledger.bogus": {"constant": 1}})}, "operations.ledger.bogus"),
    ({"name": "b", "operations": {k: v for k, v in _ops().items() if k != "meta.cas"}}, "operations.meta.cas"),
    ({"name": "b", "operations": _ops(**{"rpc": {"p90": 5, "max": 9}})}, "operations.rpc.p50"),
    ({"name": "b", "operations": _ops(**{"rpc": {"p50": 50, "p90": 40}})}, "operations.rpc.p90"),
    ({"name": "b", "operations": _ops(**{"rpc": {"constant": -1}})}, "operations.rpc.constant"),
    ({"name": "b", "operations": _ops(), "resources": {"bookie": {"service_us": 1, "concurrency": 0}}},
     "resources.bookie.concurrency"),
    ({"name": "b", "operations": _ops(), "resources": {"coordinator": {"service_us": "latency", "concurrency": 1}}},
     "resources.coordinator.service_us"),  # served without a latency of its own
    ({"name": "b", "operations": _ops(), "resources": {"bookie": {"service_us": "fast", "concurrency": 1}}},
     "resources.bookie.service_us"),
    ({"name": "b", "operations": _ops(), "resources": {"metadata": {"service_us": 1, "concurrency": 1,
                                                                     "kinds": ["meta.bogus"]}}},
     "resources.metadata.kinds"),
    ({"name": "b", "operations": _ops(), "resources": {"metadata": {"service_us": 1, "concurrency": 1, "shared": 1}}},
     "resources.metadata.shared"),
    ({"name": "b", "operations": _ops(), "resources": {"metadata": {"service_us": 1, "concurrency": 1,
                                                                     "kinds": ["meta.write"],
                                                                     "latency_kinds": ["meta.list_keys"]}}},
     "resources.metadata.latency_kinds"),  # not a kind the resource serves
    ({"name": "b", "operations": _ops(), "resources": {"cpu": {"service_us": 10, "concurrency": 2}}},
     "resources.cpu.service_us"),  # the cores' work is per kind
    ({"name": "b", "operations": _ops(), "resources": {"cpu": {"service_us": {"rpc.bogus": 1}, "concurrency": 2}}},
     "resources.cpu.service_us"),
    ({"name": "b", "operations": _ops(), "resources": {"cpu": {"service_us": {"rpc": 1}, "concurrency": 0}}},
     "resources.cpu.concurrency"),
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


def _replay(trace: Path, latency: LatencyModel, profile: LatencyProfile | None) -> list[str]:
    """Both engines' results (counts, latency summary, deliveries, txn rows), serialised: the
    result files' content without writing them (their metrics export costs seconds of CPU)."""
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events

    out = []
    for engine in ("v4", "v5"):
        cfg = RunConfig(engine=engine, latency=latency, latency_profile=profile, drain_ms=2_000)
        r = Replayer(cfg).run(read_events(trace, validated=True))
        out.append(json.dumps([r.counts, r.latency, r.deliveries, r.txns], sort_keys=True, default=str))
    return out


def test_constants_file_gives_identical_results_and_a_distribution_is_seeded(trace: Path) -> None:
    shipped = LatencyProfile.load(LATENCY_DIR / "constants.json")
    builtin = _replay(trace, LatencyModel(), None)
    assert _replay(trace, shipped.to_latency_model(), shipped) == builtin

    wide = LatencyProfile.from_json({"name": "wide", "operations": _ops(**{k: SPREAD for k in ("ledger.append", "rpc", "meta.cas")})})
    model = wide.to_latency_model(1)
    runs = [_replay(trace, m, wide) for m in (model, model, wide.to_latency_model(2))]
    assert runs[0] == runs[1] and runs[0] != runs[2] and runs[0] != builtin  # the model is fresh per run

    def delivered(run: list[str]) -> set[tuple[str, str]]:
        return {(d[1], d[2]) for r in run for d in _rows(json.loads(r)[2])}

    assert delivered(runs[0]) == delivered(runs[2]) == delivered(builtin) and len(delivered(builtin)) == 8


def _rows(deliveries: dict[str, list[object]]) -> list[tuple[object, ...]]:
    return list(zip(*(deliveries[k] for k in ("topic", "subscription", "msg"))))


def test_cli_latency_flags_reach_the_manifest_and_report_refuses_an_a_b_across_profiles(
        plain_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "bad.json", {"name": "b", "operations": _ops(rpc={"p50": 5, "p90": 4})})
    run = ["replay", "--trace", str(plain_trace), "--engine", "v4", "--drain-ms", "0", "--out"]
    assert main([*run, str(tmp_path / "x"), "--latency-profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "operations.rpc.p90" in err and not (tmp_path / "x").exists()
    assert main([*run, str(tmp_path / "x"), "--latency", "meta.nope=3"]) == 2
    assert "--latency 'meta.nope=3'" in capsys.readouterr().err

    assert main([*run, str(tmp_path / "a"), "--latency-profile", "constants", "--latency", "rpc=250",
                 "--latency-seed", "3"]) == 0
    cfg = json.loads((tmp_path / "a" / "manifest.json").read_text())["runs"]["v4"]["config"]
    shipped = LatencyProfile.load(LATENCY_DIR / "constants.json")
    assert cfg["latency"]["rpc"] == 250 and cfg["latency_profile"]["sha256"] == shipped.sha256
    assert cfg["latency_profile"]["overrides"] == {"rpc": 250} and cfg["latency_profile"]["seed"] == 3
    assert cfg["latency_profile"]["name"] == "constants" and cfg["latency_profile"]["path"].endswith("constants.json")

    other = _write(tmp_path / "other.json", {"name": "other", "operations": _ops(rpc={"constant": 250})})
    assert main([*run, str(tmp_path / "b"), "--latency-profile", str(other)]) == 0
    capsys.readouterr()
    assert main(["report", "--results", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "r")]) == 0
    (comp,) = json.loads((tmp_path / "r" / "summary.json").read_text())["comparisons"]
    assert comp["comparable"] is False and "different latency profiles" in comp["why_not"]
    assert "baseline constants" in comp["why_not"] and "new other" in comp["why_not"]


def test_every_shipped_profile_loads_and_says_where_when_and_how_it_was_measured() -> None:
    shipped = {f.stem: LatencyProfile.load(f) for f in LATENCY_DIR.glob("*.json")}
    assert "constants" in shipped
    for name, prof in shipped.items():
        assert prof.name == name
        if name != "constants":
            prov = prof.provenance
            assert prov["measured_at"] and prov["host"] and prov["versions"] and prov["samples"] >= 100
            # calibrate, or validate --calibrate (which measures the same way on the broker it judges)
            command = prov["command"]
            assert command.startswith("txnbench calibrate") or (
                command.startswith("txnbench validate") and " --calibrate" in command), command
            assert "kept from constants" in prov["notes"]


def test_scenarios_run_on_the_profile_given() -> None:
    from bench.scenarios import scenarios as sc

    def end_ms(latency: tuple[LatencyModel, LatencyProfile] | None) -> dict[str, object]:
        (s,) = sc.run_scenarios(["endtxn"], params={"endtxn": {"sizes": (1,)}}, latency=latency)
        return {r.metric: r.values["end-txn ms"] for r in s.rows}

    slow = LatencyProfile.from_json({"name": "slow-rpc", "operations": _ops(rpc={"constant": 20_000})})
    default, slowed = end_ms(None), end_ms((slow.to_latency_model(), slow))
    assert default.keys() == slowed.keys() and all(slowed[k] > default[k] for k in default if k.startswith("v4"))  # type: ignore[operator]


def test_a_kind_added_later_reads_as_zero_from_a_profile_without_it_and_is_written_only_when_set(tmp_path: Path) -> None:
    """Profiles shipped before ``meta.list_keys`` existed load as they billed: it costs 0, and
    their files write back byte for byte; a profile that sets it, and a resource that holds its
    slot for a walk's own time, read back equal."""
    from engine.profile import LATER_KINDS

    older = {k: v for k, v in _ops().items() if k not in LATER_KINDS}
    prof = LatencyProfile.from_json({"name": "old", "operations": older})
    for kind in ("meta.list_keys", "meta.list_entries"):
        assert prof.operations[kind] == Distribution.constant(0)
        assert kind not in prof.to_text()
    walks = LatencyProfile.from_json({"name": "new", "operations": _ops(**{"meta.list_keys": {"constant": 2_400}}),
                                      "resources": {"metadata": {"service_us": 500, "concurrency": 1,
                                                                 "kinds": ["meta.cas", "meta.list_keys", "meta.write"],
                                                                 "latency_kinds": ["meta.list_keys"]}}})
    back = LatencyProfile.load(walks.save(tmp_path / "w.json").path or "")
    assert back.operations["meta.list_keys"] == Distribution.constant(2_400)
    assert back.resources["metadata"].latency_kinds == frozenset({"meta.list_keys"})
    assert "its latency" in back.resources["metadata"].describe("metadata")


def test_a_split_kind_reads_as_the_kind_it_was_split_from_and_is_written_only_when_it_differs(tmp_path: Path) -> None:
    """Profiles shipped before ``rpc.broker`` billed the broker's own hops as ``rpc``, and before
    ``meta.scan_get`` a scan's GETs as ``meta.read``: they load so, and write back byte for byte;
    a profile that measured its own reads back equal."""
    from engine.profile import SAME_AS

    hop = {"p0": 150, "p50": 300, "p99": 900}
    read = {"p50": 21, "p90": 39, "p99": 43}
    older = {k: v for k, v in _ops(rpc=hop, **{"meta.read": read}).items() if k not in SAME_AS}
    prof = LatencyProfile.from_json({"name": "old", "operations": older})
    assert prof.operations["rpc.broker"] == prof.operations["rpc"] == Distribution(((0.0, 150), (0.5, 300), (0.99, 900)))
    assert prof.operations["meta.scan_get"] == prof.operations["meta.read"] == Distribution(((0.5, 21), (0.9, 39), (0.99, 43)))
    # (the later kinds at 0 are left out as well)
    assert json.loads(prof.to_text())["operations"] == {k: v for k, v in older.items() if v != {"constant": 0}}
    own = LatencyProfile.from_json({"name": "new", "operations": _ops(rpc=hop, **{
        "rpc.broker": {"p50": 120, "p99": 400}, "meta.read": read, "meta.scan_get": {"p50": 1, "p99": 6}})})
    back = LatencyProfile.load(own.save(tmp_path / "n.json").path or "")
    assert back.operations["rpc.broker"] == Distribution(((0.5, 120), (0.99, 400)))
    assert back.operations["meta.scan_get"] == Distribution(((0.5, 1), (0.99, 6)))
    assert back.operations["rpc"] == prof.operations["rpc"] and back.operations == own.operations


def test_a_split_kind_left_as_its_origin_draws_from_the_origins_stream_and_its_own_once_it_differs() -> None:
    """A profile that does not set ``meta.scan_get`` bills an emulated scan's GETs as the
    ``meta.read`` draws it billed before the kind existed, call for call; one that sets it draws
    it from a stream of its own, leaving ``meta.read``'s draws to the point reads."""
    read = {"p0": 5, "p50": 21, "p90": 39, "p99": 43}
    older = {k: v for k, v in _ops(**{"meta.read": read}).items() if k != "meta.scan_get"}
    calls = ["meta.read", "meta.scan_get", "meta.scan_get", "meta.read", "meta.scan_get"] * 40
    before = LatencyProfile.from_json({"name": "old", "operations": older}).to_latency_model(7)
    as_reads = [before.of("meta.read") for _ in calls]  # what every one of them billed before the split
    split = LatencyProfile.from_json({"name": "old", "operations": older}).to_latency_model(7)
    assert [split.of(k) for k in calls] == as_reads
    assert len(set(as_reads)) > 10  # drawn, not a constant
    own = LatencyProfile.from_json({"name": "new", "operations": {**older, "meta.scan_get": {"p50": 1, "p99": 3}}})
    model = own.to_latency_model(7)
    got = [model.of(k) for k in calls]
    reads = [v for k, v in zip(calls, got) if k == "meta.read"]
    assert reads == as_reads[:len(reads)]  # the point reads keep the stream to themselves
    assert all(1 <= v <= 3 for k, v in zip(calls, got) if k == "meta.scan_get")
