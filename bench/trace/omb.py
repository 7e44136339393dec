"""OpenMessaging Benchmark workload YAML as a txnbench profile.

OMB's workload file is the public fields of ``io.openmessaging.benchmark.Workload`` (openmessaging
/benchmark, ``benchmark-framework``); :func:`load_omb_workload` maps the ones that shape the
traffic onto :class:`bench.trace.workloads.Profile` and reads our transaction fields (any Profile field)
from a ``txnbench:`` mapping in the same file, which override what the OMB fields give. OMB fields
with no meaning for a trace are accepted and listed (``ignored``); an unknown key is an error, so a
typo is not silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bench.trace.workloads import Profile
from engine.errors import ConfigError

TXNBENCH_KEY = "txnbench"
# Bound on the rows an OMB workload generates when --events is not given: its duration x rate
# is often tens of millions of publishes (1-topic-16-partitions-1kb: 50,000/s for 15 min).
DEFAULT_MAX_EVENTS = 1_000_000

# OMB field -> Profile field, for those that map one to one.
MAPPED = {
    "topics": "topics",
    "partitionsPerTopic": "partitions",
    "messageSize": "message_size",
    "producerRate": "rate_per_s",  # the whole workload's rate, split over its producers (WorkloadGenerator)
    "subscriptionsPerTopic": "subscriptions",
}
# OMB fields read otherwise: name, the duration, the producer count (see load_omb_workload).
USED = ("name", "testDurationMinutes", "producersPerTopic", "keyDistributor", "consumerBacklogSizeGB")
# OMB fields with no meaning for a trace of client events, and why.
IGNORED = {
    "consumerPerSubscription": "a subscription's dispatch is modelled per subscription, not per consumer",
    "warmupDurationMinutes": "virtual time has no JIT or cache to warm up",
    "payloadFile": "only the size of a payload matters",
    "useRandomizedPayloads": "only the size of a payload matters",
    "randomBytesRatio": "only the size of a payload matters",
    "randomizedPayloadPoolSize": "only the size of a payload matters",
    "backlogDrainRatio": "no backlog phase (consumerBacklogSizeGB must be 0)",
    "sampleRateMillis": "results are computed from the whole run",
    "randomTopicNames": "topics are named by the profile",
}
KEY_DISTRIBUTORS = ("NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO")  # utils.distributor.KeyDistributorType


@dataclass(frozen=True)
class OmbWorkload:
    profile: Profile
    duration_s: float
    ignored: tuple[str, ...]  # OMB fields present in the file and ignored (see IGNORED)

    def events_bound(self, events: int | None) -> int:
        """Rows to generate: ``--events`` when given, else DEFAULT_MAX_EVENTS; the duration stops
        the generator earlier when its duration x rate is fewer."""
        return DEFAULT_MAX_EVENTS if events is None else events


def load_omb_workload(path: str | Path) -> OmbWorkload:
    import yaml  # pyyaml; only this verb needs it

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--omb-workload {p}: no such file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of OMB workload fields, got {type(data).__name__}")
    return omb_profile(data, str(p))


def omb_profile(data: dict[str, Any], source: str) -> OmbWorkload:
    """The profile and duration of one OMB workload mapping (see the module's docstring)."""
    known = set(MAPPED) | set(USED) | set(IGNORED) | {TXNBENCH_KEY}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ConfigError(f"{source}: unknown OMB workload fields {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")

    def number(key: str, *, minimum: float, integer: bool = True) -> Any:
        v = data.get(key)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
            raise ConfigError(f"{source}: {key} must be {'an integer' if integer else 'a number'}, got {v!r}")
        if v < minimum:
            raise ConfigError(f"{source}: {key} must be >= {minimum:g}, got {v}")
        return v

    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: name must be a non-empty string, got {name!r}")
    values: dict[str, Any] = {"name": name, "description": f"OMB workload {name} ({source})"}
    for omb, ours in MAPPED.items():
        if omb == "producerRate" and data.get(omb) == 0:
            raise ConfigError(f"{source}: producerRate 0 asks OMB to search for the highest rate, which a trace "
                              f"cannot; give a rate (or txnbench: rate_per_s)")
        if omb in data:
            values[ours] = number(omb, minimum=1 if omb != "messageSize" else 0)
    duration_min = number("testDurationMinutes", minimum=0, integer=False) if "testDurationMinutes" in data else 15
    if duration_min <= 0:
        raise ConfigError(f"{source}: testDurationMinutes must be > 0, got {duration_min}")
    if "producersPerTopic" in data:
        # one open txn per producer at a time (a Pulsar producer's txns are sequential in OMB's loop)
        values["concurrent_txns"] = number("producersPerTopic", minimum=1) * int(values.get("topics", 1))
    kd = data.get("keyDistributor", "NO_KEY")
    if kd not in KEY_DISTRIBUTORS:
        raise ConfigError(f"{source}: keyDistributor must be one of {', '.join(KEY_DISTRIBUTORS)}, got {kd!r}")
    if data.get("consumerBacklogSizeGB", 0) not in (0, None):
        raise ConfigError(f"{source}: consumerBacklogSizeGB > 0 (build a backlog, then drain it) is not generated; "
                          f"set it to 0")
    ours_data = data.get(TXNBENCH_KEY) or {}
    if not isinstance(ours_data, dict):
        raise ConfigError(f"{source}: {TXNBENCH_KEY} must be a mapping of profile fields")
    profile_fields = {f.name for f in fields(Profile)}
    bad = sorted(str(k) for k in ours_data if k not in profile_fields)
    if bad:
        raise ConfigError(f"{source}: unknown {TXNBENCH_KEY} fields {', '.join(bad)}; "
                          f"profile fields: {', '.join(sorted(profile_fields))}")
    values.update(ours_data)
    profile = Profile.from_dict(values, source)
    return OmbWorkload(profile, float(duration_min) * 60, tuple(k for k in data if k in IGNORED))


def generate_omb(path: str | Path, events: int | None, seed: int, out: str | Path) -> list[str]:
    """Generate a trace from an OMB workload file; the lines ``txnbench generate`` prints."""
    import pyarrow.parquet as pq

    from bench.trace.workloads import generate

    w = load_omb_workload(path)
    bound = w.events_bound(events)
    rows = generate(w.profile, bound, seed, out, duration_s=w.duration_s)
    md = pq.ParquetFile(out).metadata  # the last row's time, from the footer's statistics
    stats = md.row_group(md.num_row_groups - 1).column(0).statistics if md.num_row_groups else None
    span_s = (stats.max / 1e6) if stats is not None and stats.has_min_max else 0.0
    ended = "its duration" if span_s >= w.duration_s else f"the bound of {bound} rows" + (
        "" if events is not None else " (--events to change)")
    lines = [f"wrote {rows} events to {out}",
             f"OMB workload {w.profile.name!r}: {span_s:.1f} s of its {w.duration_s:g} s at "
             f"{w.profile.rate_per_s:g} msg/s, ended by {ended}"]
    if w.ignored:
        lines.append(f"ignored OMB fields (no meaning for a trace): {', '.join(w.ignored)}")
    return lines
