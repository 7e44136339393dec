"""``txnbench validate``: one trace through the model (both designs, virtual time, v5 as shipped on
the emulated store a standalone broker runs) and through the real broker twice (at the trace's
timestamps, then as fast as possible), then the "model vs broker" section (:mod:`bench.report.validate`).

Layout of ``--out``: ``model/``, ``model-asap/``, ``broker/``, ``broker-asap/``, ``broker-asap-2/``, ...
(result sets; the asap ones not with ``--no-saturation``), ``broker-warm-up/`` (``-2``, ...: the
broker's discarded runs), ``validation.json`` (the section's rows) and ``report/`` (the report with
the section). Written in a staging directory that becomes ``--out`` only when complete
(:mod:`bench.replay.output`).

The broker's state moves its figures: a broker just started runs its first traces slower (the
JIT: v4 asap 121 then 170-305 committed txn/s on one trace's next eight runs), and one that served
dozens of runs gave a v5/v4 ratio half a fresh one's on the same mix (0.21 against 0.38-0.53). So
the broker's measured runs follow ``warm_up`` discarded asap runs of the same trace, and with
``fresh_broker`` the broker is first restarted with its data wiped (``scripts/pulsar.sh fresh``):
each trace then meets the broker in the same state. The manifests of the broker's sets record
which (``validate.broker``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from bench.replay.config import DEFAULT_LATENCY_PROFILE, EMULATED_STORE, RunConfig
from bench.report.validate import broker_state_manifest
from engine.clock import LatencyModel
from engine.profile import LatencyProfile, resolve

# The broker's rate at saturation moves from one run to the next on the same broker (small, v4, five
# runs in a row: 136-203 committed txn/s): the section takes the median of this many runs per design.
SATURATION_RUNS = 3
WARM_UP_RUNS = 1  # discarded asap runs before the broker's measured ones (the JIT: see the module docstring)


def model_latency(profile: str | Path | None, seed: int) -> tuple[LatencyModel, str]:
    """The model's latencies and a sentence saying which they are: a latency profile (a file, or
    a shipped one's name, ``datasets/latency/``), by default the project's default profile."""
    prof = model_profile(profile)
    where = prof.path or "built in"
    return prof.to_latency_model(seed), f"latency profile {prof.name} ({where}, sha256 {prof.sha256[:12]})"


def model_profile(profile: str | Path | None) -> LatencyProfile:
    return LatencyProfile.load(resolve(str(profile if profile is not None else DEFAULT_LATENCY_PROFILE)))


def model_configs(latency: LatencyModel, profile: LatencyProfile | None = None) -> list[RunConfig]:
    return [RunConfig(engine="v4", latency=latency, latency_profile=profile),
            RunConfig(engine="v5", metadata_url=EMULATED_STORE, latency=latency, latency_profile=profile)]


def broker_saturation(trace: str | Path, target: Any, into: Path, runs: int = SATURATION_RUNS,
                      say: Callable[[str], None] = lambda _line: None, *, name: str = "broker-asap",
                      extra_manifest: dict[str, Any] | None = None) -> list[Path]:
    """The broker's as-fast-as-possible runs of ``trace``, both designs each time (v4 then v5):
    ``broker-asap``, ``broker-asap-2``, ... (``name``) under ``into``; the section takes each
    design's median."""
    from bench.pulsar.run import pulsar_replay

    out = []
    for i in range(1, runs + 1):
        path = into / (name if i == 1 else f"{name}-{i}")
        manifest = pulsar_replay(trace, ["v4", "v5"], dataclasses.replace(target, pacing="asap"), path,
                                 extra_manifest=extra_manifest)
        for label, run in manifest["runs"].items():
            say(f"broker {label} ({name}, asap pacing, run {i} of {runs}): {run['events']} rows in "
                f"{run['wall_seconds']} s, {run['rates'].get('committed_txns_per_s')} committed txn/s")
        out.append(path)
    return out


def warm_up_broker(trace: str | Path, target: Any, into: Path, runs: int, fresh: bool,
                   say: Callable[[str], None] = lambda _line: None) -> dict[str, Any]:
    """``runs`` discarded asap runs of ``trace`` (``broker-warm-up``, ``-2``, ... under ``into``);
    returns what the measured sets' manifests record of the broker's state."""
    state = broker_state_manifest(fresh, runs)
    if runs:
        broker_saturation(trace, target, into, runs, lambda line: say(line + " (discarded)"), name="broker-warm-up",
                          extra_manifest=state)
    return state


def run_validate(trace: str | Path, target: Any, out: str | Path, profile: str | Path | None = None, *,
                 force: bool = False, progress: Callable[[str], None] | None = None,
                 saturation: bool = True, saturation_runs: int = SATURATION_RUNS,
                 fresh_broker: bool = False, warm_up: int = WARM_UP_RUNS) -> dict[str, Any]:
    """Run the result sets (``saturation=False``: no asap runs, the section says so), compute the
    section, write the report; returns validation.json. ``fresh_broker``: restart the broker
    ``target.pulsar_dir`` names with its data wiped first; ``warm_up``: discarded asap runs of
    the trace before the measured broker runs."""
    from bench.pulsar.client import fresh_broker as restart_fresh, require_broker_dir
    from bench.replay.output import check_out, staged_dir
    from bench.pulsar.run import pulsar_replay
    from bench.pulsar.target import probe
    from bench.report.report import build
    from bench.replay.runner import replay_trace
    from bench.trace.trace import trace_metadata, validate

    say = progress or (lambda _line: None)
    if fresh_broker:  # refused before anything runs
        require_broker_dir(target.pulsar_dir)
    check_out(out, force=force)
    validate(trace)  # a bad trace, a missing profile or an unreachable broker: refused before anything runs
    seed = int(trace_metadata(trace).get("seed") or 0)
    prof = model_profile(profile)
    latency, note = model_latency(profile, seed)
    probe(target)
    with staged_dir(out, force=force) as tmp:
        shown = {str(tmp): str(out)}
        replay_trace(trace, model_configs(latency, prof), tmp / "model", extra_manifest={"validate": {"profile_note": note}},
                     shown=shown)
        say("model: v4 and v5 (shipped, emulated store) replayed in virtual time")
        model_sets = ["model"]
        if saturation:
            replay_trace(trace, [dataclasses.replace(c, pacing="asap") for c in model_configs(latency, prof)],
                         tmp / "model-asap", extra_manifest={"validate": {"profile_note": note}}, shown=shown)
            model_sets.append("model-asap")
            say("model: both designs again as fast as possible (rows 1 µs apart): throughput at saturation")
        if fresh_broker:
            restart_fresh(target.pulsar_dir)
            say(f"broker: restarted with fresh data ({target.pulsar_dir})")
        state = warm_up_broker(trace, target, tmp, warm_up, fresh_broker, say)
        manifest = pulsar_replay(trace, ["v4", "v5"], dataclasses.replace(target, pacing="trace"), tmp / "broker",
                                 extra_manifest=state)
        for label, run in manifest["runs"].items():
            say(f"broker {label} (trace pacing): {run['events']} rows in {run['wall_seconds']} s, "
                f"{run['rates'].get('committed_txns_per_s')} committed txn/s")
        sets: list[str | Path] = [tmp / name for name in model_sets + ["broker"]]
        if saturation:
            sets += broker_saturation(trace, target, tmp, saturation_runs, say, extra_manifest=state)
        rep = build(sets, tmp / "report", title="txnbench validate", shown=shown)
        doc: dict[str, Any] = rep.summary["validation"]
        (tmp / "validation.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc
