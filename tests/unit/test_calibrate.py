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
    assert got == {"p0": 1, "p50": 500, "p90": 900, "p95": 950, "p99": 990, "p999": 999, "max": 1000}


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


def test_pulsar_probes_skip_the_warmup_and_time_each_plain_message(tmp_path: Path) -> None:
    from bench.calibrate import calibrate_pulsar as cp

    w = cp.WARMUP_TXNS
    lines = [
        {"ev": "op", "op": "publish", "msg": "p0", "ok": True, "due_us": 0, "start_us": 9_000_000, "end_us": 9_100_000},
        {"ev": "deliver", "msg": "p0", "t_us": 9_900_000, "redelivery": False},  # warm-up: skipped
        {"ev": "op", "op": "publish", "msg": f"p{w}", "ok": True, "due_us": 100, "start_us": 150, "end_us": 3150},
        {"ev": "op", "op": "publish", "msg": f"x{w}", "ok": True, "due_us": 100, "start_us": 160, "end_us": 9999},
        {"ev": "deliver", "msg": f"p{w}", "t_us": 4150, "redelivery": False},
        {"ev": "deliver", "msg": f"p{w}", "t_us": 8000, "redelivery": True},  # a redelivery: not the first
        {"ev": "op", "op": "publish", "msg": f"p{w + 1}", "ok": True, "due_us": 200, "start_us": 230, "end_us": 2230},
    ]
    events = tmp_path / "e.jsonl"
    events.write_text("\n".join(json.dumps(e) for e in lines) + "\n")
    publish, after, lag = cp.plain_probes(events)
    assert sorted(publish) == [2000, 3000] and after == [1000] and lag == 50
    late = lines[2] | {"due_us": 150 - cp.MAX_LAG_US - 1}  # issued late: its time is the client's queue
    events.write_text("\n".join(json.dumps(e) for e in [late, *lines[3:]]) + "\n")
    publish, after, lag = cp.plain_probes(events)
    assert publish == [2000] and after == [1000] and lag == cp.MAX_LAG_US + 1


def test_a_profile_says_how_every_kind_was_measured() -> None:
    from bench.calibrate.measurement import Measurement

    m = Measurement("pulsar", "5")
    m.operations["ledger.append"] = {"p50": 3000, "p99": 9000}
    m.how["ledger.append"] = "metric"
    m.notes["ledger.append"] = "a metric"
    m.operations["rpc"] = {"p50": 200}
    m.unmeasurable["meta.watch"] = "no metric"
    prof = cal.build_profile("p", [m], 10, "txnbench calibrate")
    kinds = prof.provenance["kinds"]
    assert list(kinds) == list(DEFAULT_LATENCIES_US)
    assert kinds["ledger.append"] == {"how": "metric", "backend": "pulsar", "source": "a metric"}
    assert kinds["rpc"]["how"] == "probe"
    assert kinds["meta.watch"] == {"how": "not measurable", "backend": "pulsar", "source": "no metric",
                                   "value": "kept from constants"}
    assert kinds["meta.read"] == {"how": "not measured", "source": "", "value": "kept from constants"}
    assert prof.operations["meta.watch"].points == ((0.5, DEFAULT_LATENCIES_US["meta.watch"]),)
    assert len(prof.provenance["load_average"].split()) == 3


def test_pulsar_append_comes_from_the_runs_own_topic_buckets() -> None:
    from bench.calibrate import calibrate_pulsar as cp

    mine, other = "persistent://public/tb-1-v4-default/calib-partition-0", "persistent://public/tb-0-v4-default/calib-partition-0"

    def buckets(topic: str, le: dict[str, float]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(f"{cp.WRITE}_{k}", (("topic", topic),)): v for k, v in le.items()}

    before = buckets(other, {"count": 4, "le_1": 4})  # an earlier run's topic: not this one
    after = {**before, **buckets(mine, {"count": 10, "le_0_5": 0, "le_1": 2, "le_5": 6, "le_10": 2, "overflow": 0})}
    q, n, topic = cp.topic_write_quantiles(before, after)
    # ranks 5, 9, 9.9 of 10: inside (1, 5] ms at 3/6, then (5, 10] ms at 1/2 and 1.9/2
    assert (q, n, topic) == ({"p50": 3000, "p90": 7500, "p99": 9750}, 10, mine)
    assert cp.topic_write_quantiles(after, after) == ({}, 0, "")


def test_pulsar_append_is_the_plain_runs_summary_else_the_topics_buckets() -> None:
    """``ledger.append``: the publish summary scraped after the plain run's stats interval; when no
    stats update followed that run (None: the summary may hold an earlier interval, the warm-up's),
    the v4 txn run's topic's buckets, and the note says why; with neither, unmeasured."""
    from bench.calibrate import calibrate_pulsar as cp
    from bench.calibrate.measurement import Measurement

    topic = "persistent://public/tb-1-v4-default/calib-partition-0"
    v4 = ({}, {(f"{cp.WRITE}_{k}", (("topic", topic),)): v for k, v in
               {"count": 10, "le_0_5": 0, "le_1": 2, "le_5": 6, "le_10": 2, "overflow": 0}.items()})
    plain = {(cp.PUBLISH, (("quantile", q),)): v for q, v in {"0.0": 1.327, "0.5": 1.45, "0.99": 3.699}.items()}
    m = Measurement("pulsar", "5")
    assert cp._append(m, plain, v4, 300) == {"p0": 1327, "p50": 1450, "p99": 3699}
    assert "plain publishes alone in that interval" in m.notes["ledger.append"]
    m = Measurement("pulsar", "5")
    assert cp._append(m, None, v4, 300) == {"p50": 3000, "p90": 7500, "p99": 9750}  # the buckets, not the stale summary
    assert m.notes["ledger.append"].endswith("no stats update of the broker followed the plain run)")
    m = Measurement("pulsar", "5")
    assert cp._append(m, None, ({}, {}), 300) == {} and "ledger.append" in m.unmeasurable


