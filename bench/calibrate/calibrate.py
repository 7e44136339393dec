"""``txnbench calibrate``: measure per-operation latency distributions on real backends and write a
latency profile (engine.profile; the format is in datasets/README.md).

- Redis (``--redis``): the v5 metadata store's operations as its adapter issues them
  (metadata_v5/redis.py: one Lua script per write batch, HGETALL per get, a MULTI pipeline per
  get_many, ZRANGEBYLEX per listing, XREAD per watch poll), each timed one at a time on an idle
  server; the store's service time from a pipelined batch of reads and its concurrency from a
  parallel sweep.
- Kafka (``--kafka``): ledger append (a produce acknowledged by the broker) and read (a fetch of
  one entry) through engine/kafkaledger.py.
- Pulsar (``--pulsar`` with ``--admin-url``): bench/calibrate/calibrate_pulsar.py.

Kinds a backend does not measure are kept from the base profile (``constants``) and the profile's
``provenance.notes`` says, kind by kind, what each was measured as, derived from or kept.
"""

from __future__ import annotations

import os
import platform
import re
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from engine.clock import DEFAULT_LATENCIES_US, PERCENTILES, Distribution, ResourceSpec
from engine.errors import ConfigError
from engine.profile import LatencyProfile
from bench.calibrate.measurement import Measurement, percentiles

WARMUP = 20  # calls before timing: connections opened, scripts loaded, JIT-free but caches warm
PIPELINE_BATCH = 200  # reads in one pipelined get_many: the service-time estimate
SWEEP_THREADS = (1, 2, 4, 8)  # parallel clients of the concurrency sweep
SWEEP_S = 1.0  # seconds per sweep point


def timed(fn: Callable[[], Any], samples: int, warmup: int = WARMUP) -> list[int]:
    """``samples`` wall-clock durations (µs) of ``fn()``, one call at a time, after ``warmup``."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0 + 500) // 1000)
    return out


# -- Redis: the v5 metadata store ---------------------------------------------------------------


def measure_redis(url: str, samples: int) -> Measurement:
    from metadata_v5.store.redis import RedisMetadataStore
    from metadata_v5.store import Delete, Put

    if not url.startswith("redis://"):
        raise ConfigError(f"--redis {url!r}: expected redis://HOST:PORT")
    prefix = f"txnbench-calib-{uuid.uuid4().hex[:8]}:"
    store = RedisMetadataStore.from_url(_with_prefix(url, prefix))
    watcher = store.reopen()
    try:
        version = str(store.client.info("server").get("redis_version", "?"))
        fields = {"state": "OPEN", "timeout": "60000", "owner": "tc-0"}  # a txn header's size
        m = Measurement("redis", version)
        n = [0]

        def put() -> None:
            n[0] += 1
            store.batch([Put(f"txn/{n[0]}", fields)])

        m.operations["meta.write"] = percentiles(timed(put, samples))
        m.notes["meta.write"] = "one Put batch (the adapter's Lua write script, one round trip)"
        keys = [f"txn/{i}" for i in range(1, n[0] + 1)]
        cur = {"i": 0}

        def get() -> None:
            cur["i"] = (cur["i"] + 1) % len(keys)
            store.get(keys[cur["i"]])

        m.operations["meta.read"] = percentiles(timed(get, samples))
        m.notes["meta.read"] = "get of one existing record (HGETALL)"

        def cas() -> None:
            cur["i"] = (cur["i"] + 1) % len(keys)
            rec = store.get(keys[cur["i"]])
            assert rec is not None
            t0 = time.perf_counter_ns()
            store.batch([Put(keys[cur["i"]], {**fields, "state": "COMMITTING"}, expected_version=rec.version)])
            cas_us.append((time.perf_counter_ns() - t0 + 500) // 1000)

        cas_us: list[int] = []
        for _ in range(WARMUP + samples):
            cas()
        m.operations["meta.cas"] = percentiles(cas_us[WARMUP:])
        m.notes["meta.cas"] = "Put with expected_version (the Lua script checks the version, then writes)"

        for i in range(10):  # a small listing, as a coordinator's scan of one txn's participants
            store.batch([Put(f"scan/{i}", fields)])
        m.operations["meta.list"] = percentiles(timed(lambda: store.list("scan/"), samples))
        m.notes["meta.list"] = "list of a 10-record prefix (ZRANGEBYLEX on the key index, then the records)"

        many = keys[:PIPELINE_BATCH] if len(keys) >= PIPELINE_BATCH else (keys * PIPELINE_BATCH)[:PIPELINE_BATCH]
        batch_us = timed(lambda: store.get_many(many), max(10, samples // 20))
        one = m.operations["meta.read"]["p50"]
        per = max(1, round((sorted(batch_us)[len(batch_us) // 2] - one) / (PIPELINE_BATCH - 1)))
        m.operations["meta.pipelined"] = {"constant": per}
        m.notes["meta.pipelined"] = (f"each further read of a pipelined get_many of {PIPELINE_BATCH}: "
                                     f"(median batch - median single read) / {PIPELINE_BATCH - 1}")

        deleted = [0]

        def delete() -> None:
            deleted[0] += 1
            store.batch([Delete(f"txn/{deleted[0]}")])

        m.extra["meta.delete"] = percentiles(timed(delete, min(samples, n[0] - WARMUP), warmup=WARMUP))
        m.notes["meta.delete"] = "Delete batch (billed as meta.write by the engines: no kind of its own)"

        m.operations["meta.watch"] = percentiles(_redis_watch(store, watcher, samples))
        m.notes["meta.watch"] = ("from a write's reply to the callback of a watch on the key held by another handle "
                                 "(blocking XREAD poll_watches)")

        sweep = _redis_sweep(url, prefix + "r:scan/0")
        best = max(sweep, key=lambda t: sweep[t])
        m.resources["metadata"] = ResourceSpec(per, 1)
        m.extra["metadata_sweep_ops_per_s"] = sweep
        m.notes["metadata"] = (f"service_us: the pipelined read's per-op time ({per} µs); concurrency 1: Redis runs "
                               f"commands on one thread; the parallel sweep (gets/s by clients: "
                               + ", ".join(f"{t}: {v:,.0f}" for t, v in sweep.items())
                               + f") peaks at {best} clients, from overlapping round trips, not parallel service")
        return m
    finally:
        watcher.close()
        store.purge()
        store.close()


def _with_prefix(url: str, prefix: str) -> str:
    return url + ("&" if "?" in url else "?") + f"prefix={prefix}"


def _redis_watch(store: Any, watcher: Any, samples: int) -> list[int]:
    from metadata_v5.store import Put

    seen: list[int] = []
    out: list[int] = []
    watcher.watch("watched", lambda change: seen.append(time.perf_counter_ns()))
    for i in range(WARMUP + samples):
        before = len(seen)
        store.batch([Put("watched", {"n": str(i)})])
        t0 = time.perf_counter_ns()
        deadline = time.monotonic() + 5
        while len(seen) == before:
            watcher.poll_watches(0.05)
            if time.monotonic() > deadline:
                raise ConfigError("calibrate --redis: a watch saw no change within 5 s")
        if i >= WARMUP:
            out.append(max(0, (seen[before] - t0 + 500) // 1000))
    return out


def _redis_sweep(url: str, key: str) -> dict[int, float]:
    """HGETALLs per second of one record with 1, 2, 4, 8 clients in parallel threads, each its own
    connection (threads share the GIL: this bounds what one Python process drives)."""
    import redis as redislib

    out: dict[int, float] = {}
    for threads in SWEEP_THREADS:
        clients = [redislib.Redis.from_url(url.split("?")[0]) for _ in range(threads)]
        counts = [0] * threads
        seconds = SWEEP_S
        stop = time.monotonic() + seconds

        def run(i: int) -> None:
            c = clients[i]
            while time.monotonic() < stop:
                c.hgetall(key)
                counts[i] += 1

        ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[threads] = round(sum(counts) / seconds, 1)
        for c in clients:
            c.close()
    return out


# -- Kafka: the ledger ---------------------------------------------------------------------------


def measure_kafka(url: str, samples: int) -> Measurement:
    from engine.kafkaledger import KafkaLedgerFactory
    from engine.ledger import Position
    from engine.records import EntryData

    if not url.startswith("kafka://"):
        raise ConfigError(f"--kafka {url!r}: expected kafka://HOST:PORT")
    factory = KafkaLedgerFactory.from_url(url)
    name = f"txnbench-calib-{uuid.uuid4().hex[:8]}"
    try:
        ledger = factory.open(name)
        version = _kafka_version(factory)
        m = Measurement("kafka", version)
        positions: list[Position] = []

        def append() -> None:
            positions.append(ledger.append(EntryData(1024, 0)))

        m.operations["ledger.append"] = percentiles(timed(append, samples))
        m.notes["ledger.append"] = ("append of a data entry as the engines write one (its encoded record; "
                                    "a produce awaited for the broker's ack)")
        cur = {"i": 0}

        def read() -> None:
            cur["i"] = (cur["i"] + 7) % len(positions)  # strided: not the consumer's next record
            ledger.read(positions[cur["i"]], positions[cur["i"]], 1)

        m.operations["ledger.read"] = percentiles(timed(read, samples))
        m.notes["ledger.read"] = "read of one entry at a random position (seek + fetch)"
        return m
    finally:
        try:
            factory.delete(name)
        finally:
            factory.close()


def _kafka_version(factory: Any) -> str:
    try:
        from importlib import metadata

        return f"kafka (kafka-python {metadata.version('kafka-python')})"
    except Exception:  # noqa: BLE001 - the version is provenance only
        return "kafka"


# -- the profile ---------------------------------------------------------------------------------


def host_text() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, {platform.node()}"


def load_average() -> str:
    """The host's 1/5/15-minute load averages when the profile was written (other work on the
    machine inflates what was measured; the profile says how busy it was)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def build_profile(name: str, measurements: Sequence[Measurement], samples: int, command: str,
                  base: LatencyProfile | None = None) -> LatencyProfile:
    """A profile from what was measured; every other kind kept from ``base`` (the constants), said so."""
    base = base or LatencyProfile.constants()
    ops: dict[str, Distribution] = dict(base.operations)
    resources: dict[str, ResourceSpec] = dict(base.resources)
    notes: list[str] = []
    measured: set[str] = set()
    kinds: dict[str, dict[str, str]] = {}  # kind -> how it was measured (provenance["kinds"])
    for m in measurements:
        for kind, why in m.unmeasurable.items():
            kinds.setdefault(kind, {"how": "not measurable", "backend": m.backend, "source": why})
            notes.append(f"{kind} [{m.backend}]: not measurable: {why}")
        for kind, spec in m.operations.items():
            kinds[kind] = {"how": m.how.get(kind, "probe"), "backend": m.backend, "source": m.notes.get(kind, "")}
            if kind not in DEFAULT_LATENCIES_US:
                raise ConfigError(f"calibrate: {m.backend} measured unknown kind {kind!r}")
            ops[kind] = LatencyProfile.from_json(
                {"name": "x", "operations": {**{k: {"constant": 0} for k in DEFAULT_LATENCIES_US}, kind: spec}}
            ).operations[kind]
            measured.add(kind)
        resources.update(m.resources)
        notes += [f"{k} [{m.backend}]: {v}" for k, v in m.notes.items()]
        notes += [f"{k} [{m.backend}]: measured, billed by no kind: provenance.extra[\"{m.backend}.{k}\"]"
                  for k in m.extra if k not in m.notes]
    kept = [k for k in DEFAULT_LATENCIES_US if k not in measured]
    if kept:
        notes.append(f"kept from {base.name} (not measured by this calibration): {', '.join(kept)}")
    for kind in kept:
        kinds[kind] = {**kinds.get(kind, {"how": "not measured", "source": ""}), "value": f"kept from {base.name}"}
    prov = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": host_text(),
            "command": command, "versions": {m.backend: m.version for m in measurements},
            "samples": samples, "load_average": load_average(), "notes": "; ".join(notes),
            "kinds": {k: kinds[k] for k in DEFAULT_LATENCIES_US},
            "extra": {f"{m.backend}.{k}": v for m in measurements for k, v in m.extra.items()}}
    return LatencyProfile(name, prov, ops, resources)


def calibrate(*, redis: str | None, kafka: str | None, pulsar: str | None, admin_url: str | None,
              samples: int, out: str, name: str | None, command: str,
              progress: Callable[[str], None] = lambda s: None, fresh_broker: bool = False,
              pulsar_dir: str | None = None, client_warm_up: bool = False,
              warm_up_txns: dict[str, int] | None = None, warm_up_jit: float | None = None) -> LatencyProfile:
    """``fresh_broker``: restart the broker (``scripts/pulsar.sh`` DIR ``pulsar_dir``, else
    ``$TXNBENCH_PULSAR_DIR``) with its data wiped before measuring it, as ``validate
    --fresh-broker`` does before each trace (a broker's rates follow its state); then warm it as
    validate does (``warm_up_txns``, ``warm_up_jit``: bench.calibrate.calibrate_pulsar.measure_pulsar); the profile
    records both (``provenance["broker"]``)."""
    if not (redis or kafka or pulsar):
        raise ConfigError("calibrate: give at least one of --redis, --kafka, --pulsar")
    if samples < 10:
        raise ConfigError(f"--samples {samples}: at least 10")
    if fresh_broker and not pulsar:
        raise ConfigError("calibrate --fresh-broker restarts the Pulsar broker it measures: give --pulsar too")
    if fresh_broker:  # refused before anything is measured
        from bench.pulsar.client import require_broker_dir
        from bench.pulsar.target import parse_target

        require_broker_dir(parse_target(pulsar or "", admin_url, pulsar_dir=pulsar_dir).pulsar_dir)
    measurements: list[Measurement] = []
    if redis:
        progress(f"redis {redis}: {samples} samples per operation")
        measurements.append(measure_redis(redis, samples))
    if kafka:
        progress(f"kafka {kafka}: {samples} samples per operation")
        measurements.append(measure_kafka(kafka, samples))
    if pulsar:
        from bench.calibrate.calibrate_pulsar import measure_pulsar

        if not admin_url:
            raise ConfigError("calibrate --pulsar needs --admin-url")
        measurements.append(measure_pulsar(pulsar, admin_url, samples, progress, fresh=fresh_broker,
                                           pulsar_dir=pulsar_dir, client_warm_up=client_warm_up,
                                           warm_up_txns=warm_up_txns, warm_up_jit=warm_up_jit))
    default = "-".join(m.backend for m in measurements) + "-local"
    profile = build_profile(name or default, measurements, samples, command)
    sat = next((m.extra["saturation"] for m in measurements if "saturation" in m.extra), None)
    profile = _coordinator_kinds(profile, progress)
    if sat is not None:  # the broker's saturated rates: the resources that give the model the same
        from bench.calibrate.saturation import with_resources

        progress("fitting the model's resources to the broker's saturated rates")
        profile, note = with_resources(profile, sat["committed_txns_per_s"], sat)
        prov = dict(profile.provenance)
        prov["notes"] = (prov.get("notes", "") + "; " if prov.get("notes") else "") + "resources: " + note
        warmed = next((m.extra["broker_warm_up"] for m in measurements if "broker_warm_up" in m.extra), None)
        prov["broker"] = {"fresh": fresh_broker, "client_warm_up": client_warm_up,
                          **({"warm_up": warmed} if warmed is not None else {})}
        profile = profile.derived(provenance=prov)
    return profile.save(out)


def _coordinator_kinds(profile: LatencyProfile, progress: Callable[[str], None]) -> LatencyProfile:
    """``profile`` with the coordinator requests' handling measured from its txn probes'
    new-txn (bench.calibrate.coordinator_fit), the note added; as it is when it recorded none.
    Before the resources' fit, whose saturated replays bill it."""
    from bench.calibrate import coordinator_fit

    if not coordinator_fit.observed(profile):
        return profile
    progress("measuring the coordinator requests' handling from the probes' new-txn")
    profile, note = coordinator_fit.fit(profile)
    prov = dict(profile.provenance)
    # what the model's fits wrote last goes (the resources' fit follows this one)
    kept = _before(str(prov.get("notes", "")), (COORDINATOR_NOTE, RESOURCES_NOTE))
    prov["notes"] = (kept + "; " if kept else "") + COORDINATOR_NOTE + note
    return profile.derived(provenance=prov)


# how the notes of the model-fitted values begin (each fit drops its own and the later fits' notes)
RPC_REFIT = "rpc, consumer.deliver (re-fitted"
COORDINATOR_NOTE = "coordinator.v4/v5: "
RESOURCES_NOTE = "resources"


def _before(notes: str, markers: tuple[str, ...]) -> str:
    """``notes`` up to the earliest note that begins with one of ``markers``."""
    if notes.startswith(markers):
        return ""
    cuts = [i for i in (notes.find("; " + m) for m in markers) if i >= 0]
    return notes[:min(cuts)] if cuts else notes


def _rpc(profile: LatencyProfile, progress: Callable[[str], None]) -> LatencyProfile:
    """``profile`` with ``rpc`` (and ``consumer.deliver``, taken = rpc) fitted again to the plain
    publishes and appends its probe recorded (``provenance.extra["pulsar.rpc_probe_us"]``,
    bench.calibrate.calibrate_pulsar.rpc_of), and ``rpc.broker`` to the END_TXN_ON_PARTITION
    requests it recorded (``pulsar.rpc_broker_probe_us``), else kept equal to ``rpc`` where it
    was; as it is when it recorded no probe."""
    from bench.calibrate.calibrate_pulsar import broker_hop_of, rpc_of
    from bench.calibrate.hop_fit import as_distribution

    probe = profile.provenance.get("extra", {}).get("pulsar.rpc_probe_us")
    if not isinstance(probe, dict):
        return profile
    rpc = rpc_of(probe.get("publish") or {}, probe.get("append") or {})
    if not rpc:
        return profile
    progress(f"fitting rpc to the probe's plain publishes: {rpc}")
    hop = as_distribution(rpc)
    ops = {**profile.operations, "rpc": hop, "consumer.deliver": hop}
    note = (f"{RPC_REFIT} by bench/calibrate/hop_fit.py to the probe's publish {probe['publish']} "
            f"and append {probe['append']} µs): {rpc}")
    # rpc.broker likewise, to the END_TXN_ON_PARTITION requests recorded (profiles measured from
    # 2026-11-27 06:47); a profile that recorded none bills it as its rpc, re-fitted or not
    tb = profile.provenance.get("extra", {}).get("pulsar.rpc_broker_probe_us")
    broker_hop = broker_hop_of(tb.get("end_txn_on_partition") or {}, tb.get("append") or {}) if isinstance(tb, dict) else {}
    if broker_hop:
        ops["rpc.broker"] = as_distribution(broker_hop)
        note += f", rpc.broker to END_TXN_ON_PARTITION {tb['end_txn_on_partition']} µs: {broker_hop}"
    elif profile.operations["rpc.broker"] == profile.operations["rpc"]:
        ops["rpc.broker"] = hop
    prov = dict(profile.provenance)
    # the fits after this one (coordinator kinds, resources) write their notes again
    kept = _before(str(prov.get("notes", "")), (RPC_REFIT, COORDINATOR_NOTE, RESOURCES_NOTE))
    prov["notes"] = (kept + "; " if kept else "") + note
    return profile.derived(provenance=prov, operations=ops)


def with_scan_get(profile: LatencyProfile, probe: dict[str, Any]) -> LatencyProfile:
    """``profile`` with ``meta.scan_get`` (and ``meta.notify``, when the probe timed the
    notification fan-out) from a store probe's measures (bench.calibrate.store_probe),
    said so in its provenance (``kinds``, ``extra["pulsar.store_probe"]`` and the notes, before
    the model-fitted values' notes, which the fits write after)."""
    from bench.calibrate import store_probe
    from bench.calibrate.hop_fit import as_distribution

    ops = {**profile.operations, store_probe.KIND: as_distribution(store_probe.scan_get_spec(probe))}
    prov = dict(profile.provenance)
    text = store_probe.note(probe)
    prov["kinds"] = {**prov.get("kinds", {}), store_probe.KIND: {"how": "probe", "backend": "pulsar", "source": text}}
    notify = store_probe.notify_spec(probe)
    if notify is not None:  # the fan-out per listener, from the same probe
        ops[store_probe.NOTIFY_KIND] = as_distribution(notify)
        prov["kinds"][store_probe.NOTIFY_KIND] = {"how": "probe", "backend": "pulsar", "source": text}
    prov["extra"] = {**prov.get("extra", {}), "pulsar.store_probe": probe}
    notes, fits = str(prov.get("notes", "")), (RPC_REFIT, COORDINATOR_NOTE, RESOURCES_NOTE)
    kept = _before(notes, (store_probe.KIND + " [", *fits))
    fitted = notes[len(kept):].lstrip("; ")
    if fitted.startswith(store_probe.KIND + " ["):  # an earlier probe's note goes, up to the fits' notes
        fitted = fitted[len(_before(fitted, fits)):].lstrip("; ")
    prov["notes"] = "; ".join(n for n in (kept, f"{store_probe.KIND} [pulsar]: {text}", fitted) if n)
    out = profile.derived(provenance=prov, operations=ops)
    return with_watch(out, probe["handoff"]) if "handoff" in probe else out


def with_watch(profile: LatencyProfile, line: dict[str, Any], when: str = "") -> LatencyProfile:
    """``profile`` with ``meta.watch`` from a store probe's hand-off line
    (:func:`bench.calibrate.store_probe.watch_spec`): the kind, its entry in ``provenance.kinds``
    and its note (in the place of the one before, or first), and the line as
    ``extra["pulsar.store_probe"]["handoff"]``; ``when``: the time and command of a probe run
    apart from the probe the profile records, said in the note."""
    from bench.calibrate import store_probe
    from bench.calibrate.hop_fit import as_distribution

    kind = store_probe.WATCH_KIND
    text = store_probe.watch_note(line) + (f" ({when})" if when else "")
    prov = dict(profile.provenance)
    prov["kinds"] = {**prov.get("kinds", {}), kind: {"how": "probe", "backend": "pulsar", "source": text}}
    extra = dict(prov.get("extra", {}))
    extra["pulsar.store_probe"] = {**extra.get("pulsar.store_probe", {}), "handoff": line}
    prov["extra"] = extra
    note = f"{kind} [pulsar]: {text}"
    notes = str(prov.get("notes", ""))
    # a kind's note runs up to the next one's ("; <kind> [")
    old = re.search(rf"(?:^|; ){re.escape(kind)} \[.*?(?=; [\w.]+ \[|$)", notes)
    if old is None:
        prov["notes"] = f"{note}; {notes}" if notes else note
    else:
        start = old.start() + (2 if old.group().startswith("; ") else 0)
        prov["notes"] = notes[:start] + note + notes[old.end():]
    return profile.derived(provenance=prov, operations={**profile.operations, kind: as_distribution(
        store_probe.watch_spec(line))})


