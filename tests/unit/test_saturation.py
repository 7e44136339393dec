"""Throughput at saturation in the model (issue 17, item 3): ``--pacing asap`` replays, resources
whose queues bound the rate, and calibrate's fit of the resources to a broker's saturated rates."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.calibrate import saturation
from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.trace.trace import read_events
from bench.trace.tracestats import summarize
from engine.clock import LatencyModel, ResourceSpec
from engine.errors import ConfigError
from engine.profile import LatencyProfile


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return saturation.write_one_partition_trace(tmp_path_factory.mktemp("sat") / "sat.parquet", txns=40)


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return saturation.write_trace(tmp_path_factory.mktemp("mix") / "mix.parquet", events=800)


@pytest.fixture(scope="module")
def short_mix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Half of ``mix``: the walk's fit replays it some 200 times (its test took 86 s on 800 rows, 53 on 400)."""
    return saturation.write_trace(tmp_path_factory.mktemp("short") / "mix.parquet", events=400)


def test_asap_pacing_issues_the_rows_one_microsecond_apart_in_order(trace: Path) -> None:
    paced = Replayer(RunConfig(engine="v4")).run(read_events(trace))
    asap = Replayer(RunConfig(engine="v4", pacing="asap")).run(read_events(trace))
    rows = sum(1 for _ in read_events(trace))
    assert max(asap.txns["opened_ts_us"]) < rows  # every new_txn issued by the row's ordinal, not its timestamp
    assert max(paced.txns["opened_ts_us"]) > 40 * 1_000  # the trace spaces its txns
    # each END_TXN goes once its txn's sends are answered (jvm TraceRunner.end)
    assert min(asap.txns["commit_requested_ts_us"]) >= LatencyModel().of("ledger.append")
    assert sorted(asap.txns["outcome"]) == sorted(paced.txns["outcome"])  # the same txns, the same outcomes
    with pytest.raises(ConfigError, match="virtual-time"):
        RunConfig(engine="v4", pacing="asap", time_mode="wall")
    with pytest.raises(ConfigError, match="pacing"):
        RunConfig(engine="v4", pacing="later")


def test_asap_pacing_keeps_the_trace_clients_in_flight_bound(trace: Path) -> None:
    """jvm TraceRunner takes a permit per new_txn, publish, commit and abort until it is answered
    (--max-in-flight): at most ``asap_in_flight`` are unanswered at once, a row waiting for an
    answer otherwise; the same txns end the same way."""
    rows = sum(1 for _ in read_events(trace))
    free = Replayer(RunConfig(engine="v4", pacing="asap", asap_in_flight=None)).run(read_events(trace))
    wide = Replayer(RunConfig(engine="v4", pacing="asap")).run(read_events(trace))  # 1,000: never reached here
    assert free.txns == wide.txns and free.counts == wide.counts
    tight = Replayer(RunConfig(engine="v4", pacing="asap", asap_in_flight=3)).run(read_events(trace))
    assert sorted(tight.txns["outcome"]) == sorted(free.txns["outcome"])
    assert max(free.txns["opened_ts_us"]) < rows  # one microsecond apart
    # with three slots and each txn's ten publishes answered one append later, the rows wait
    assert max(tight.txns["commit_requested_ts_us"]) > 40 * LatencyModel().of("ledger.append")
    ends = sorted(zip(tight.txns["commit_requested_ts_us"], tight.txns["end_ts_us"]))
    assert max(sum(1 for s, e in ends if s <= t < e) for t, _ in ends) <= 3  # END_TXNs unanswered at once
    with pytest.raises(ConfigError, match="asap_in_flight"):
        RunConfig(engine="v4", pacing="asap", asap_in_flight=0)