def test_rpc_broker_is_the_hop_of_the_runs_own_end_txn_on_partition_requests_else_rpc() -> None:
    """``rpc.broker``: the v4 txn run's topic's ``pulsar_txn_tb_client_commit_latency`` (ns, as a
    broker exports it) read as two hops and the marker's append; an earlier run's topic is not
    this run's; with none exported, taken = rpc."""
    from bench.calibrate import calibrate_pulsar as cp
    from bench.calibrate.measurement import Measurement

    mine, other = "persistent://public/tb-1-v4-default/calib-partition-0", "persistent://public/tb-0-v4-default/calib-partition-0"

    def summary(topic: str, q: dict[str, float], count: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {(cp.TB_CLIENT, (("quantile", k), ("topic", topic))): v for k, v in q.items()}
        return {**out, (cp.TB_CLIENT + "_count", (("topic", topic),)): count}

    before = summary(other, {"0.5": 9e6}, 3)
    after = {**before, **summary(mine, {"0.5": 1_847_903.0, "0.75": 2e6, "0.95": 3_156_151.0, "0.99": 5_384_680.0,
                                        "0.9999": float("nan"), "1.0": 7_357_240.0}, 500)}
    tb, n = cp.tb_client_quantiles(before, after)
    assert (tb, n) == ({"p50": 1848, "p95": 3156, "p99": 5385, "max": 7357}, 500)
    assert cp.tb_client_quantiles(after, after) == ({}, 0)
    append = {"p0": 285, "p50": 1564, "p95": 2419, "p99": 4436}
    m = Measurement("pulsar", "5")
    m.operations["rpc"] = {"p50": 488}
    cp._broker_hop(m, (before, after), append)
    # fitted up to p95: the Summary's 0.99 may be its maximum (its 1 % rank error)
    assert m.operations["rpc.broker"] == cp.rpc_of({"p50": 1848, "p95": 3156}, append) and m.how["rpc.broker"] == "metric"
    assert 0 < m.operations["rpc.broker"]["p50"] < (1848 - 1564) / 2  # two hops share what the append leaves
    assert m.extra["rpc_broker_probe_us"] == {"end_txn_on_partition": tb, "append": append}
    m = Measurement("pulsar", "5")
    m.operations["rpc"] = {"p50": 488}
    cp._broker_hop(m, (after, after), append)
    assert m.operations["rpc.broker"] == {"p50": 488} and m.notes["rpc.broker"].startswith("taken = rpc")


def test_pulsar_publish_summary_gives_every_exported_quantile_but_no_nan() -> None:
    """``pulsar_broker_publish_latency`` as a broker exports it (ms, quantiles 0 ... 1): the append's
    percentiles, p95 included; a quantile with no observation in the window (NaN) is left out."""
    from bench.calibrate import calibrate_pulsar as cp

    exported = {"0.0": 0.439, "0.5": 1.627, "0.95": 3.492, "0.99": 9.306, "0.999": 84.774, "0.9999": 84.774,
                "1.0": 84.774}
    after = {(cp.PUBLISH, (("cluster", "standalone"), ("quantile", q))): v for q, v in exported.items()}
    assert cp.summary_quantiles(after, cp.PUBLISH) == {"p0": 439, "p50": 1627, "p95": 3492, "p99": 9306,
                                                       "p999": 84774, "max": 84774}
    stale = {k: float("nan") for k in after}
    assert cp.summary_quantiles(stale, cp.PUBLISH) == {}


def test_metadata_ops_in_the_lowest_bucket_spread_over_twice_their_mean_from_the_sum() -> None:
    """90 ops of 0.1 ms (recorded 0 or 1 ms: their sum is 9 ms in expectation) and 10 of 2 ms:
    the 1-ms bucket is spread over [0, 0.2] ms, the mean its ops' share of the sum gives."""
    from bench.calibrate import calibrate_pulsar as cp

    labels = (("type", "get"),)
    cum = {"1.0": 90, "3.0": 100, "+Inf": 100}
    after = {(cp.META + "_bucket", (*labels, ("le", le))): float(c) for le, c in cum.items()}
    after[(cp.META + "_sum", labels)] = 90 * 0.1 + 10 * 2.0
    q, n = cp.histogram_quantiles({}, after, cp.META, {"type": "get"}, lowest_from_sum=True)
    # ranks 50 and 90 of the 90 in [0, 0.2] ms; rank 99 is 9/10 of the way through (1, 3] ms
    assert n == 100 and q["p50"] == round(50 / 90 * 200) and q["p90"] == 200 and q["p99"] == 2800
    plain, _ = cp.histogram_quantiles({}, after, cp.META, {"type": "get"})
    assert plain["p50"] == round(50 / 90 * 1000) and plain["p99"] == 2800


def _as_calibrated(tmp_path: Path) -> Path:
    """The shipped profile as its calibration made it: its hops before the kept validations scaled
    them (bench.calibrate.hops_fit), that fit's record gone, and its coordinator.v4 before the
    kept new-txns' fit (bench.calibrate.new_txn_fit), that fit's record and note gone (the refit
    tests' source)."""
    from bench.calibrate import fit_notes, hops_fit, new_txn_fit
    from engine.clock import Distribution

    shipped = hops_fit.unscaled(LatencyProfile.load("datasets/latency/pulsar-standalone-5.0.0-M1.json"))
    extra = {k: v for k, v in shipped.provenance["extra"].items() if k not in ("pulsar.hops_fit", "pulsar.new_txn_fit")}
    was = Distribution(tuple((q, v) for q, v in shipped.provenance["extra"]["pulsar.new_txn_fit"]["was"]))
    notes = fit_notes.without_own(shipped.provenance["notes"], "pulsar.new_txn_fit")
    return Path(shipped.derived(provenance={**shipped.provenance, "extra": extra, "notes": notes},
                                operations={**shipped.operations, new_txn_fit.KIND: was}
                                ).save(tmp_path / "calibrated.json").path)


def test_refit_fits_the_recorded_rates_again_and_says_when(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--refit``: the profile's measured operations kept, the coordinator requests' handling
    fitted again to the new-txn its probes recorded, its resources from the fit to the rates it
    recorded, the old fits' notes replaced by ones saying when and by what command."""
    from bench.calibrate import coordinator_fit, saturation
    from engine.clock import ResourceSpec

    # refitted once first, so that the source holds every fit's note (a profile as calibrate wrote it has
    # its rpc fit among the measurement's notes)
    monkeypatch.setattr(saturation, "with_resources", lambda profile, rates, measured: (profile, "the first fit"))
    first = tmp_path / "first.json"
    assert main(["calibrate", "--refit", str(_as_calibrated(tmp_path)), "--out", str(first)]) == 0
    source = LatencyProfile.load(first)
    recorded = source.provenance["extra"]["pulsar.saturation"]["committed_txns_per_s"]
    record = source.provenance["extra"]["pulsar.saturation"]
    asked: list[tuple[dict[str, float], dict[str, object]]] = []

    def fit(profile: LatencyProfile, rates: dict[str, float], measured: dict[str, object]) -> tuple[LatencyProfile, str]:
        asked.append((rates, measured))
        res = {"metadata": ResourceSpec(777, 1, kinds=frozenset({"meta.write"}))}
        return LatencyProfile(profile.name, profile.provenance, profile.operations, res), "the new fit"

    monkeypatch.setattr(saturation, "with_resources", fit)
    out = tmp_path / "p.json"
    assert main(["calibrate", "--refit", str(source.path), "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    assert asked == [(recorded, record)]  # the measurement, which names the trace the rates were measured on
    handled, handling_note = coordinator_fit.fit(source)  # on the profile's own resources (and its rpc, fitted already)
    assert got.operations == handled.operations and got.resources["metadata"].service_us == 777
    assert {k: v for k, v in got.operations.items() if not k.startswith("coordinator.")} == \
        {k: v for k, v in source.operations.items() if not k.startswith("coordinator.")}
    old_notes, notes = source.provenance["notes"], got.provenance["notes"]
    # the measurement's notes stay, the old fits' go (rpc's first: the shipped profile records its probe)
    markers = ("; rpc, consumer.deliver (re-fitted", "; coordinator.v4/v5: ", "; resources")
    kept = old_notes[:min(i for i in (old_notes.find(m) for m in markers) if i >= 0)]
    rpc_note = old_notes[old_notes.find(markers[0]):old_notes.find(markers[1])]
    assert rpc_note.startswith(markers[0]) and notes.count(markers[0][2:]) == 1
    assert notes.startswith(kept + rpc_note + "; coordinator.v4/v5: " + handling_note + "; resources (re-fitted ")
    assert notes.count("coordinator.v4/v5: ") == 1
    # the fits made after the calibration (the notify probe's kind, the kept runs' cores and hops) keep
    # their notes after the refit's, as they were: this fit replaced neither the bookie nor the walk
    later = old_notes[old_notes.index("; meta.notify ["):]
    assert "; resources fitted to the broker's runs at saturation kept in" in later and "scaled x" in later
    assert notes.endswith("): the new fit" + later)
    assert notes.count("resources (re-fitted") == 1
    assert got.provenance["refitted"]["command"].startswith("txnbench calibrate") and got.provenance["refitted"]["at"]
    assert "777 µs" in capsys.readouterr().out


def test_a_structural_refit_keeps_the_later_fits_and_says_what_it_replaced(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The fits made after the calibration (the notify probe's kind, the kept runs' cores, hops,
    new-txns and walk) keep their notes and records, each said where the refit replaced what it gave; the cores
    stay; the hops' scale is applied again with one note however often the profile is re-fitted."""
    from bench.calibrate import fit_notes, saturation, walk_fit
    from engine.clock import Distribution, ResourceSpec

    def fit(profile: LatencyProfile, rates: dict[str, float], measured: dict[str, object]) -> tuple[LatencyProfile, str]:
        return profile.derived(resources={**profile.resources, "bookie": ResourceSpec(None, 5, shared=True)},
                               operations={**profile.operations, "meta.list_keys": Distribution.constant(3_000)}), "refit"

    monkeypatch.setattr(saturation, "with_resources", fit)
    shipped = LatencyProfile.load("datasets/latency/pulsar-standalone-5.0.0-M1.json")
    walk = f"{walk_fit.NOTE} the broker's v5 runs at saturation kept in there (bench/calibrate/walk_fit.py): 2,000"
    prov = {**shipped.provenance, "notes": shipped.provenance["notes"] + "; " + walk,
            "extra": {**shipped.provenance["extra"], "pulsar.walk_fit": {"walk_us_per_thousand": 2_000}}}
    source = shipped.derived(provenance=prov, operations={**shipped.operations,
                                                          "meta.list_keys": Distribution.constant(2_000)})
    old = source.provenance["notes"]
    later = fit_notes.split(old)[1]  # each later fit's note, in the order the fits were made

    def note(beginning: str) -> str:
        return next(n for n in later if n.startswith(beginning))
    notify, rates, hops, new_txn = (note(b) for b in (fit_notes.NOTIFY, fit_notes.RATES, fit_notes.HOPS,
                                                      fit_notes.NEW_TXN))
    out = tmp_path / "p.json"
    assert main(["calibrate", "--refit", str(source.save(tmp_path / "in.json").path), "--out", str(out)]) == 0
    assert main(["calibrate", "--refit", str(out), "--out", str(out)]) == 0  # twice: the notes do not grow
    got = LatencyProfile.load(out)
    notes, extra = got.provenance["notes"], got.provenance["extra"]
    when = got.provenance["refitted"]["at"]
    assert got.resources["cpu"] == shipped.resources["cpu"] and got.resources["bookie"].concurrency == 5
    assert notes.count(notify) == notes.count(hops) == notes.count(rates) == notes.count("resources (re-fitted") == 1
    # the calibration's own notes first, then the later fits' in the order they were made
    kept_in_order = sorted((notify, rates, hops), key=old.index)
    assert notes.index("resources (re-fitted") < notes.index(kept_in_order[0]) < notes.index(kept_in_order[1]) \
        < notes.index(kept_in_order[2])
    assert f"{rates} [replaced by the refit of {when}: its bookie fitted again to the calibration's own records, " \
           "its cpu kept; calibrate --rates-from to fit it to the kept runs again]" in notes
    assert f"{walk} [replaced by the refit of {when}: its meta.list_keys fitted again" in notes
    assert f"{new_txn} [replaced by the refit of {when}: its coordinator.v4 fitted again" in notes
    assert notes.count("[replaced by the refit") == 3
    assert notes.count("again after the refit") == 1 and notes.endswith("(calibrate --hops-from to fit it again)")
    assert extra["pulsar.rates_fit"]["replaced"] == {"at": when, "what": ["bookie"]}
    assert extra["pulsar.walk_fit"] == {"walk_us_per_thousand": 2_000,
                                        "replaced": {"at": when, "what": ["meta.list_keys"]}}
    assert extra["pulsar.rates_fit"]["from"] == shipped.provenance["extra"]["pulsar.rates_fit"]["from"]
    # fitting the coordinator kinds alone applies no scale again: the refit's "scaled again" note stays
    coordinated = tmp_path / "coordinated.json"
    assert main(["calibrate", "--refit", str(out), "--coordinator-only", "--out", str(coordinated)]) == 0
    assert LatencyProfile.load(coordinated).provenance["notes"].count("again after the refit") == 1


def test_refit_needs_recorded_rates_and_measures_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--refit", "datasets/latency/constants.json", "--out", str(tmp_path / "p.json")]) == 2
    assert "records no broker saturation rates" in capsys.readouterr().err
    assert main(["calibrate", "--refit", "datasets/latency/constants.json", "--pulsar", "pulsar://x:1",
                 "--out", str(tmp_path / "p.json")]) == 2
    assert "not with --redis, --kafka or --pulsar" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_fresh_broker_needs_the_brokers_dir_and_a_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNBENCH_PULSAR_DIR", raising=False)
    out = tmp_path / "p.json"
    assert main(["calibrate", "--pulsar", "pulsar://127.0.0.1:1", "--admin-url", "http://127.0.0.1:1",
                 "--fresh-broker", "--out", str(out)]) == 2
    assert "--fresh-broker needs the broker's scripts/pulsar.sh DIR" in capsys.readouterr().err
    assert main(["calibrate", "--redis", "redis://127.0.0.1:1", "--fresh-broker", "--pulsar-dir", str(tmp_path),
                 "--out", str(out)]) == 2
    assert "give --pulsar too" in capsys.readouterr().err
    assert not out.exists()


def test_client_warm_up_reaches_the_pulsar_measurement(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.calibrate.calibrate_pulsar as cp
    from engine.errors import ConfigError

    def seen(url: str, admin: str, samples: int, progress: object, **kw: object) -> None:
        raise ConfigError(f"measure_pulsar got client_warm_up={kw['client_warm_up']} warm_up_txns={kw['warm_up_txns']} "
                          f"warm_up_jit={kw['warm_up_jit']}")

    monkeypatch.setattr(cp, "measure_pulsar", seen)
    base = ["calibrate", "--pulsar", "pulsar://127.0.0.1:1", "--admin-url", "http://127.0.0.1:1",
            "--out", str(tmp_path / "p.json")]
    assert main(base) == 2  # on by default: a cold client's saturated rates are its JIT's
    assert "client_warm_up=True" in capsys.readouterr().err
    assert main(base + ["--no-client-warm-up"]) == 2
    assert "client_warm_up=False" in capsys.readouterr().err
    # the broker's warm-up: validate's goal unless told (bench.pulsar.validate_run.WARM_UP_TXNS)
    main(base)
    assert "warm_up_txns={'v4': 6000, 'v5': 300}" in capsys.readouterr().err
    main(base + ["--warm-up-txns", "v4=10"])
    assert "warm_up_txns={'v4': 10, 'v5': 300}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(base + ["--warm-up-txns", "v6=10"])
    assert "expected DESIGN=N with DESIGN v4 or v5, got 'v6=10'" in capsys.readouterr().err
    # ... and its JIT's share: 5 % unless told, 1 for not judged (bench.pulsar.validate_run.WARM_UP_JIT)
    main(base)
    assert "warm_up_jit=0.05" in capsys.readouterr().err
    main(base + ["--warm-up-jit", "0.2"])
    assert "warm_up_jit=0.2" in capsys.readouterr().err
    main(base + ["--warm-up-jit", "1"])
    assert "warm_up_jit=None" in capsys.readouterr().err
    for bad in ("1.5", "-0.1", "some"):
        with pytest.raises(SystemExit):
            main(base + ["--warm-up-jit", bad])
        assert f"expected a share from 0 to 1, got '{bad}'" in capsys.readouterr().err


def test_the_probes_wait_for_the_brokers_next_stats_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """The publish Summary's quantiles change only at the broker's stats update (a new interval):
    the wait ends at the first scrape whose quantiles differ, and gives up at its limit."""
    from bench.calibrate import calibrate_pulsar as cp

    def summary(p50_ms: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(cp.PUBLISH, (("quantile", "0.5"),)): p50_ms, (cp.PUBLISH + "_count", ()): 1.0}

    scrapes = iter([summary(1.5), summary(1.5), summary(1.5), summary(0.9)])
    monkeypatch.setattr(cp, "scrape", lambda target: next(scrapes))
    monkeypatch.setattr(cp.time, "sleep", lambda s: None)
    assert cp.await_stats_update(object(), limit_s=60) is not None  # type: ignore[arg-type]
    assert next(scrapes, None) is None  # the fourth scrape ended it
    monkeypatch.setattr(cp, "scrape", lambda target: summary(1.5) | {(cp.PUBLISH + "_count", ()): 2.0})
    assert cp.await_stats_update(object(), limit_s=0.05) is None  # type: ignore[arg-type]


def test_in_session_calibration_writes_the_profile_in_validates_out_and_reruns_its_saturation_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate --calibrate (bench.calibrate.in_session): calibrate's profile lands in the run's
    directory; the recheck replays the saturation trace the calibration recorded, each design's rows
    as many times over as then, and returns both measurements."""
    import bench.calibrate.saturation as sat
    from bench.calibrate.in_session import InSession
    from bench.pulsar.target import parse_target
    from bench.trace.tracestats import summarize

    before = {"mix": sat.MIX, "events": 40, "seed": sat.SEED, "txns": 0, "repeat": {"v4": 3, "v5": 1},
              "runs": {"v4": [600.0], "v5": [40.0]}, "txns_before": {"v5": [100]},
              "committed_txns_per_s": {"v4": 600.0, "v5": 40.0}}
    asked: dict[str, object] = {}

    def calibrate(**kw: object) -> LatencyProfile:
        asked.update(kw)
        base = LatencyProfile.load("datasets/latency/constants.json")
        return base.derived(provenance={**base.provenance, "extra": {"pulsar.saturation": before}}).save(str(kw["out"]))

    def measure(target: object, scratch: Path, progress: object, traces: dict[str, Path], trace: Path,
                tolerate: bool = False) -> dict[str, object]:
        assert tolerate  # a run that lost its connection does not undo the validation around it
        once = summarize(trace).txns
        asked["passes"] = {d: summarize(p).txns // once for d, p in traces.items()}
        return {**before, "committed_txns_per_s": {"v4": 540.0, "v5": 30.0}, "txns_before": {"v5": [900]}}

    monkeypatch.setattr(cal, "calibrate", calibrate)
    monkeypatch.setattr(sat, "measure", measure)
    target = parse_target("pulsar://127.0.0.1:1", "http://127.0.0.1:2", pulsar_dir=str(tmp_path / "broker"))
    session = InSession(target, 50, "txnbench validate --calibrate", "pulsar-standalone-5.0.0-M1", {"v4": 10})
    with pytest.raises(RuntimeError, match="recheck before profile"):
        session.recheck(lambda _line: None)
    got = session.profile(tmp_path, lambda _line: None, fresh=True)
    assert got.path is not None and Path(got.path) == tmp_path / "profile.json" and got.name == "constants"
    assert LatencyProfile.load(got.path).sha256 == got.sha256  # the one it saved
    assert (asked["pulsar"], asked["admin_url"], asked["samples"], asked["fresh_broker"], asked["warm_up_txns"]) == (
        "pulsar://127.0.0.1:1", "http://127.0.0.1:2", 50, True, {"v4": 10})
    assert asked["pulsar_dir"] == str(tmp_path / "broker") and asked["redis"] is None and asked["kafka"] is None
    done = session.recheck(lambda _line: None)
    assert asked["passes"] == {"v4": 3, "v5": 1}
    assert done["saturation_before"]["committed_txns_per_s"] == {"v4": 600.0, "v5": 40.0}
    assert done["saturation_after"] == {"committed_txns_per_s": {"v4": 540.0, "v5": 30.0}, "runs": before["runs"],
                                        "txns_before": {"v5": [900]}, "repeat": {"v4": 3, "v5": 1}}
    assert done["profile"] == "profile.json" and done["minutes_after_calibration"] >= 0
    # the calibrated model's v5 at each measurement's history (the median-rate run's): what the history explains
    model = done["model_v5"]
    assert (model["before"]["history"], model["after"]["history"]) == (100, 900)
    assert 0 < model["after"]["committed_txns_per_s"] <= model["before"]["committed_txns_per_s"]


def test_refit_fits_rpc_again_to_the_probes_publishes_it_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile that recorded its probe's plain publishes and appends (``pulsar.rpc_probe_us``,
    measured from 2026-11-27) gets ``rpc`` and ``consumer.deliver`` fitted again
    (bench/calibrate/hop_fit.py) before the coordinator kinds and resources; one note for it however
    often it is re-fitted."""
    from bench.calibrate import saturation
    from bench.calibrate.calibrate_pulsar import rpc_of
    from bench.calibrate.hop_fit import as_distribution

    monkeypatch.setattr(saturation, "with_resources", lambda profile, rates, measured: (profile, "kept"))
    source = LatencyProfile.load(_as_calibrated(tmp_path))
    probe = {"publish": {"p0": 1_118, "p50": 1_987, "p90": 2_546, "p99": 5_034},
             "append": {"p0": 1_202, "p50": 1_629, "p95": 2_262, "p99": 2_978}}
    # a profile from before rpc.broker was measured: no record of it, and it bills it as its rpc
    extra = {k: v for k, v in source.provenance["extra"].items() if k != "pulsar.rpc_broker_probe_us"}
    prov = {**source.provenance, "extra": {**extra, "pulsar.rpc_probe_us": probe}}
    with_probe = source.derived(provenance=prov, operations={**source.operations, "rpc.broker": source.operations["rpc"]}
                                ).save(tmp_path / "in.json")
    out = tmp_path / "p.json"
    assert main(["calibrate", "--refit", str(with_probe.path), "--out", str(out)]) == 0
    assert main(["calibrate", "--refit", str(out), "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    expected = as_distribution(rpc_of(probe["publish"], probe["append"]))
    assert got.operations["rpc"] == got.operations["consumer.deliver"] == expected != source.operations["rpc"]
    assert got.provenance["notes"].count("rpc, consumer.deliver (re-fitted by bench/calibrate/hop_fit.py") == 1
    assert got.provenance["notes"].count("coordinator.v4/v5: ") == 1
    assert got.operations["rpc.broker"] == expected  # none recorded: kept equal to rpc
    # with the END_TXN_ON_PARTITION requests recorded, rpc.broker is fitted to them
    tb = {"end_txn_on_partition": {"p50": 1_848, "p95": 3_156, "p99": 5_385}, "append": probe["append"]}
    prov = {**prov, "extra": {**prov["extra"], "pulsar.rpc_broker_probe_us": tb}}
    with_tb = source.derived(provenance=prov).save(tmp_path / "tb.json")
    assert main(["calibrate", "--refit", str(with_tb.path), "--out", str(out)]) == 0
    got = LatencyProfile.load(out)
    assert got.operations["rpc.broker"] == as_distribution(rpc_of({"p50": 1_848, "p95": 3_156}, tb["append"])) != expected
    assert got.operations["rpc"] == expected and "rpc.broker to END_TXN_ON_PARTITION" in got.provenance["notes"]
    # without the record, rpc stays as measured
    bare = {k: v for k, v in extra.items() if k not in ("pulsar.rpc_probe_us", "pulsar.hops_fit")}
    unrecorded = source.derived(provenance={**source.provenance, "extra": bare}).save(tmp_path / "bare.json")
    assert main(["calibrate", "--refit", str(unrecorded.path), "--out", str(tmp_path / "q.json")]) == 0
    assert LatencyProfile.load(tmp_path / "q.json").operations["rpc"] == source.operations["rpc"]