def refit_watch(path: str, out: str, command: str, progress: Callable[[str], None] = lambda s: None) -> LatencyProfile:
    """The profile at ``path`` with ``meta.watch`` from the store's notification hand-off, timed
    now with the broker's classes on this machine (:func:`bench.calibrate.store_probe.measure_handoff`,
    :func:`with_watch`). No fit reads the kind, so every other kind, the resources and the fits'
    notes stay, where a structural :func:`refit` fits them again."""
    from bench.calibrate.store_probe import measure_handoff

    profile = LatencyProfile.load(path)
    line = measure_handoff(progress)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return with_watch(profile, line, f"timed {when} by `{command}`").save(out)


def refit(path: str, out: str, command: str, progress: Callable[[str], None] = lambda s: None,
          store_probe: bool = False) -> LatencyProfile:
    """The profile at ``path`` with its model-fitted values fitted again, by the current model, to
    the broker figures it recorded: ``rpc`` to its probe's plain publishes (when recorded: profiles
    measured from 2026-11-27), the coordinator requests' handling to its probes' new-txn
    (``provenance.extra["pulsar.client_observed_us"]``), then the resources to the broker's
    saturated rates (``provenance.extra["pulsar.saturation"]``). What a change to the model's
    structure needs, without measuring the broker again. The measured operations stay; the notes
    say when and by what command the resources were re-fitted. The fits made after the calibration
    keep what the refit does not fit again (the cores work in its replays) and their notes, each
    saying what the refit replaced (:mod:`bench.calibrate.later_fits`). ``store_probe``: first time the
    emulated scan's GETs with the broker's classes on this machine (no broker needed:
    :func:`with_scan_get`), for a profile measured before calibrate did."""
    from bench.calibrate import fit_notes, hops_fit, later_fits
    from bench.calibrate.saturation import with_resources

    profile = LatencyProfile.load(path)
    sat = profile.provenance.get("extra", {}).get("pulsar.saturation")
    if not isinstance(sat, dict) or "committed_txns_per_s" not in sat:
        raise ConfigError(f"calibrate --refit {path}: the profile records no broker saturation rates "
                          "(provenance.extra[\"pulsar.saturation\"]); measure one with --pulsar")
    # the fits after the calibration's own keep their notes, after the ones this refit writes again
    head, later = fit_notes.split(str(profile.provenance.get("notes", "")))
    profile = profile.derived(provenance={**profile.provenance, "notes": head})
    if store_probe:
        from bench.calibrate.store_probe import measure

        profile = with_scan_get(profile, measure(progress))
    profile = hops_fit.unscaled(profile)  # the calibration's own hops, which its fits below were made on
    profile = _rpc(profile, progress)
    profile = _coordinator_kinds(profile, progress)
    progress(f"fitting the model's resources to the rates {path} records: {sat['committed_txns_per_s']}")
    fitted, note = with_resources(profile, sat["committed_txns_per_s"], sat)  # on the trace the rates were measured on
    prov = dict(profile.provenance)
    notes = str(prov.get("notes", ""))
    # the last fit's note goes: "; resources: ..." as calibrate wrote it, "; resources (re-fitted ...): ..." after a refit
    cut = 0 if notes.startswith("resources") else notes.rfind("; resources")
    kept = notes if cut < 0 else notes[:cut]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    prov["notes"] = "; ".join([*([kept] if kept else []), (
        f"resources (re-fitted {when} by `{command}` to the rates measured at {prov.get('measured_at', '?')}): {note}"),
        *later_fits.kept(later, dict(prov.get("extra", {})), fitted, when, rescaled=True)])
    prov["extra"] = later_fits.marked(dict(prov.get("extra", {})), fitted, when)
    prov["refitted"] = {"at": when, "command": command}
    return hops_fit.rescaled(fitted.derived(provenance=prov)).save(out)


