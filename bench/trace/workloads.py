"""Workload profiles (data, under ``datasets/profiles/*.json``) and the deterministic trace
generator that turns one into a trace.

The generator walks virtual time publish by publish (inter-arrival times from the profile's
rate with exponential jitter) and keeps a heap of future events (acks, late commits of long-open
txns, splits, merges, crashes) so that the rows it writes are in non-decreasing ``ts_us``.
Same profile + seed + event count = the same trace, byte for byte.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from engine.errors import ConfigError
from bench.trace.trace import MAX_SIZE, MAX_TIMEOUT_MS, MAX_TS_US, SUB_TYPES, TraceWriter

PROFILE_DIR = Path(__file__).resolve().parents[2] / "datasets" / "profiles"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    namespace: str = "public/bench"
    topics: int = 1
    partitions: int = 1  # per topic; ignored when scalable
    scalable: bool = False  # topic://... with hash-range segments
    keys: int = 64  # routing keys on scalable topics
    message_size: int = 1024
    rate_per_s: float = 10_000.0  # publishes per second, all producers together
    txn_fraction: float = 0.5  # share of publishes made inside transactions
    txn_messages: tuple[int, int] = (1, 10)  # messages per txn, uniform inclusive
    txn_partitions: tuple[int, int] = (1, 1)  # distinct partitions/segments per txn
    # Partitions fall into this many groups (partition i in group i % txn_groups) and a txn stays
    # within one, as when each producer owns a subset of partitions. Groups are independent
    # units that a Spark replay can run in parallel; 1 = a txn may span any partitions.
    txn_groups: int = 1
    concurrent_txns: int = 8  # txns open at once, interleaving their publishes
    abort_ratio: float = 0.1
    long_open_fraction: float = 0.0  # txns that stay open long_open_ms after their last publish
    long_open_ms: int = 2_000
    hanging_fraction: float = 0.0  # txns never ended by the client: the coordinator times them out
    timeout_ms: int = 60_000
    subscriptions: int = 1  # per topic
    sub_type: str = "Failover"  # Exclusive, Failover, Shared or Key_Shared: the dispatcher's polling
    ack_delay_ms: float = 5.0  # a consumer acks this long after the message could be seen
    txn_ack_fraction: float = 0.0  # share of acks made inside txns (consume-transform-produce)
    split_every_ms: int = 0  # scalable topics: split the first active segment this often
    merge_every_ms: int = 0
    crash_broker_at_ms: tuple[int, ...] = ()
    crash_tc_at_ms: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "profile") -> Profile:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a profile is a JSON object of fields, got a JSON {type(data).__name__}")
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"{source}: unknown profile fields {', '.join(unknown)}")
        values = dict(data)
        for name, value in data.items():
            values[name] = _typed(source, name, str(known[name]), value)
        try:
            profile = cls(**values)
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        profile.validate(source)
        return profile

    def validate(self, source: str) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ConfigError(f"{source}: {what}")

        need(self.topics >= 1 and self.partitions >= 1, "topics and partitions must be >= 1")
        need(self.rate_per_s > 0, "rate_per_s must be > 0")
        need(0 <= self.txn_fraction <= 1 and 0 <= self.abort_ratio <= 1, "fractions must be in [0, 1]")
        need(1 <= self.txn_messages[0] <= self.txn_messages[1], "txn_messages must be (min, max) with 1 <= min <= max")
        need(1 <= self.txn_partitions[0] <= self.txn_partitions[1], "txn_partitions must be (min, max), min >= 1")
        need(self.concurrent_txns >= 1, "concurrent_txns must be >= 1")
        need(self.txn_groups >= 1, "txn_groups must be >= 1")
        need(self.long_open_fraction + self.hanging_fraction <= 1, "long_open + hanging fractions exceed 1")
        need(self.sub_type in SUB_TYPES, f"sub_type must be one of {', '.join(SUB_TYPES)}, got {self.sub_type!r}")
        need(0 <= self.message_size <= MAX_SIZE, f"message_size must be in 0..{MAX_SIZE}")
        need(0 < self.timeout_ms <= MAX_TIMEOUT_MS, f"timeout_ms must be in 1..{MAX_TIMEOUT_MS}")
        need(self.keys >= 1 and self.subscriptions >= 0, "keys must be >= 1 and subscriptions >= 0")
        for name in ("txn_fraction", "abort_ratio", "long_open_fraction", "hanging_fraction", "txn_ack_fraction"):
            need(0 <= getattr(self, name) <= 1, f"{name} must be in [0, 1]")
        need(self.topics * self.partitions <= MAX_PROFILE_TOPICS,
             f"topics x partitions must be <= {MAX_PROFILE_TOPICS}")
        need(self.subscriptions <= MAX_PROFILE_TOPICS and self.concurrent_txns <= MAX_PROFILE_TOPICS
             and self.txn_messages[1] <= MAX_PROFILE_TOPICS and self.keys <= MAX_PROFILE_TOPICS,
             f"subscriptions, concurrent_txns, txn_messages and keys must be <= {MAX_PROFILE_TOPICS}")
        # times land in the trace's ts_us, which replay bounds (bench.trace.trace.MAX_TS_US)
        for name in ("ack_delay_ms", "long_open_ms", "split_every_ms", "merge_every_ms"):
            need(0 <= getattr(self, name) <= MAX_TS_US // 1000, f"{name} must be in 0..{MAX_TS_US // 1000} ms")
        for name in ("crash_broker_at_ms", "crash_tc_at_ms"):
            need(all(0 <= t <= MAX_TS_US // 1000 for t in getattr(self, name)),
                 f"{name} must be times in 0..{MAX_TS_US // 1000} ms")

    def topic_names(self) -> list[str]:
        base = "topic" if self.scalable else "persistent"
        names = []
        for t in range(self.topics):
            if self.scalable or self.partitions == 1:
                names.append(f"{base}://{self.namespace}/t{t}")
            else:
                names.extend(f"{base}://{self.namespace}/t{t}-partition-{p}" for p in range(self.partitions))
        return names


MAX_PROFILE_TOPICS = 100_000  # topics x partitions, subscriptions, concurrent txns, keys: a bound on memory


def _typed(source: str, name: str, annotation: str, value: Any) -> Any:
    """``value`` checked against the field's annotation (JSON has no tuples: lists become
    them); a wrong type is one ConfigError naming the field."""
    def wrong(expected: str) -> ConfigError:
        return ConfigError(f"{source}: {name} must be {expected}, got {json.dumps(value)[:60]}")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if annotation == "str":
        if not isinstance(value, str):
            raise wrong("a string")
    elif annotation == "bool":
        if not isinstance(value, bool):
            raise wrong("true or false")
    elif annotation == "int":
        if not is_int(value):
            raise wrong("an integer")
    elif annotation == "float":
        if not (is_int(value) or isinstance(value, float)) or not math.isfinite(value):
            raise wrong("a finite number")
        value = float(value)
    elif annotation.startswith("tuple[int"):
        if not isinstance(value, list) or not all(is_int(v) for v in value):
            raise wrong("a list of integers")
        if annotation == "tuple[int, int]" and len(value) != 2:
            raise wrong("[min, max]")
        value = tuple(value)
    return value


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path: str) -> Profile:
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.json"
    if not path.is_file():
        raise ConfigError(f"unknown profile {name_or_path!r}; known: {', '.join(list_profiles())}")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return Profile.from_dict(data, str(path))


@dataclass
class _Txn:
    label: str
    remaining: int
    partitions: list[str]
    fate: str  # commit | abort | long | hang
    msgs: list[tuple[str, str]] = field(default_factory=list)  # (msg, topic)


def generate(profile: Profile, events: int, seed: int, out: str | Path,
             progress: Callable[[int], None] | None = None, duration_s: float | None = None) -> int:
    """Write a trace of about ``events`` rows (the last txns are closed, so a few more) to
    ``out``. Returns the number of rows written. ``duration_s``: also stop publishing after this
    much virtual time (an OMB workload's ``testDurationMinutes``), whichever bound comes first."""
    if events < 1:
        raise ConfigError(f"--events must be >= 1, got {events}")
    if events / profile.rate_per_s * 1e6 > MAX_TS_US:
        raise ConfigError(f"{events} events at rate_per_s {profile.rate_per_s:g} span more than a trace may "
                          f"({MAX_TS_US // 86_400_000_000} days of ts_us)")
    if duration_s is not None and duration_s <= 0:
        raise ConfigError(f"the workload's duration must be > 0 s, got {duration_s}")
    until_us = None if duration_s is None else int(duration_s * 1_000_000)
    rng = random.Random(seed)
    topics = profile.topic_names()
    subs = [f"sub{s}" for s in range(profile.subscriptions)]
    later: list[tuple[int, int, str, dict[str, Any]]] = []  # (ts, seq, op, fields)
    seq = 0

    def schedule(ts: int, op: str, **f: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(later, (ts, seq, op, f))

    meta = {"profile": profile.name, "seed": str(seed), "events": str(events)}
    if until_us is not None:
        meta["duration_s"] = f"{duration_s:g}"
    # the sub_type column only when the profile names a type other than the default (Failover),
    # so traces of profiles that do not are the same as before the column existed
    optional = ("sub_type",) if profile.sub_type != "Failover" else ()
    with TraceWriter(out, metadata=meta, optional=optional) as w:
        for topic in topics:
            for s in subs:
                w.add(0, "subscribe", topic=topic, subscription=s, sub_type=profile.sub_type if optional else None)
        for at in profile.crash_broker_at_ms:
            schedule(at * 1000, "crash_broker")
        for at in profile.crash_tc_at_ms:
            schedule(at * 1000, "crash_tc")
        open_txns: list[_Txn] = []
        ntxn = nmsg = 0
        ts = 0
        mean_gap_us = 1e6 / profile.rate_per_s
        next_split = profile.split_every_ms * 1000 or None
        next_merge = profile.merge_every_ms * 1000 or None
        written = lambda: w.rows_written + w._n  # noqa: E731
        last_msg: dict[str, str] = {}

        def flush_until(t: int) -> None:
            while later and later[0][0] <= t:
                at, _, op, f = heapq.heappop(later)
                w.add(at, op, **f)

        def end_txn(txn: _Txn, at: int) -> None:
            if txn.fate == "hang":
                return  # never ended by the client: the coordinator's timeout aborts it
            action = "abort" if txn.fate == "abort" else "commit"
            if txn.fate == "long":
                at += profile.long_open_ms * 1000
                action = "abort" if rng.random() < profile.abort_ratio else "commit"
            schedule(at, action, txn=txn.label)
            if action == "commit":
                for m, topic in txn.msgs:
                    ack_at = at + int(profile.ack_delay_ms * 1000)
                    for s in subs:
                        schedule(ack_at, "ack", topic=topic, msg=m, subscription=s, ack_kind="individual")

        while written() < events:
            ts += max(1, int(rng.expovariate(1.0) * mean_gap_us))
            if until_us is not None and ts > until_us:
                ts = until_us
                break  # the workload's duration is over: what is open is closed below
            if ts > MAX_TS_US:  # the jitter's tail: refuse rather than write a trace replay rejects
                raise ConfigError(f"the trace would run past {MAX_TS_US} µs of ts_us; raise rate_per_s or lower --events")
            # Splits and merges act on the segment of a recent message's key, so they spread
            # over the hash space instead of always halving the first segment.
            if next_split is not None and ts >= next_split:
                for topic in topics:
                    schedule(next_split, "split", topic=topic, msg=last_msg.get(topic))
                next_split += profile.split_every_ms * 1000
            if next_merge is not None and ts >= next_merge:
                for topic in topics:
                    schedule(next_merge, "merge", topic=topic, msg=last_msg.get(topic))
                next_merge += profile.merge_every_ms * 1000
            flush_until(ts)
            msg = f"m{nmsg}"
            nmsg += 1
            key = f"k{rng.randrange(profile.keys)}" if profile.scalable else None
            if rng.random() < profile.txn_fraction:
                if len(open_txns) < profile.concurrent_txns:
                    label = f"t{ntxn}"
                    ntxn += 1
                    lo, hi = profile.txn_partitions
                    group = topics[rng.randrange(min(profile.txn_groups, len(topics)))::profile.txn_groups]
                    parts = rng.sample(group, min(len(group), rng.randint(lo, hi)))
                    r = rng.random()
                    if r < profile.hanging_fraction:
                        fate = "hang"
                    elif r < profile.hanging_fraction + profile.long_open_fraction:
                        fate = "long"
                    else:
                        fate = "abort" if rng.random() < profile.abort_ratio else "commit"
                    txn = _Txn(label, rng.randint(*profile.txn_messages), parts, fate)
                    open_txns.append(txn)
                    w.add(ts, "new_txn", txn=label, timeout_ms=profile.timeout_ms)
                txn = open_txns[rng.randrange(len(open_txns))]
                topic = txn.partitions[txn.remaining % len(txn.partitions)]
                w.add(ts, "publish", txn=txn.label, topic=topic, msg=msg, size=profile.message_size, key=key)
                last_msg[topic] = msg
                txn.msgs.append((msg, topic))
                txn.remaining -= 1
                if txn.remaining == 0:
                    open_txns.remove(txn)
                    end_txn(txn, ts + 1)
            else:
                topic = topics[rng.randrange(len(topics))]
                w.add(ts, "publish", topic=topic, msg=msg, size=profile.message_size, key=key)
                last_msg[topic] = msg
                ack_at = ts + int(profile.ack_delay_ms * 1000)
                for s in subs:
                    if profile.txn_ack_fraction and rng.random() < profile.txn_ack_fraction:
                        label = f"t{ntxn}"
                        ntxn += 1
                        schedule(ack_at, "new_txn", txn=label, timeout_ms=profile.timeout_ms)
                        schedule(ack_at, "ack", txn=label, topic=topic, msg=msg, subscription=s, ack_kind="individual")
                        schedule(ack_at + 1, "commit", txn=label)
                    else:
                        schedule(ack_at, "ack", topic=topic, msg=msg, subscription=s, ack_kind="individual")
            if progress is not None and nmsg % 65_536 == 0:
                progress(written())
        for txn in list(open_txns):  # close what is still open, as a client would
            end_txn(txn, ts + 1)
        if later and max(at for at, *_ in later) > MAX_TS_US:
            raise ConfigError(f"the trace's last acks or ends would run past {MAX_TS_US} µs of ts_us; "
                              "shorten long_open_ms/ack_delay_ms or the trace")
        flush_until(1 << 62)
        return written()


def profile_as_dict(profile: Profile) -> dict[str, Any]:
    return asdict(profile)