def test_a_saturated_resource_bounds_the_committed_rate(trace: Path) -> None:
    profile = LatencyProfile.constants()
    free = saturation.model_rates(profile, {}, trace)
    slow = saturation.model_rates(profile, {"metadata": ResourceSpec(2_000, 1, shared=True, kinds=saturation.WRITES)},
                                  trace)
    assert slow["v4"] == free["v4"]  # v4 writes no transaction state to the metadata store
    assert slow["v5"] < free["v5"] / 2
    one = saturation.model_rates(profile, {"bookie": ResourceSpec(None, 1, shared=True)}, trace, ("v4",))
    four = saturation.model_rates(profile, {"bookie": ResourceSpec(None, 4, shared=True)}, trace, ("v4",))
    assert one["v4"] < four["v4"] <= free["v4"]


def _broker_reads() -> LatencyProfile:
    """The constants with reads at the broker's RocksDB speed (the default profile's meta.read
    p50 is 21 µs; a scan's storeGet, meta.scan_get, less): at the constants' 300 µs, an END_TXN's
    scan of every op record under /txn/op,
    read on the connection's thread, sets v5's rate, and a write's service time barely moves it
    (800 µs instead of 400 took it from 7.0 to 6.8 txn/s): nothing to fit it from."""
    from engine.clock import Distribution

    base = LatencyProfile.constants()
    fast = Distribution.constant(20)
    return base.derived(operations={**base.operations, "meta.read": fast, "meta.list": fast, "meta.scan_get": fast})


def test_the_fit_recovers_resources_from_the_rates_they_give(trace: Path) -> None:
    profile = _broker_reads()
    truth = {"bookie": ResourceSpec(None, 3, shared=True),
             "metadata": ResourceSpec(800, 1, shared=False, kinds=saturation.WRITES)}  # as the fit shapes it
    rates = saturation.model_rates(profile, truth, trace)  # what a broker with these resources would show
    fitted, keys_us, note = saturation.fit(profile, rates, trace)
    assert fitted["bookie"] == truth["bookie"] and keys_us == 0  # no history recorded: the profile's walk cost
    assert fitted["metadata"].service_us == pytest.approx(800, rel=0.03)
    assert fitted["metadata"].kinds == saturation.WRITES | {saturation.WALK} and fitted["metadata"].concurrency == 1
    assert "bookie x3" in note and f"{rates['v5']:.1f} txn/s on the broker" in note
    assert isinstance(LatencyModel().with_resources(fitted).resources["bookie"], ResourceSpec)


def test_the_fit_replays_with_the_profiles_other_resources_as_its_profile_will(trace: Path) -> None:
    """The cores a kept fit gave (bench.calibrate.rates_fit) stay in the profile a refit writes, so
    its bookie and store are fitted with them working: else the rates it fitted are not its model's."""
    cpu = ResourceSpec.cores({"rpc": 300}, 1)  # one core that binds v4's rate below the bookie's
    profile = _broker_reads().derived(resources={"cpu": cpu})
    truth = {"cpu": cpu, "bookie": ResourceSpec(None, 3, shared=True),
             "metadata": ResourceSpec(800, 1, shared=False, kinds=saturation.WRITES)}
    rates = saturation.model_rates(profile, truth, trace)
    assert rates["v4"] < saturation.model_rates(profile, {k: truth[k] for k in ("bookie", "metadata")}, trace)["v4"]
    fitted, _, note = saturation.fit(profile, rates, trace)
    assert fitted["bookie"] == truth["bookie"] and "cpu" not in fitted
    assert fitted["metadata"].service_us == pytest.approx(800, rel=0.03)
    assert "; cpu as the profile had it, in every replay of this fit" in note