def refit_coordinator(path: str, out: str, command: str,
                      progress: Callable[[str], None] = lambda s: None,
                      designs: tuple[str, ...] = ("v4", "v5")) -> LatencyProfile:
    """The profile at ``path`` with only the coordinator requests' handling fitted again
    (``coordinator_fit.fit``, by the current model, to the probes' new-txn it recorded), of
    ``designs``; every other kind and the resources kept, the kept fits after it too
    (``--rates-from``, ``--hops-from``), where a structural :func:`refit` fits the resources again
    and needs them run again (a ``--new-txn-from`` fit's ``coordinator.v4`` is replaced when v4
    is fitted, and its note says so: :mod:`bench.calibrate.later_fits`). Its note takes the place
    of the one before, saying when, by what command and, for one design, that the other's kind
    was kept."""
    from bench.calibrate import coordinator_fit, fit_notes, hops_fit, later_fits
    from engine.clock import coordinator_kind

    profile = LatencyProfile.load(path)
    if not coordinator_fit.observed(profile):
        raise ConfigError(f"calibrate --refit {path} --coordinator-only: the profile records no txn probes' "
                          "new-txn (provenance.extra[\"pulsar.client_observed_us\"]); measure one with --pulsar")
    progress("measuring the coordinator requests' handling from the probes' new-txn")
    # on the calibration's own hops, as refit fits them before a hops fit scales those again
    on_own, note = coordinator_fit.fit(hops_fit.unscaled(profile), designs)
    kinds = [coordinator_kind(d) for d in coordinator_fit.DESIGNS if d in designs]
    fitted = profile.derived(operations={**profile.operations, **{k: on_own.operations[k] for k in kinds}},
                             provenance={**profile.provenance, "kinds": {
                                 **dict(profile.provenance.get("kinds") or {}),
                                 **{k: v for k, v in (on_own.provenance.get("kinds") or {}).items() if k in kinds}}})
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kept_kinds = [coordinator_kind(d) for d in coordinator_fit.DESIGNS if d not in designs]
    also = f"; {', '.join(kept_kinds)} kept as it was" if kept_kinds else ""
    text = f"{COORDINATOR_NOTE}(re-fitted {when} by `{command}`{also}) {note}"
    # the later fits' notes stay after the calibration's, each saying what this replaced (a --new-txn-from fit's kind)
    notes, later = fit_notes.split(str(profile.provenance.get("notes", "")))
    start = notes.find(COORDINATOR_NOTE)
    # the note runs up to the next fit's, which a refit writes right after it (the resources')
    end = notes.find("; " + RESOURCES_NOTE, start) if start >= 0 else -1
    notes = (notes[:start] + text + notes[end:] if end >= 0 else
             notes[:start] + text if start >= 0 else (notes + "; " if notes else "") + text)
    extra = dict(fitted.provenance.get("extra") or {})
    notes = "; ".join([notes, *later_fits.kept(later, extra, fitted, when)])
    prov = {**fitted.provenance, "notes": notes, "extra": later_fits.marked(extra, fitted, when),
            "coordinator_refitted": {"at": when, "command": command}}
    return fitted.derived(provenance=prov).save(out)


def summary_lines(profile: LatencyProfile) -> list[str]:
    lines = [f"profile {profile.name} -> {profile.path} (sha256 {profile.sha256[:12]})"]
    for kind, d in profile.operations.items():
        pts = ", ".join(f"{n}={v}" for n, q in PERCENTILES.items() for qq, v in d.points if qq == q)
        lines.append(f"  {kind:<18} {'constant ' + str(d.points[0][1]) if d.is_constant else pts} µs")
    for r, s in profile.resources.items():
        lines.append(f"  resource {r}: {s.describe(r)}")
    return lines
