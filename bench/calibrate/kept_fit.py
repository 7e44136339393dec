"""What the fits to kept validations share (``calibrate --refit PROFILE --rates-from DIR``,
``--hops-from DIR``, ``--walk-from DIR`` and ``--new-txn-from DIR``: :mod:`bench.calibrate.rates_fit`,
:mod:`bench.calibrate.hops_fit`, :mod:`bench.calibrate.walk_fit`, :mod:`bench.calibrate.new_txn_fit`):
the folders they read, the model's replays of a kept set's rows (as fast as possible, or at the
trace's pace), and the profile they write with the fit's record."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.calibrate.fit_notes import without_own
from engine.clock import ResourceSpec
from engine.errors import ConfigError
from engine.profile import LatencyProfile

Progress = Callable[[str], None]
Fit = Callable[[LatencyProfile, Sequence[Path], Progress], tuple[LatencyProfile, dict[str, Any], str]]


def distinct(flag: str, folders: Sequence[Path]) -> None:
    """Refuse folders of one name: their sets are named ``FOLDER/NAME``, and would be named alike."""
    if len({f.name for f in folders}) < len(folders):
        raise ConfigError(f"calibrate {flag}: two folders of one name ("
                          + ", ".join(str(f) for f in folders) + "): their sets would be named alike")


def validations(flag: str, folder: Path, qualified: bool,
                usable: Callable[[dict[str, Any]], bool]) -> list[tuple[str, Path, dict[str, Any]]]:
    """(name, trace, validation) of every validation in ``folder`` (``*.json``) that is
    ``usable``; its trace is ``folder``'s parent's ``NAME.parquet``, and ``qualified`` names it
    ``FOLDER/NAME`` (the same trace kept in several folders). An unreadable file, or a usable
    one without its trace, is a :class:`ConfigError`."""
    found = []
    for f in sorted(folder.glob("*.json")):
        try:
            v = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"calibrate {flag} {folder}: {f.name}: not a validation ({exc})") from None
        if not isinstance(v, dict) or not usable(v):
            continue
        trace = folder.parent / f"{f.stem}.parquet"
        if not trace.exists():
            raise ConfigError(f"calibrate {flag} {folder}: {f.name}: its trace {trace} is missing")
        found.append((f"{folder.name}/{f.stem}" if qualified else f.stem, trace, v))
    return found


def saturated_replay(profile: LatencyProfile, resources: dict[str, ResourceSpec], trace: Path, repeat: dict[str, int],
                     design: str, into: Path, history: int = 0, listeners: int = 0) -> tuple[float, dict[str, float]]:
    """The model's committed rate of ``design`` replaying a kept set's saturation rows (``trace``,
    ``repeat[design]`` times over, as the broker ran them) as fast as possible, and its billed
    calls of each kind per committed txn. v5's store starts from ``history`` txns before and
    ``listeners`` listeners, as the broker's run did (``V5Options.history``)."""
    from bench.pulsar.validate_run import model_configs, saturation_traces
    from bench.replay.measure import committed_rate
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from bench.trace.tracestats import summarize

    rows = saturation_traces(trace, into, {design: repeat.get(design, 1)})[design]
    latency = profile.to_latency_model(1).with_resources(resources)
    cfg = next(c for c in model_configs(latency, profile, trace=rows) if c.engine == design)
    if design == "v5":
        cfg = cfg.with_history(history, summarize(rows).ops_per_txn, listeners)
    result = Replayer(dataclasses.replace(cfg, pacing="asap")).run(read_events(rows))
    t = result.txns
    rate = committed_rate({"outcome": o, "end_ts_us": e, "opened_ts_us": s}
                          for o, e, s in zip(t["outcome"], t["end_ts_us"], t["opened_ts_us"]))
    committed = max(1, sum(1 for o in t["outcome"] if o == "committed"))
    per_txn = {k.removeprefix("billed."): v / committed for k, v in result.counts.items() if k.startswith("billed.")}
    return rate or 0.0, per_txn


def paced_latency(profile: LatencyProfile, trace: Path, design: str) -> dict[str, Any]:
    """The model's latency figures of ``design`` (per operation, ``p50_us``...) replaying ``trace``
    at its pace, as a kept validation's model run did."""
    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events

    latency = profile.to_latency_model(1).with_resources(profile.resources)
    cfg = next(c for c in model_configs(latency, profile) if c.engine == design)
    return dict(Replayer(cfg).run(read_events(trace)).latency)


def scratch(tmp: str, name: str) -> Path:
    """Where a set's saturation traces are written for a replay (a qualified name's folder flattened)."""
    return Path(tmp) / name.replace("/", "--")


def refitted(fit: Fit, key: str, path: str, folders: Sequence[str], out: str, command: str,
             progress: Progress = lambda s: None, name: str | None = None) -> LatencyProfile:
    """The profile at ``path``, named ``name`` (by default as it was), ``fit`` to the validations
    in ``folders``, saved to ``out``: the fitted profile's provenance, with the notes and
    ``provenance.extra[key]`` (the fit's record) saying when, from what and by what command, in
    place of the same fit's earlier ones."""
    profile = LatencyProfile.load(path)
    if name:
        profile = dataclasses.replace(profile, name=name)
    fitted, record, note = fit(profile, [Path(f) for f in folders], progress)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    prov = dict(fitted.provenance)
    prov["extra"] = {**dict(prov.get("extra", {})), key: {**record, "at": when, "command": command}}
    # its earlier note, from a fit made before, goes: this one says what it is now
    prov["notes"] = without_own(str(prov.get("notes", "")), key) + f"; {note} (fitted {when} by `{command}`)"
    return fitted.derived(provenance=prov).save(out)