def test_the_headline_says_when_a_run_saturated_the_profiles_resources() -> None:
    from bench.report.headline import capacity_line

    def rs(queued: int) -> dict[str, object]:
        return {"manifest": {"runs": {"v4": {"config": {"latency_profile": {"resources": {
                    "metadata": "service 1046 µs x1, one per run"}}}}, "v5": {"config": {}}}},
                "counts": {"v4": {}, "v5": {"capacity.metadata.requests": 10, "capacity.metadata.busy_us": 10_000,
                                            "capacity.metadata.queued_us": queued}}}

    hot = capacity_line(rs(50_000))  # 5 ms waited per 1 ms served
    assert hot is not None and "v5's metadata saturated" in hot and "metadata 5.00 ms" in hot
    calm = capacity_line(rs(2_000))
    assert calm is not None and "below saturation" in calm and "metadata 200 µs" in calm
    assert capacity_line({"manifest": {"runs": {"v4": {"config": {"latency_profile": {}}}}}, "counts": {}}) is None


def test_the_headline_names_the_broker_thread_whose_metadata_queue_saturated() -> None:
    from bench.report.headline import capacity_line

    counts = {"capacity.metadata@io.requests": 10, "capacity.metadata@io.busy_us": 10_000,
              "capacity.metadata@io.queued_us": 50_000, "capacity.metadata@event.requests": 10,
              "capacity.metadata@event.busy_us": 10_000, "capacity.metadata@event.queued_us": 2_000}
    line = capacity_line({"manifest": {"runs": {"v5": {"config": {"latency_profile": {"resources": {
        "metadata": "service 1046 µs x1, one per broker thread"}}}}}}, "counts": {"v5": counts}})
    assert line is not None and "v5's metadata (io thread) saturated" in line
    assert "metadata (event thread) 200 µs" in line and "event thread) saturated" not in line


def test_a_saturated_runs_latency_answers_say_the_ratio_is_the_runs_not_the_designs() -> None:
    """Its queue grows with the trace's length: the latency questions' answers say so, the others
    (write amplification) do not; with nothing saturated the answers stay as they were."""
    from bench.report.headline import Finding, mark_saturated, saturated_runs

    def rs(queued: int) -> dict[str, object]:
        return {"manifest": {"runs": {"v4": {}, "v5": {}}},
                "counts": {"v4": {"capacity.bookie.requests": 10, "capacity.bookie.busy_us": 10_000,
                                  "capacity.bookie.queued_us": 100},
                           "v5": {"capacity.metadata.requests": 10, "capacity.metadata.busy_us": 10_000,
                                  "capacity.metadata.queued_us": queued}}}

    findings = [Finding("End-txn latency (p50)", "v4 wins, 3× lower.", "v4", 3.0, "end_txn_us.p50", "exact"),
                Finding("Writes", "v4 wins.", "v4", 2.0, "derived.write_amplification", "exact")]
    assert saturated_runs(rs(50_000)) == ["v5"] and saturated_runs(rs(2_000)) == []
    marked = mark_saturated(findings, saturated_runs(rs(50_000)))
    assert marked[0].text.startswith("v4 wins, 3× lower. Saturated (v5): latencies that grow with the trace's length")
    assert marked[1] == findings[1]
    assert mark_saturated(findings, saturated_runs(rs(2_000))) == findings


def test_the_fit_recovers_resources_on_the_mix_calibrate_runs(mix: Path) -> None:
    """The saturation trace is the small workload's mix (acks, several partitions): the fit finds
    the resources that gave its rates there too, and says which trace it fitted on."""
    profile = _broker_reads()
    truth = {"bookie": ResourceSpec(None, 2, shared=True),
             "metadata": ResourceSpec(600, 1, shared=False, kinds=saturation.WRITES)}
    rates = saturation.model_rates(profile, truth, mix)
    fitted, _, note = saturation.fit(profile, rates, mix)
    assert fitted["bookie"] == truth["bookie"]
    assert fitted["metadata"].service_us == pytest.approx(600, rel=0.03)
    rows = sum(1 for _ in read_events(mix))
    assert f"on {rows} rows of the small workload (" in note


