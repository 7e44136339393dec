"""The capacity part of ``txnbench calibrate --pulsar``: the broker's saturated txn rate per design,
turned into the profile's ``resources`` (issue 17, item 3: per shared resource its service time
and concurrency).

The broker runs :func:`write_trace` (:data:`EVENTS` rows of the :data:`MIX` workload, the
compare default: txns over 4 partitions, a subscription, acks) as fast as possible (``--pacing
asap``: every row at once, up to the client's in-flight bound), :data:`RUNS` times per design; the
medians of its committed txns per second are ``R_v4`` and ``R_v5``. Then :func:`fit` searches,
replaying the same trace in the model as fast as possible, for the resources that give the model
those rates. Until 2026-11-26 the trace was txns of :data:`MESSAGES` messages on one partition
and no acks (:func:`write_one_partition_trace`, which ``--refit`` of a profile measured on it
still replays): the v4 rate fitted there (1,094-1,578 committed txn/s in two calibrations with a
warm client) gave the model twice the broker's rate on ``small`` (1,184 against 557-616), whose
deliveries and acks that trace lacks.

- **bookie** (v4's bound: every data entry, marker and coordinator-log entry is an append): one
  for the run (a standalone has one bookie, one journal), each append holding a slot for its own
  latency; the concurrency whose v4 rate is nearest ``R_v4`` (the journal's group commit lets
  several appends share one fsync).
- **metadata** (v5's bound): the writes only (``meta.write``, ``meta.cas``; RocksdbMetadataStore
  runs reads beside the writes' commits: ``storeGet`` takes no transaction, ``storePut`` commits
  a RocksDB transaction), one at a time *per broker thread*, each holding its thread for the
  service time (to 1 %) that gives v5 ``R_v5`` with that bookie. ``storePut`` commits on the
  caller's thread, so the writes of one thread are serial while two threads write side by side:
  the client connection's IO thread (the coordinator's requests, the op records of publishes and
  acks) and the store's notification thread (the participants' reconcile and state tails); see
  ``metadata_v5.txnrecords.IO``. Flight recordings of the broker during saturated v5 runs of
  ``small`` (``benchmarks/broker_threads.py``) show those two threads working, the IO thread mostly
  inside ``Transaction.commit`` under ``storePut``; their CPU time (``benchmarks/broker_cpu.py``)
  is 37-55 % of a core each, most of the rest blocked in the WAL's fsync, and the machine's 2 cores
  88-92 % busy (the trace client's share included). A sequence-key append (an op record, an
  event) is three calls on RocksDB (``AbstractMetadataStore.putWithSequenceKeysCompat``: the
  counter's GET and CAS, then the create), so it holds the thread twice.

The fit makes the model's saturated rates the broker's on this trace; ``txnbench validate`` holds
it against other traces (its saturation row).
"""

from __future__ import annotations

import math
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable

from bench.trace.trace import TraceWriter, trace_metadata
from bench.trace.tracestats import summarize
from engine.clock import Distribution, ResourceSpec
from engine.profile import LatencyProfile

TOPIC = "persistent://public/default/calib-saturation-partition-0"  # the one-partition trace's
MESSAGES = 10  # per txn, in the one-partition trace
MIX = "small"  # the saturation trace's workload (datasets/profiles/small.json)
# Rows of it, about 600 txns: long enough to measure a rate (a warm broker's v4 ran 200 txns in
# 140-380 ms, and its rate moved 2.8x from run to run; see bench.trace.repeated)
EVENTS = 12_000
SEED = 1
RUNS = 3  # per design: a saturated broker's rate moves from run to run; the median is fitted
WRITES = frozenset({"meta.write", "meta.cas"})
WALK = "meta.list_keys"  # a listing's walk over the keys under its prefix, per thousand keys
FITTED = ("bookie", "metadata")  # the resources :func:`fit` gives; a profile's others stay as they are


def write_trace(path: Path, events: int = EVENTS) -> Path:
    """``events`` rows of the :data:`MIX` workload (seed :data:`SEED`)."""
    from bench.trace.workloads import generate, load_profile

    generate(load_profile(MIX), events, SEED, path)
    return path


