"""``txnbench validate``: one trace through the model (both designs, virtual time, v5 as shipped on
the emulated store a standalone broker runs) and through the real broker twice (at the trace's
timestamps, then as fast as possible), then the "model vs broker" section (:mod:`bench.report.validate`).

Layout of ``--out``: ``model/``, ``model-asap/``, ``broker/``, ``broker-asap/``, ``broker-asap-2/``, ...
(result sets; the asap ones not with ``--no-saturation``), ``broker-warm-up/`` (``-2``, ...: the
broker's discarded runs), ``saturation-trace-xN.parquet`` (the trace's rows N times over, which a
design's asap runs replay: :data:`TARGET_PHASE_S`; with a different N per design the asap sets are
one per design, ``model-asap-v4``, ``broker-asap-v4``, ``broker-asap-v4-2``, ...),
``validation.json`` (the section's rows) and ``report/`` (the report with the section). Written in
a staging directory that becomes ``--out`` only when complete (:mod:`bench.replay.output`).

The broker's state moves its figures both ways. Its process warms: a fresh broker's v4 rate rose
2.5x over its first 5,000 txns and then held, and a restart that kept the data started it over (the
JIT). Its data slows v5: on the standalone's RocksDB store v5's rate falls with every txn the
broker has run (98 to 23 committed txn/s over nine runs of 1,264 txns, a restart keeping it: each
index scan lists every txn's never-deleted ``__seq_counter__`` under /txn/op). So with
``fresh_broker`` the broker is first restarted with its data wiped (``scripts/pulsar.sh fresh``),
and the measured runs follow discarded asap runs of the same trace until each design's rows held
:data:`WARM_UP_TXNS` (at least ``warm_up`` runs) and, with ``warm_up_jit``, its JIT compiler
threads were quiet (:data:`WARM_UP_JIT`): each trace meets the broker in the same stated state.
The manifests of the broker's sets record it (``validate.broker``), and the section says how
many txns v5's coordinator had created before each asap run
(``bench.report.validate.txns_before``). The model replays the trace after the broker, its v5
store starting from that history (:func:`broker_history`; ``V5Options.history``), so a listing
walks the counters the broker's walked (``meta.list_keys``); the model's manifests record it
(``validate.v5_history``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Protocol

from bench.replay.config import DEFAULT_LATENCY_PROFILE, EMULATED_STORE, RunConfig
from bench.report.validate import broker_state_manifest
from bench.trace.tracestats import summarize
from engine.clock import LatencyModel
from engine.errors import ConfigError
from engine.profile import LatencyProfile, resolve

# The broker's rate at saturation moves from one run to the next on the same broker (small, v4, five
# runs in a row: 136-203 committed txn/s): the section takes the median of this many runs per design.
SATURATION_RUNS = 3
# Each design's asap runs replay the trace's rows as many times over (bench.trace.repeated) as make
# its txn phase last this long at the rate the last warm-up run measured, and no more. One pass
# of small-slow-2000 saturated a warm broker's v4 for 90-520 ms, and its rate moved 4.5x from run
# to run (174-789 committed txn/s); four passes, 560-630 ms, moved it +-5 % (557-616). v5's one
# pass lasts about 1 s already, and on calibrate's one-partition trace its rate fell run after run
# as the volume grew (datasets/validation/README.md, "Saturation runs were too short").
TARGET_PHASE_S = 1.0
MAX_REPEAT = 32
DESIGNS = ("v4", "v5")
WARM_UP_RUNS = 1  # discarded asap runs before the broker's measured ones (the JIT: see the module docstring)
# ... and more of them, per design, until their rows have held this many txns: a fresh broker's
# v4 ran small-slow-2000's rows 12 times over (1,284 txns a run, client warm-up on) at 583, 806, 773,
# 654, then 1,592, 1,436, 1,473, 1,662, 1,579, 1,536, 1,746, 1,469, 1,937, 1,255 committed txn/s:
# it settled after about 5,000 txns. A restart that kept the data started it over (659, 697, 1,179,
# 1,138): the broker process's warmth (its JIT), not its data. v5 ran 90, then 111-130, from its
# second run of 107 txns on.
WARM_UP_TXNS = {"v4": 6_000, "v5": 300}
MAX_WARM_UP_RUNS = 16  # a trace whose rows hold few txns stops there, short of the goal (said so)
# ... and (``jit_share``) more, per design, while the last one's broker spent more than a share of
# its cores in its JIT compiler threads (bench.pulsar.cpu: ``jit_cores`` of ``broker_cores``): a
# fresh broker's v4 rate followed its JIT over twelve runs (396 -> 1,808 committed txn/s as the
# compiler fell 1,123 -> 0 core-us per txn), and 6,000 txns of warm-up still left 0.12-0.18 of
# about 1.0 broker cores to it in the measured runs (session 34). Warmed until its share was at
# most 5 % (7-16 runs), six fresh-broker sets on two brokers met the v5/v4 ratio's goal on all six
# (the sets before: 7 of 12), and v4's asap runs on small and omb spread 1.02-1.43x, where they
# had spread up to 2x (datasets/validation/README.md, session 35).
WARM_UP_JIT = 0.05
WARM_UP_PHASE_S = 2.0  # each warm-up run's txn phase, at the last one's rate: fewer, longer runs


def model_latency(profile: str | Path | LatencyProfile | None, seed: int) -> tuple[LatencyModel, str]:
    """The model's latencies and a sentence saying which they are: a latency profile (a file, or
    a shipped one's name, ``datasets/latency/``), by default the project's default profile."""
    prof = profile if isinstance(profile, LatencyProfile) else model_profile(profile)
    where = prof.path or "built in"
    return prof.to_latency_model(seed), f"latency profile {prof.name} ({where}, sha256 {prof.sha256[:12]})"


def model_profile(profile: str | Path | None) -> LatencyProfile:
    return LatencyProfile.load(resolve(str(profile if profile is not None else DEFAULT_LATENCY_PROFILE)))


def model_configs(latency: LatencyModel, profile: LatencyProfile | None = None, history: int = 0,
                  history_ops: int = 1, listeners: int = 0, trace: str | Path | None = None) -> list[RunConfig]:
    """The model's runs of both designs; ``history``: the txns v5's store held before
    (``V5Options.history``: a broker run's ``txns_before``), of ``history_ops`` op records each
    (the trace's: the broker's warm-ups replay it, ``TraceSummary.ops_per_txn``); ``listeners``:
    the watches of the v5 topics the broker loaded before (:func:`broker_listeners`). Given the
    ``trace`` they replay, v5's untyped subscriptions take the types the trace client's V5 SDK
    consumers have at the broker (:func:`bench.pulsar.rows.v5_sdk_sub_types`); v4's are
    Failover in both (jvm ``V4Backend.SUB_TYPE``)."""
    from bench.pulsar.rows import v5_sdk_sub_types
    from bench.trace.trace import read_events

    sub_types = v5_sdk_sub_types(read_events(trace)) if trace is not None else ()
    return [RunConfig(engine="v4", latency=latency, latency_profile=profile),
            RunConfig(engine="v5", metadata_url=EMULATED_STORE, latency=latency, latency_profile=profile,
                      sub_types=sub_types).with_history(history, history_ops, listeners)]


def broker_listeners(sets: list[Path], among: list[Path]) -> int:
    """The watches v5's store held when the broker runs ``sets`` began beyond the broker's own,
    the median over them as :func:`broker_history`: one per segment's buffer and one per
    subscription's pending-ack store of every v5 topic loaded before (they stay loaded, and
    their watches with them): those of each v5 run in ``among`` that finished before it, and
    those of its own client warm-up (``bench.pulsar.run.warm_up_rows``: the trace again in a
    namespace of its own), each run's ``pulsar_topics_count`` + ``pulsar_subscriptions_count``
    (a class histogram of the broker counted 192 watches more after a v5 run of 64 segments and
    128 subscriptions, none after a v4 run). Runs the broker made before ``among`` (one not
    restarted fresh) are not known: then a lower bound."""
    def v5(run: Path) -> tuple[str, int, bool] | None:  # (finished at, its topics and subscriptions, warmed up)
        try:
            counts = json.loads((run / "counts.json").read_text()).get("v5")
            finished = str(json.loads((run / "manifest.json").read_text()).get("finished_at", ""))
            with (run / "pulsar-events-v5.jsonl").open() as f:
                warmed = '"ev":"warmed"' in f.readline().replace(" ", "")
        except OSError:
            return None
        if not counts:
            return None
        loaded = int(counts.get("pulsar.pulsar_topics_count", 0)) + int(counts.get("pulsar.pulsar_subscriptions_count", 0))
        return finished, loaded, warmed

    runs = {r: v5(r) for r in among}
    seen = []
    for s in sets:
        own = runs[s] if s in runs else v5(s)
        if own is None:
            continue  # not a v5 run
        before = own[1] if own[2] else 0
        for r, run in runs.items():
            if run is not None and r != s and run[0] < own[0]:
                before += run[1] * (2 if run[2] else 1)
        seen.append(before)
    return int(statistics.median_low(seen)) if seen else 0


def broker_history(sets: list[Path], design: str = "v5") -> int:
    """The txns ``design``'s coordinator had created before the broker runs ``sets`` (result
    directories), the median over them (the runs whose median rate the section takes); 0 when
    none recorded it (``bench.report.validate.txns_before``)."""
    from bench.report.validate import txns_before

    seen = [h for h in (txns_before({"path": s}, design) for s in sets) if h is not None]
    return int(statistics.median_low(seen)) if seen else 0


def repeats_for(rates: dict[str, float | None], txns: int, phase_s: float = TARGET_PHASE_S) -> dict[str, int]:
    """Per design, the passes of a trace of ``txns`` txns whose txn phase lasts ``phase_s`` at
    ``rates`` (committed txn/s): 1 where the rate is unknown, at most :data:`MAX_REPEAT`."""
    out = {}
    for d in DESIGNS:
        rate = rates.get(d)
        out[d] = 1 if not rate or txns < 1 else max(1, min(MAX_REPEAT, math.ceil(phase_s * float(rate) / txns)))
    return out


def saturation_traces(trace: str | Path, into: Path, repeats: dict[str, int],
                      say: Callable[[str], None] = lambda _line: None) -> dict[str, Path]:
    """Per design, the trace its asap runs replay: ``trace``'s rows ``repeats[d]`` times over,
    written to ``into/saturation-trace-xN.parquet``; ``trace`` itself for 1, or when a row of it
    cannot repeat (a split, merge or crash: said)."""
    from bench.trace.repeated import unrepeatable_row, write_repeated

    if max(repeats.values()) <= 1:
        return {d: Path(trace) for d in repeats}
    bad = unrepeatable_row(trace)
    if bad is not None:
        say(_once(bad))
        return {d: Path(trace) for d in repeats}
    made: dict[int, Path] = {1: Path(trace)}
    for n in sorted(set(repeats.values()) - {1}):
        path = into / f"saturation-trace-x{n}.parquet"  # written once: each warm-up run asks again
        made[n] = path if path.exists() else write_repeated(trace, path, n)
    return {d: made[n] for d, n in repeats.items()}


def _once(bad: tuple[int, str]) -> str:
    return f"saturation: the trace's rows once (row {bad[0]} is a {bad[1]}, which cannot repeat)"


def groups(traces: dict[str, Path]) -> list[tuple[Path, list[str], str]]:
    """The runs a set of per-design traces makes: one result set of both designs when they replay
    the same trace, else one per design (its name's suffix ``-v4``, ``-v5``)."""
    if len(set(traces.values())) == 1:
        return [(next(iter(traces.values())), list(traces), "")]
    return [(path, [d], f"-{d}") for d, path in traces.items()]


def broker_saturation(trace: str | Path, target: Any, into: Path, runs: int = SATURATION_RUNS,
                      say: Callable[[str], None] = lambda _line: None, *, name: str = "broker-asap",
                      extra_manifest: dict[str, Any] | None = None, shown: dict[str, str] | None = None,
                      designs: list[str] | None = None) -> list[Path]:
    """The broker's as-fast-as-possible runs of ``trace``, ``designs`` each time (both, v4 then
    v5, by default): ``broker-asap``, ``broker-asap-2``, ... (``name``) under ``into``; the
    section takes each design's median."""
    from bench.pulsar.run import pulsar_replay

    out = []
    for i in range(1, runs + 1):
        path = into / (name if i == 1 else f"{name}-{i}")
        manifest = pulsar_replay(trace, list(designs or DESIGNS), dataclasses.replace(target, pacing="asap"), path,
                                 extra_manifest=extra_manifest, shown=shown)
        for label, run in manifest["runs"].items():
            say(f"broker {label} ({path.name}, asap pacing, run {i} of {runs}): {run['events']} rows in "
                f"{run['wall_seconds']} s, {run['rates'].get('committed_txns_per_s')} committed txn/s"
                + ("" if jit_of(run) is None else f", JIT {jit_of(run):g} of the broker's cores"))
        out.append(path)
    return out


def asap_runs(traces: dict[str, Path], target: Any, into: Path, runs: int, say: Callable[[str], None], *,
              name: str = "broker-asap", extra_manifest: dict[str, Any] | None = None,
              shown: dict[str, str] | None = None) -> list[Path]:
    """:func:`broker_saturation` of each design on its trace (:func:`groups`), run by run."""
    out = []
    for i in range(1, runs + 1):
        for path, designs, suffix in groups(traces):
            out += broker_saturation(path, target, into, 1, say, name=name + suffix + ("" if i == 1 else f"-{i}"),
                                     extra_manifest=extra_manifest, shown=shown, designs=designs)
    return out


def warm_up_broker(trace: str | Path, target: Any, into: Path, runs: int, fresh: bool,
                   say: Callable[[str], None] = lambda _line: None, shown: dict[str, str] | None = None,
                   repeat: int | None = None, goal: dict[str, int] | None = None,
                   jit_share: float | None = None) -> tuple[dict[str, Any], dict[str, Path]]:
    """Discarded asap runs (``broker-warm-up``, ``-2``, ... under ``into``): at least ``runs`` of
    both designs, and a design's more until their rows have held ``goal[d]`` txns
    (:data:`WARM_UP_TXNS`; at most :data:`MAX_WARM_UP_RUNS` runs). Returns what the measured
    sets' manifests record of the broker's state, and per design the trace its asap runs replay
    (:func:`saturation_traces`): the rows ``repeat`` times over, or (``None``) as many times as
    :func:`repeats_for` gives at the rate the design's last warm-up run measured (once, without
    one). Then the first warm-up run replays the rows once and each later one as many times over
    as make a txn phase of :data:`WARM_UP_PHASE_S` at the rate of the run before it: a fresh
    broker's rate rises through its warm-up (see :data:`WARM_UP_TXNS`). ``jit_share``: a design's
    runs also go on while its last one's broker spent more than this share of its cores in its JIT
    compiler threads (a run without that record ends it: said so)."""
    from bench.trace.repeated import unrepeatable_row

    goal = dict(WARM_UP_TXNS if goal is None else goal)
    discarded = lambda line: say(line + " (discarded)")  # noqa: E731
    txns = summarize(trace).txns
    bad = unrepeatable_row(trace)  # checked once here: with it, saturation_traces is asked for one pass only
    if bad is not None:
        say(_once(bad))
    fixed = {d: 1 if repeat is None or bad is not None else repeat for d in DESIGNS}
    counts, passes = dict(fixed), dict(fixed)
    held = {d: 0 for d in DESIGNS}
    jit: dict[str, float | None] = {}  # per design, its last run's JIT share of the broker's cores
    compiling = lambda d: jit_share is not None and (d not in jit or (jit[d] or 0.0) > jit_share)  # noqa: E731
    done = 0
    while True:
        need = [d for d in DESIGNS if done < runs or (txns and (held[d] < goal.get(d, 0) or compiling(d)))]
        if not need:
            break
        if done == MAX_WARM_UP_RUNS:
            say(f"warm-up: stopped after {done} runs, short of " + ", ".join(
                [f"{goal[d]:,} {d} txns ({held[d]:,})" for d in need if held[d] < goal.get(d, 0)]
                + [f"a {d} JIT share of {jit_share:g} ({jit[d]:g})" for d in need if compiling(d) and d in jit]))
            break
        done += 1
        traces = saturation_traces(trace, into, {d: passes[d] for d in need}, say)
        for path in asap_runs(traces, target, into, 1, discarded, name=f"broker-warm-up{'' if done == 1 else f'-{done}'}",
                              extra_manifest=broker_state_manifest(fresh, done - 1, held), shown=shown):
            for d, run in json.loads((path / "manifest.json").read_text())["runs"].items():
                held[d] += txns * passes[d]
                unrecorded = d in jit and jit[d] is None
                jit[d] = jit_of(run)
                if jit_share is not None and jit[d] is None and not unrecorded:
                    say(f"warm-up: {d}'s run recorded no JIT cores (bench.pulsar.cpu): its JIT share not judged")
                if repeat is None and bad is None:
                    rate = {d: run.get("rates", {}).get("committed_txns_per_s")}
                    counts[d] = repeats_for(rate, txns)[d]
                    passes[d] = repeats_for(rate, txns, WARM_UP_PHASE_S)[d]
    traces = saturation_traces(trace, into, counts, say)
    if counts != {d: 1 for d in DESIGNS}:
        say("saturation: " + ", ".join(f"{d} replays the trace's rows " + (f"{n} times over" if n > 1 else "once")
                                       for d, n in counts.items()) + ("" if repeat is not None else
            f" (a txn phase of about {TARGET_PHASE_S:g} s at its last warm-up run's rate)"))
    shares = {d: j for d, j in jit.items() if jit_share is not None and j is not None}
    return broker_state_manifest(fresh, done, {d: n for d, n in held.items() if n}, shares), traces


def jit_of(run: dict[str, Any]) -> float | None:
    """A broker run's JIT compiler threads' share of the broker's cores over its txn phase (its
    manifest entry's ``cpu``: bench.pulsar.cpu); None where not recorded."""
    cpu = run.get("cpu") or {}
    jit, broker = cpu.get("jit_cores"), cpu.get("broker_cores")
    return None if jit is None or not broker else round(jit / broker, 3)


class SessionCalibration(Protocol):
    """``--calibrate`` (bench.calibrate.in_session.InSession): the model's profile measured on
    the broker after its restart, and the broker's drift measured after the measured runs."""

    def profile(self, into: Path, say: Callable[[str], None], fresh: bool) -> LatencyProfile: ...

    def recheck(self, say: Callable[[str], None]) -> dict[str, Any]: ...


def run_validate(trace: str | Path, target: Any, out: str | Path, profile: str | Path | None = None, *,
                 force: bool = False, progress: Callable[[str], None] | None = None,
                 saturation: bool = True, saturation_runs: int = SATURATION_RUNS,
                 fresh_broker: bool = False, warm_up: int = WARM_UP_RUNS,
                 saturation_repeat: int | None = None, warm_up_txns: dict[str, int] | None = None,
                 warm_up_jit: float | None = None, calibration: SessionCalibration | None = None,
                 latency_seed: int | None = None) -> dict[str, Any]:
    """Run the result sets (``saturation=False``: no asap runs, the section says so), compute the
    section, write the report; returns validation.json. ``fresh_broker``: restart the broker
    ``target.pulsar_dir`` names with its data wiped first; ``warm_up``, ``warm_up_txns``, ``warm_up_jit``: discarded
    asap runs of the trace before the measured broker runs (:func:`warm_up_broker`); ``saturation_repeat``: how many times over each
    design's asap runs (the model's, the broker's and its later warm-up runs) replay the trace's
    rows, ``None``: per design, from the last warm-up run (:func:`warm_up_broker`). ``calibration``:
    the model's profile is measured on this broker first (after the restart, which it does), in
    ``--out``'s ``profile.json``, and its saturation trace runs again after the broker's measured
    runs (validation.json's ``calibration``). ``latency_seed``: the seed of the model's latency
    draws (by default the trace's own; the profile note in validation.json says which)."""
    from bench.pulsar.client import fresh_broker as restart_fresh, require_broker_dir
    from bench.replay.output import check_out, shown_path, staged_dir
    from bench.pulsar.run import pulsar_replay
    from bench.pulsar.target import probe
    from bench.trace.trace import trace_metadata, validate

    say = progress or (lambda _line: None)
    if calibration is not None and profile is not None:
        raise ConfigError(f"validate --calibrate measures the model's profile on this broker: not with "
                          f"--latency-profile {profile}")
    if fresh_broker:  # refused before anything runs
        require_broker_dir(target.pulsar_dir)
    check_out(out, force=force)
    validate(trace)  # a bad trace, a missing profile or an unreachable broker: refused before anything runs
    seed = int(trace_metadata(trace).get("seed") or 0) if latency_seed is None else latency_seed
    prof = model_profile(profile)
    probe(target)
    with staged_dir(out, force=force) as tmp:
        shown = {str(tmp): str(out)}
        if calibration is not None:  # restarts the broker itself when fresh_broker (calibrate --fresh-broker)
            measured = calibration.profile(tmp, say, fresh_broker)  # as saved, in tmp
            prof = dataclasses.replace(measured, path=shown_path(str(measured.path), shown))
            say(f"model: calibrated on this broker -> {prof.path}")
        elif fresh_broker:
            restart_fresh(target.pulsar_dir)
            say(f"broker: restarted with fresh data ({target.pulsar_dir})")
        latency, note = model_latency(prof, seed)
        state, traces = warm_up_broker(trace, target, tmp, warm_up, fresh_broker, say, shown, saturation_repeat,
                                       warm_up_txns, warm_up_jit)
        manifest = pulsar_replay(trace, list(DESIGNS), dataclasses.replace(target, pacing="trace"), tmp / "broker",
                                 extra_manifest=state)
        for label, run in manifest["runs"].items():
            say(f"broker {label} (trace pacing): {run['events']} rows in {run['wall_seconds']} s, "
                f"{run['rates'].get('committed_txns_per_s')} committed txn/s")
        asap = asap_runs(traces, target, tmp, saturation_runs, say, extra_manifest=state, shown=shown) if saturation else []
        recorded: dict[str, Any] = {"profile_note": note}
        if calibration is not None:
            recorded["calibration"] = calibration.recheck(say)
        return judge(trace, tmp, prof, latency, recorded, traces if saturation else None, asap, sorted(tmp.glob("broker*")),
                     shown, say)


def judge(trace: str | Path, into: Path, prof: LatencyProfile, latency: LatencyModel, recorded: dict[str, Any],
          traces: dict[str, Path] | None, asap: list[Path], runs: list[Path], shown: dict[str, str],
          say: Callable[[str], None], broker: Path | None = None) -> dict[str, Any]:
    """The model's side of a validation, into ``into``, and the section: the model replays the
    trace at its pace, and (``traces``: per design, the rows its broker's asap runs replayed) as
    fast as possible, its v5 store starting from the history the broker's had; then the report of
    the model's sets against the broker's (``broker``, by default ``into/broker``, and ``asap``)
    into ``into/report``, and ``into/validation.json``. ``runs``: every broker set of the
    validation, warm-ups included (the topics v5's broker had loaded: :func:`broker_listeners`)."""
    from bench.report.report import build
    from bench.replay.runner import replay_trace

    broker = into / "broker" if broker is None else broker
    history = broker_history([broker])
    listeners = broker_listeners([broker], runs)
    replay_trace(trace, model_configs(latency, prof, history, summarize(trace).ops_per_txn, listeners, trace),
                 into / "model",
                 extra_manifest={"validate": {**recorded, "v5_history": history, "v5_listeners": listeners}},
                 shown=shown, publish_spans=True)  # the publishes behind an end-txn (bench.report.behind_end_txn)
    say(f"model: v4 and v5 (shipped, emulated store, {history:,} txns of history, {listeners:,} watches of "
        "topics loaded before) replayed in virtual time")
    sets: list[str | Path] = [into / "model"]
    if traces is not None:
        history = broker_history(asap)
        listeners = broker_listeners(asap, runs)
        for path, designs, suffix in groups(traces):
            configs = model_configs(latency, prof, history, summarize(path).ops_per_txn, listeners, path)
            replay_trace(path, [dataclasses.replace(c, pacing="asap") for c in configs if c.engine in designs],
                         into / f"model-asap{suffix}",
                         extra_manifest={"validate": {**recorded, "v5_history": history, "v5_listeners": listeners}},
                         shown=shown)
            sets.append(into / f"model-asap{suffix}")
        say(f"model: both designs again as fast as possible (rows 1 µs apart, each on its broker runs' trace; "
            f"v5 from {history:,} txns of history and {listeners:,} watches): throughput at saturation")
    sets.append(broker)
    sets += asap
    rep = build(sets, into / "report", title="txnbench validate", shown=shown)
    doc: dict[str, Any] = rep.summary["validation"]
    (into / "validation.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc


ARCHIVES = (".tar.xz", ".tar.gz", ".tgz", ".tar")  # an earlier --out packed (datasets/validation/*/broker-runs/)


def rejudge(earlier: str | Path, out: str | Path, profile: str | Path | None = None, *, force: bool = False,
            trace: str | Path | None = None, progress: Callable[[str], None] | None = None,
            latency_seed: int | None = None) -> dict[str, Any]:
    """Judge the model (``profile``, by default the project's default) again against the broker
    runs an earlier ``validate`` kept in ``earlier`` (its ``--out``, or that directory packed as a
    tar archive, unpacked into ``out/broker-runs``), without a broker: the model's sets, the report
    and validation.json go to ``out``; the broker's sets are read where they are. ``trace``: where
    the trace the broker ran is now (by default the path its broker set recorded), of as many rows.
    ``latency_seed``: the seed of the model's draws (by default the one its broker set recorded).
    What a change to the model or its profile needs, measured on the same runs."""
    import tarfile

    from bench.replay.output import check_out, staged_dir
    from bench.trace.tracestats import summarize

    say = progress or (lambda _line: None)
    src = Path(earlier)
    packed = src.is_file() and src.name.endswith(ARCHIVES)
    if not packed and Path(out).resolve() == src.resolve():
        raise ConfigError(f"validate --rejudge {src}: --out must be another directory (the broker's runs are read there)")
    check_out(out, force=force)
    with staged_dir(out, force=force) as tmp:
        shown = {str(tmp): str(out)}
        if packed:
            runs_dir = tmp / "broker-runs"
            try:
                with tarfile.open(src) as tar:
                    tar.extractall(runs_dir, filter="data")
            except (OSError, tarfile.TarError) as exc:
                raise ConfigError(f"validate --rejudge {src}: cannot unpack it ({exc})") from None
            src_dirs = [p for p in runs_dir.iterdir() if p.is_dir()]
            base = src_dirs[0] if len(src_dirs) == 1 and not (runs_dir / "broker").exists() else runs_dir
        else:
            base = src
        try:
            manifest = json.loads((base / "broker" / "manifest.json").read_text())
            before = json.loads((base / "validation.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"validate --rejudge {src}: not an earlier validate --out (its broker/manifest.json and "
                              f"validation.json: {exc})") from None
        recorded_trace = manifest.get("trace", {})
        path = Path(trace if trace is not None else recorded_trace.get("path", ""))
        if not path.is_file():
            raise ConfigError(f"validate --rejudge {src}: the trace its broker ran, {path}, is not there"
                              + ("" if trace is not None else " (--trace: where it is now)"))
        rows = recorded_trace.get("rows")
        if trace is not None and rows is not None:
            has = summarize(path).rows
            if has != int(rows):
                raise ConfigError(f"validate --rejudge {src}: --trace {path} has {has:,} rows, the trace its broker "
                                  f"ran {int(rows):,}")
        seed = int(manifest.get("seed") or 0) if latency_seed is None else latency_seed
        prof = model_profile(profile)
        runs = sorted(p for p in base.glob("broker*") if (p / "manifest.json").exists() and p.is_dir())
        asap = sorted((p for p in runs if p.name.startswith("broker-asap")),
                      key=lambda p: json.loads((p / "manifest.json").read_text()).get("finished_at", ""))
        latency, note = model_latency(prof, seed)
        traces = None
        if asap:
            repeat = {d: int(n) for d, n in (before.get("saturation_repeat") or {}).items()} or {d: 1 for d in DESIGNS}
            traces = saturation_traces(path, tmp, repeat, say)
        recorded = {"profile_note": note, "rejudged": {"from": str(src), "profile_before": before.get("profile")}}
        return judge(path, tmp, prof, latency, recorded, traces, asap, runs, shown, say, broker=base / "broker")