def test_a_measurement_names_the_trace_a_refit_replays(tmp_path: Path) -> None:
    mix = saturation.trace_of({"mix": "small", "events": 300, "seed": 1}, tmp_path / "a.parquet")
    assert sum(1 for _ in read_events(mix)) >= 300 and any(e.op == "ack" for e in read_events(mix))
    old = saturation.trace_of({"txns": 30, "messages_per_txn": 10}, tmp_path / "b.parquet")  # before the mix
    assert sum(1 for e in read_events(old) if e.op == "new_txn") == 30
    assert {e.topic for e in read_events(old) if e.topic} == {saturation.TOPIC}
    with pytest.raises(ValueError, match="workload 'omb' seed 1"):
        saturation.trace_of({"mix": "omb", "events": 300, "seed": 1}, tmp_path / "c.parquet")


def test_each_designs_rows_as_often_over_as_its_runs_replayed_them(tmp_path: Path) -> None:
    """A measurement records how many times over each design replayed the mix (``repeat``);
    ``--refit`` replays the same; a record without it (measured before) replays them once."""
    record = {"mix": "small", "events": 300, "seed": 1, "repeat": {"v4": 3, "v5": 1}}
    traces = saturation.traces_of(record, tmp_path)
    once = summarize(traces["v5"]).txns
    assert once > 0 and summarize(traces["v4"]).txns == 3 * once
    assert traces["v5"] == tmp_path / "saturation.parquet"
    (tmp_path / "older").mkdir()
    older = saturation.traces_of({"mix": "small", "events": 300, "seed": 1}, tmp_path / "older")
    assert older["v4"] == older["v5"] and summarize(older["v4"]).txns == once


def test_the_fit_recovers_a_listings_walk_from_v5s_rates_at_growing_histories(short_mix: Path) -> None:
    """Three v5 runs at growing histories (the txns the store held before each) fall in rate as
    each scan walks more counters: the fit finds the walk's cost per thousand keys from the fall,
    and the writes' service time at the median run's history."""
    from engine.clock import Distribution

    base = LatencyProfile.constants()
    truth_ops = {**base.operations, saturation.WALK: Distribution.constant(60_000)}
    truth = LatencyProfile(base.name, base.provenance, truth_ops)
    resources = {"bookie": ResourceSpec(None, 2, shared=True), "metadata": saturation._metadata(600)}
    histories = [100, 400, 700]
    runs = [saturation.model_rates(truth, resources, short_mix, ("v5",), h)["v5"] for h in histories]
    assert runs[0] > runs[1] > runs[2]  # the walk slows v5 as the history grows
    rates = {"v4": saturation.model_rates(truth, resources, short_mix, ("v4",))["v4"], "v5": runs[1]}
    record = {"txns_before": {"v4": [1, 2, 3], "v5": [histories[2], histories[0], histories[1]]},
              "runs": {"v5": [runs[2], runs[0], runs[1]]}}  # in the order measured, not by history
    fitted, keys_us, note = saturation.fit(base, rates, short_mix, record)
    assert keys_us == pytest.approx(60_000, rel=0.1)
    # the threads serve by arrival, so on this short trace v5's rate moves little with the
    # service time (each txn's chain, not the thread, bounds much of it, its END_TXN's event puts
    # one after another on an emulated store): found to 25 %
    assert fitted["metadata"].service_us == pytest.approx(600, rel=0.25)
    assert "(400 txns)" in note and "at 100/400/700 txns before" in note
    # with the broker's mean put in those runs, a write holds its thread that long, and the walk is fitted alone
    measured = {**record, "mean_put_us": {"v4": [900.0, 900.0, 900.0], "v5": [590.0, 610.0, 600.0]}}
    fitted, keys_us, note = saturation.fit(base, rates, short_mix, measured)
    assert fitted["metadata"].service_us == 600 and keys_us == pytest.approx(60_000, rel=0.1)
    assert "600 µs each (the median of the broker's mean put" in note
    assert saturation.v5_histories({"txns_before": {"v5": [5, None]}, "runs": {"v5": [1.0, 2.0]}}) == []