def write_one_partition_trace(path: Path, txns: int = 200) -> Path:
    """``txns`` txns of :data:`MESSAGES` publishes on one partition, one subscription (its rows
    100 µs apart: asap pacing ignores them): the saturation trace of profiles measured before
    2026-11-26."""
    with TraceWriter(path, metadata={"profile": "calibrate-saturation", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=TOPIC, subscription="sat")
        t = 10_000
        for i in range(txns):
            w.add(t, "new_txn", txn=f"t{i}")
            for j in range(MESSAGES):
                t += 100
                w.add(t, "publish", txn=f"t{i}", topic=TOPIC, msg=f"x{i}.{j}", size=100)
            w.add(t + 100, "commit", txn=f"t{i}")
            t += 200
    return path


def trace_of(record: dict[str, Any], path: Path) -> Path:
    """The saturation trace a measurement (:func:`measure`'s record) ran: the mix, or for a
    profile measured before it, the one-partition trace of its ``txns``."""
    if "mix" in record:
        if record["mix"] != MIX or int(record.get("seed", SEED)) != SEED:
            raise ValueError(f"a saturation measurement of workload {record['mix']!r} seed {record.get('seed')}: "
                             f"this version writes {MIX!r} seed {SEED}")
        return write_trace(path, int(record["events"]))
    return write_one_partition_trace(path, int(record.get("txns", 200)))


def traces_of(record: dict[str, Any], into: Path) -> dict[str, Path]:
    """Per design, the rows its saturation runs replayed (:func:`trace_of`), ``record["repeat"][d]``
    times over (bench.trace.repeated; once where the record has no count: measured before
    2026-11-26 evening), written under ``into``."""
    from bench.pulsar.validate_run import saturation_traces

    repeat = {d: int((record.get("repeat") or {}).get(d, 1)) for d in ("v4", "v5")}
    return saturation_traces(trace_of(record, into / "saturation.parquet"), into, repeat)


def model_rates(profile: LatencyProfile, resources: dict[str, ResourceSpec], trace: Path,
                designs: tuple[str, ...] = ("v4", "v5"), history: int = 0, ops: int | None = None) -> dict[str, float]:
    """Committed txns per second of each design's model replaying ``trace`` as fast as possible
    with ``resources`` (as :func:`bench.replay.measure.committed_rate` counts the broker's); 0
    when none committed (resources so slow that every txn timed out). ``history``: the txns v5's
    store held before (``V5Options.history``), of ``ops`` op records each (None: the trace's,
    ``TraceSummary.ops_per_txn``)."""
    import dataclasses

    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.replay.measure import committed_rate
    from bench.trace.trace import read_events

    latency = profile.to_latency_model(1).with_resources(resources)
    out: dict[str, float] = {}
    if ops is None:
        ops = summarize(trace).ops_per_txn if history else 1
    for cfg in model_configs(latency, profile, trace=trace):
        if cfg.engine not in designs:
            continue
        result = Replayer(dataclasses.replace(cfg.with_history(history, ops), pacing="asap")).run(read_events(trace))
        t = result.txns
        rate = committed_rate({"outcome": o, "end_ts_us": e, "opened_ts_us": s}
                              for o, e, s in zip(t["outcome"], t["end_ts_us"], t["opened_ts_us"]))
        out[cfg.engine] = rate or 0.0
    return out


def v5_histories(record: dict[str, Any] | None) -> list[tuple[int, float]]:
    """The broker's v5 saturation runs as (txns its coordinator had created before, committed
    txn/s), by history; [] when the record has no history for every run (before 2026-11-26)."""
    hs = ((record or {}).get("txns_before") or {}).get("v5") or []
    rs = ((record or {}).get("runs") or {}).get("v5") or []
    if not hs or len(hs) != len(rs) or any(h is None for h in hs):
        return []
    return sorted((int(h), float(r)) for h, r in zip(hs, rs))


def median_history(record: dict[str, Any] | None) -> int:
    """The history (:func:`v5_histories`) of the v5 run whose rate is the median, the one the fit
    matches; 0 without histories."""
    runs = sorted(v5_histories(record), key=lambda hr: hr[1])
    return runs[len(runs) // 2][0] if runs else 0


def fit(profile: LatencyProfile, rates: dict[str, float], traces: Path | dict[str, Path],
        record: dict[str, Any] | None = None) -> tuple[dict[str, ResourceSpec], int, str]:
    """The resources that give the model the broker's saturated ``rates`` (committed txn/s per
    design) on ``traces`` (per design, or one for both), searched by replaying them: the bookie's
    concurrency on v4, then the metadata writes' service time on v5 (whose appends go through
    the same bookie), and ``meta.list_keys`` (µs per thousand keys a listing walks): the third
    value. With the v5 runs' histories in ``record`` (:func:`v5_histories`, at least two apart),
    each v5 replay starts from its run's history; the writes' service time is the broker's mean
    put in those runs where the record has it (``mean_put_us``), else fitted at the median run's
    history; and ``meta.list_keys`` is fitted to the rates of all the runs (least squares of the
    log rates; the note says where each run lands). Without histories ``meta.list_keys`` stays
    the profile's."""
    by = traces if isinstance(traces, dict) else {"v4": traces, "v5": traces}
    trace = by["v4"]
    r4, r5 = rates["v4"], rates["v5"]
    # the resources this fit does not fit (the cores a kept fit gave: rates_fit) work in every
    # replay, as they will in the profile it writes
    others = {k: v for k, v in profile.resources.items() if k not in FITTED}
    bookie_at = lambda c: {**others, "bookie": ResourceSpec(None, c, shared=True)}  # noqa: E731
    tried: dict[int, float] = {}
    c = 1
    while True:  # the model's v4 rate grows with the concurrency: the first at or past the broker's
        tried[c] = model_rates(profile, bookie_at(c), trace, ("v4",))["v4"]
        if tried[c] >= r4 or c >= 256:
            break
        c *= 2
    lo, hi = max(1, c // 2), c
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tried[mid] = model_rates(profile, bookie_at(mid), trace, ("v4",))["v4"]
        lo, hi = (mid, hi) if tried[mid] < r4 else (lo, mid)
    conc = min((lo, hi), key=lambda k: abs(tried.get(k, 0) - r4) if k in tried else float("inf"))
    bookie = ResourceSpec(None, conc, shared=True)

    runs = v5_histories(record)
    at = median_history(record)
    # with histories, a write holds its thread for what the broker's puts took in those runs
    # (MetadataStoreStats: RocksDB commits on the caller's thread, so a put's time is the thread's)
    puts = [float(p) for p in ((record or {}).get("mean_put_us") or {}).get("v5") or [] if p]
    measured = round(statistics.median(puts)) if runs and puts else None
    keys_us = profile.operations["meta.list_keys"].points[0][1] if profile.operations["meta.list_keys"].is_constant \
        else 0

    def with_keys(k: int) -> LatencyProfile:
        return profile.derived(operations={**profile.operations, WALK: Distribution.constant(k)})

    replayed: dict[tuple[int, int, int], float] = {}  # (walk, service, history) -> v5's rate: each replayed once
    ops = summarize(by["v5"]).ops_per_txn  # what each history txn wrote: read once for every replay

    def v5_at(k: int, service: int, history: int) -> float:
        if (k, service, history) not in replayed:
            resources = {**others, "bookie": bookie, "metadata": _metadata(service)}
            replayed[k, service, history] = model_rates(with_keys(k), resources, by["v5"], ("v5",), history, ops)["v5"]
        return replayed[k, service, history]

    def service_for(k: int) -> int:
        if measured is not None:
            return measured
        s_lo, s_hi = 1, 1_000
        while v5_at(k, s_hi, at) > r5 and s_hi < 10_000_000:  # the model's v5 rate falls as a write holds the store longer
            s_lo, s_hi = s_hi, s_hi * 4
        while s_hi - s_lo > max(1, s_lo // 100):  # to 1%
            mid = (s_lo + s_hi) // 2
            s_lo, s_hi = (mid, s_hi) if v5_at(k, mid, at) > r5 else (s_lo, mid)
        return s_hi

    if len(runs) >= 2 and runs[-1][0] > runs[0][0]:
        errors: dict[int, float] = {}

        def error(k: int) -> float:
            """The runs' squared log errors with a walk of ``k`` (and the service time it asks,
            unless measured)."""
            if k not in errors:
                service = service_for(k)
                got = [v5_at(k, service, h) for h, _ in runs]
                errors[k] = sum(math.log(g / r) ** 2 if g > 0 else math.inf for g, (_, r) in zip(got, runs))
            return errors[k]

        # the walk's cost that best gives the broker's rates at all the runs' histories
        keys_us = search_walk(error)
    service = service_for(keys_us)
    metadata = _metadata(service)
    # v4 writes nothing to the store: its rate is the bookie search's at the chosen concurrency
    got = {"v4": tried[conc], "v5": v5_at(keys_us, service, at)}
    if not (got["v4"] and got["v5"]):
        raise RuntimeError(f"calibrate: no resources give the model the broker's saturated rates {rates} ({got})")
    summaries = {d: summarize(p) for d, p in by.items()}
    summary = min(summaries.values(), key=lambda s: s.txns)  # the rows once
    workload = trace_metadata(trace).get("profile", "?")
    shape = (f"{summary.txns} txns of {MESSAGES} messages (one partition" if workload == "calibrate-saturation" else
             f"{summary.rows} rows of the {workload} workload ({summary.txns} txns")
    if any(s.txns != summary.txns for s in summaries.values()):
        shape += "; " + ", ".join(f"{d} replaying them " + (f"{s.txns // summary.txns} times over" if s.txns > summary.txns
                                                            else "once") for d, s in summaries.items())
    note = (f"resources fitted to the broker's saturated rates on {shape}, "
            f"--pacing asap; the model replaying the same rows 1 µs apart): bookie x{conc} (v4 {r4:.1f} committed txn/s "
            f"on the broker, {got['v4']:.1f} in the model), each append holding a slot for its own latency, one bookie "
            f"per run (a standalone's one journal); metadata writes one at a time per broker thread, {service} µs each "
            + ("(the median of the broker's mean put in the v5 runs, MetadataStoreStats; " if measured is not None
               else "(") +
            f"v5 {r5:.1f} txn/s on the broker, {got['v5']:.1f} in the model; RocksdbMetadataStore commits a write on "
            "the caller's thread: the client connection's IO thread and the store's notification thread write side "
            "by side; reads run beside the writes, as storeGet takes no transaction)")
    if others:
        note += "; " + ", ".join(sorted(others)) + " as the profile had it, in every replay of this fit"
    if runs:
        each = [v5_at(keys_us, service, h) for h, _ in runs]
        note += (f"; v5's store starting from the broker's history of its median run ({at:,} txns); a listing's walk "
                 f"{keys_us} µs per thousand keys on the calling thread (RocksdbMetadataStore.getChildrenFromStore: "
                 "every key under the prefix, the sequence counter every earlier txn left among them), fitted to "
                 "v5's rates at the runs' histories: at " + "/".join(f"{h:,}" for h, _ in runs) + " txns before, broker "
                 + "/".join(f"{r:.1f}" for _, r in runs) + ", model " + "/".join(f"{r:.1f}" for r in each) + " txn/s")
    return {"bookie": bookie, "metadata": metadata}, keys_us, note


def search_walk(error: Callable[[int], float]) -> int:
    """The walk's cost (µs per thousand keys) of least ``error``, from 0: doubled from 500 until
    two doublings past the best did not improve on it and the error has risen (a small walk moves
    the rates less than the replays' own steps do, or not at all: a flat error goes on doubling),
    then refined around the best by halving steps."""
    k, best = 500, 0
    while k <= 1_000_000:
        if error(k) < error(best):
            best = k
        elif k >= 4 * max(best, 500) and error(k) > error(best):
            break
        k *= 2
    step = max(best // 4, 125)
    while step >= max(best // 64, 30):
        for near in (best - step, best + step):
            if near >= 0 and error(near) < error(best):
                best = near
        step //= 2
    return best


def _metadata(service: int) -> ResourceSpec:
    """The store's writes: ``service`` µs each, one at a time on each broker thread (the
    resource's instance key, ``metadata_v5.txnrecords.IO`` / ``EVENT``), and the listings' walks,
    each holding its thread for its own time."""
    return ResourceSpec(service, 1, shared=False, kinds=WRITES | {WALK}, latency_kinds=frozenset({WALK}))


def measure(target: Any, scratch: Path, progress: Any = lambda s: None,
            traces: dict[str, Path] | None = None, trace: Path | None = None, tolerate: bool = False) -> dict[str, Any]:
    """The broker's committed txn/s per design on :func:`write_trace` (``trace``, when the caller
    wrote it already), as fast as possible: the median of :data:`RUNS` runs (each run's in
    ``runs``). ``traces``: per design, its rows repeated (bench.pulsar.validate_run.warm_up_broker's),
    recorded as ``repeat``. A run that commits no txn (its client lost the connection) is an
    error, or with ``tolerate`` left out and counted in ``failed_runs`` (a design whose runs all
    failed has no rate)."""
    import dataclasses
    import json

    from bench.pulsar.run import pulsar_replay
    from bench.replay.measure import mean_put_us
    from bench.report.validate import txns_before

    trace = trace or write_trace(scratch / "saturation.parquet")
    txns = summarize(trace).txns
    by = traces or {"v4": trace, "v5": trace}
    repeat = {d: summarize(p).txns // txns for d, p in by.items()}
    runs: dict[str, list[float]] = {"v4": [], "v5": []}
    puts: dict[str, list[float | None]] = {"v4": [], "v5": []}
    before: dict[str, list[int | None]] = {"v4": [], "v5": []}  # the txns each design's coordinator had created
    failed: dict[str, int] = {}
    for i in range(RUNS):
        for design in ("v4", "v5"):
            times = f", {repeat[design]} times over" if repeat[design] > 1 else ""
            progress(f"pulsar {design}: {EVENTS} rows of {MIX} ({txns} txns{times}) as fast as possible "
                     f"(saturation, run {i + 1} of {RUNS})")
            out = scratch / f"sat-{design}-{i}"
            manifest = pulsar_replay(by[design], [design], dataclasses.replace(target, pacing="asap"), out)
            rate = manifest["runs"][design].get("rates", {}).get("committed_txns_per_s")
            if not rate:
                if not tolerate:
                    raise RuntimeError(f"calibrate: the broker committed no txn of the saturation trace ({design})")
                progress(f"pulsar {design}: the broker committed no txn in this run (left out)")
                failed[design] = failed.get(design, 0) + 1
                continue
            runs[design].append(float(rate))
            puts[design].append(mean_put_us(json.loads((out / "counts.json").read_text()).get(design, {})))
            before[design].append(txns_before({"path": out}, design))
    # the broker's mean metadata put in each run (MetadataStoreStats): what one write takes at
    # saturation, against the fitted service, which also holds the thread's other work
    # and how many txns each run's coordinator had created before it (on a RocksDB store v5's rate
    # falls with them: bench.report.validate.txns_before)
    return {"mix": MIX, "events": EVENTS, "seed": SEED, "txns": txns, "repeat": repeat, "runs": runs, "mean_put_us": puts,
            "txns_before": before, **({"failed_runs": failed} if failed else {}),
            "committed_txns_per_s": {d: statistics.median(r) for d, r in runs.items() if r}}


def with_resources(profile: LatencyProfile, rates: dict[str, float], record: dict[str, Any]) -> tuple[LatencyProfile, str]:
    """``profile`` with the resources :func:`fit` gives for ``rates``, measured by :func:`measure`
    on the trace its ``record`` names (:func:`trace_of`)."""
    with tempfile.TemporaryDirectory(prefix="txnbench-saturation-") as tmp:
        resources, keys_us, note = fit(profile, rates, traces_of(record, Path(tmp)), record)
    return profile.derived(operations={**profile.operations, WALK: Distribution.constant(keys_us)},
                           resources={**profile.resources, **resources}), note
