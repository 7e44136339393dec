"""Time, injected. Engine code never sleeps and never reads the wall clock: it asks a
:class:`Scheduler` for ``now_us()`` and schedules continuations with ``call_later``.

Two implementations run the same engine code: :class:`VirtualScheduler` (deterministic virtual
time; events ordered by time, then by scheduling order) and :class:`WallScheduler` (real time,
for real Redis and Kafka). A :class:`LatencyModel` says how long each modelled operation takes in
virtual time; in wall time it is all zeros because the real call already took the time.
"""

from __future__ import annotations

import heapq
import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from engine.errors import ConfigError


class Timer:
    """A scheduled call; ``cancel()`` makes it a no-op."""

    __slots__ = ("when_us", "fn", "args", "cancelled", "scope")

    def __init__(self, when_us: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when_us = when_us
        self.fn = fn
        self.args = args
        self.cancelled = False
        self.scope: Scope | None = None

    @property
    def dead(self) -> bool:
        return self.cancelled or (self.scope is not None and self.scope.closed)

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler(ABC):
    """The clock and the event queue.

    ``call_later(0, fn)`` runs ``fn`` after everything already due now, never re-entrantly.
    Callbacks due at the same instant run in the order they were scheduled.
    """

    def __init__(self) -> None:
        self._queue: list[tuple[int, int, Timer]] = []
        self._seq = 0

    @abstractmethod
    def now_us(self) -> int:
        """Microseconds since the scheduler started."""

    def call_at(self, when_us: int, fn: Callable[..., Any], *args: Any) -> Timer:
        timer = Timer(max(when_us, self.now_us()), fn, args)
        self._seq += 1
        heapq.heappush(self._queue, (timer.when_us, self._seq, timer))
        return timer

    def call_later(self, delay_us: int, fn: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self.now_us() + delay_us, fn, *args)

    def pending(self) -> int:
        return sum(1 for _, _, t in self._queue if not t.dead)

    def next_due_us(self) -> int | None:
        while self._queue and self._queue[0][2].dead:
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    @abstractmethod
    def run_until(self, when_us: int) -> int:
        """Run every callback due at or before ``when_us``; time ends at ``when_us``.
        Returns the number of callbacks run."""

    def run_until_idle(self, max_us: int | None = None) -> int:
        """Run callbacks until the queue is empty or the next one is due after ``max_us``.
        Periodic timers keep a queue busy forever, so pass ``max_us`` when they are armed."""
        ran = 0
        while True:
            due = self.next_due_us()
            if due is None or (max_us is not None and due > max_us):
                return ran
            ran += self.run_until(due)


class VirtualScheduler(Scheduler):
    """Deterministic virtual time: ``run_until`` jumps the clock from event to event."""

    def __init__(self, start_us: int = 0) -> None:
        super().__init__()
        self._now = start_us

    def now_us(self) -> int:
        return self._now

    def call_at(self, when_us: int, fn: Callable[..., Any], *args: Any) -> Timer:
        now = self._now
        timer = Timer(when_us if when_us > now else now, fn, args)
        self._seq += 1
        heapq.heappush(self._queue, (timer.when_us, self._seq, timer))
        return timer

    def call_later(self, delay_us: int, fn: Callable[..., Any], *args: Any) -> Timer:
        now = self._now
        timer = Timer(now + delay_us if delay_us > 0 else now, fn, args)
        self._seq += 1
        heapq.heappush(self._queue, (timer.when_us, self._seq, timer))
        return timer

    def run_until(self, when_us: int) -> int:
        queue = self._queue
        heappop = heapq.heappop
        ran = 0
        while queue and queue[0][0] <= when_us:
            due, _, timer = heappop(queue)
            if timer.cancelled:
                continue
            scope = timer.scope
            if scope is not None and scope.closed:
                continue
            self._now = due
            timer.fn(*timer.args)
            ran += 1
        if when_us > self._now:
            self._now = when_us
        return ran

    def _check(self) -> None:
        """Invariants of the inlined queue (``call_at``/``call_later`` here push without going
        through :class:`Scheduler`'s):

        * the queue is a binary heap on ``(due, seq)``: every push is ``heapq.heappush``.
        * nothing is due before now: both pushes clamp the due time to now, and ``run_until``
          pops everything due up to the time it then moves to.
        * every entry's due time is its timer's ``when_us`` (what ``dead`` timers keep too).
        * sequence numbers are unique and at most ``_seq``: each push takes the next one, which
          orders same-instant timers by scheduling.
        """
        q, now = self._queue, self._now
        for i in range(1, len(q)):
            assert q[(i - 1) // 2][:2] <= q[i][:2], f"scheduler heap broken at {i}: {q[(i - 1) // 2][:2]} > {q[i][:2]}"
        seqs = [s for _, s, _ in q]
        assert len(set(seqs)) == len(seqs) and all(s <= self._seq for s in seqs), "scheduler sequence numbers reused"
        for due, _, timer in q:
            assert due >= now, f"a timer due at {due} is before now {now}"
            assert due == timer.when_us, f"a timer queued at {due} says it is due at {timer.when_us}"


class WallScheduler(Scheduler):
    """Real time. The only place that sleeps: between due callbacks in ``run_until``."""

    def __init__(self) -> None:
        super().__init__()
        self._origin_ns = time.monotonic_ns()

    def now_us(self) -> int:
        return (time.monotonic_ns() - self._origin_ns) // 1000

    def run_until(self, when_us: int) -> int:
        queue = self._queue
        ran = 0
        while True:
            now = self.now_us()
            if queue and queue[0][0] <= now:
                _, _, timer = heapq.heappop(queue)
                if not timer.dead:
                    timer.fn(*timer.args)
                    ran += 1
                continue
            if now >= when_us:
                return ran
            wake = min(when_us, queue[0][0]) if queue else when_us
            time.sleep(max(0.0, (wake - now) / 1e6))


class Scope(Scheduler):
    """The timers of one process-like owner (a broker, a coordinator). ``close()`` kills every
    timer it scheduled that has not fired, as a crash kills a process's pending work."""

    def __init__(self, parent: Scheduler) -> None:
        self.parent: Scheduler = parent.parent if isinstance(parent, Scope) else parent
        self.closed = False

    def now_us(self) -> int:
        return self.parent.now_us()

    def call_at(self, when_us: int, fn: Callable[..., Any], *args: Any) -> Timer:
        parent = self.parent
        now = parent.now_us()
        timer = Timer(when_us if when_us > now else now, fn, args)
        timer.scope = self
        parent._seq += 1
        heapq.heappush(parent._queue, (timer.when_us, parent._seq, timer))
        return timer

    def call_later(self, delay_us: int, fn: Callable[..., Any], *args: Any) -> Timer:
        parent = self.parent
        now = parent.now_us()
        timer = Timer(now + delay_us if delay_us > 0 else now, fn, args)
        timer.scope = self
        parent._seq += 1
        heapq.heappush(parent._queue, (timer.when_us, parent._seq, timer))
        return timer

    def pending(self) -> int:
        return self.parent.pending()

    def next_due_us(self) -> int | None:
        return self.parent.next_due_us()

    def run_until(self, when_us: int) -> int:
        return self.parent.run_until(when_us)

    def close(self) -> None:
        self.closed = True


# Virtual-time cost of each modelled operation, in microseconds. Defaults are round figures of
# the right order for a BookKeeper-backed broker on one rack (ledger add ≈ 1 ms with journal
# fsync, a cached read ≈ 0.1 ms, an in-datacenter RPC ≈ 0.2 ms, a metadata CAS ≈ 1 ms); a run
# against real Redis/Kafka can calibrate them (``LatencyModel.with_overrides``).
DEFAULT_LATENCIES_US: Mapping[str, int] = {
    "ledger.append": 1_000,
    "ledger.read": 100,
    "cursor.empty_read": 20,  # a read that returns at once because the cursor is at maxReadPosition
    "consumer.deliver": 100,
    "rpc": 200,  # one hop between the client and a broker
    # one hop of a request a broker sends on its own client (PulsarService.getClient: the v4
    # END_TXN fan-out's TransactionBufferClientImpl, the transaction buffer's snapshot topic);
    # calibrate fits it to the broker's pulsar_txn_tb_client_commit_latency. A profile without it
    # bills it as its ``rpc`` (engine.profile), as every profile did before it existed
    "rpc.broker": 200,
    "meta.read": 300,
    # each record an emulated store's index scan GETs, one after another (storeGet, outside the
    # store's metrics); calibrate times it with the broker's classes (bench.calibrate.store_probe).
    # A profile without it bills it as its ``meta.read`` (engine.profile), as every profile did
    # before it existed
    "meta.scan_get": 300,
    # each further read of a batch issued at once (master's recovery reads every header it finds
    # concurrently): the store's service time per op, ≈ Redis pipelined EVALSHA (61k/s here)
    "meta.pipelined": 20,
    "meta.write": 1_000,
    "meta.cas": 1_000,
    "meta.watch": 500,  # from a committed store write to a watcher's callback
    "meta.list": 500,
    # per thousand keys an emulated store's listing walks (RocksdbMetadataStore iterates and
    # parses every key under the prefix): not in the hand-written model; calibrate fits it from
    # the broker's v5 rate falling with the txns its store has held
    "meta.list_keys": 0,
    # per thousand entries the walk passes beyond those keys (each older version of a counter and
    # each deleted record's put and tombstone in RocksDB's memtable; bench.calibrate.store_probe
    # times it): 0 unless a profile or --latency sets it. Priced at the probe's ratio to a key, it
    # met fewer rows of the kept broker sets than the walk per key alone (datasets/validation/README.md)
    "meta.list_entries": 0,
    # per thousand listener calls of the store's notifications: every put and delete queues one on
    # the store's single event thread (and a create or delete one per ancestor on RocksDB), which
    # runs every listener the store holds, one after another (AbstractMetadataStore.receivedNotification);
    # the v5 buffers' reconciles wait behind them. bench.calibrate.store_probe times it with the
    # broker's classes; 0 unless a profile or --latency sets it
    "meta.notify": 0,
    # a coordinator request's handling in the broker beyond its hops and the storage it waits for
    # (ServerCnx -> the TC -> the storage callbacks -> the answer written from their thread), per
    # design: not in the hand-written model; calibrate measures it as the client's new-txn less
    # the model's new-txn without it
    "coordinator.v4": 0,
    "coordinator.v5": 0,
    # each entry a subscription's dispatcher reads and passes on: delivered, or acked past as a
    # marker or an aborted message (AbstractBaseDispatcher.filterEntriesForConsumer). No latency of
    # its own; it is work on the host's cores (a profile's ``cpu``), which no shipped profile
    # prices: benchmarks.txn_cpu measured a plain delivery's at 35-56 µs of the broker's CPU with
    # units 20 ms apart, and 23-27 µs with them 4 ms apart (datasets/validation/README.md, session 39)
    "dispatch.entry": 0,
}


def coordinator_kind(design: str) -> str:
    """The operation kind of a ``design`` coordinator request's own handling (``"v4"``/``"v5"``)."""
    return f"coordinator.{design}"


# Quantile of each percentile name a profile may give (engine.profile): p0 is the minimum seen.
PERCENTILES: Mapping[str, float] = {"p0": 0.0, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999,
                                     "max": 1.0}


@dataclass(frozen=True)
class Distribution:
    """One operation kind's latency: ``points`` are (quantile, µs), quantiles increasing, values
    non-decreasing; one point is a point mass (a constant). Sampled by inverse CDF with linear
    interpolation between points; below the first point and above the last it is clamped (a
    profile without ``p0``/``max`` says nothing about the tails, so none is invented)."""

    points: tuple[tuple[float, int], ...]

    @classmethod
    def constant(cls, us: int) -> Distribution:
        return cls(((0.5, int(us)),))

    @property
    def is_constant(self) -> bool:
        return len({v for _, v in self.points}) == 1

    @property
    def nominal_us(self) -> int:
        """The median: what reports list as the kind's latency."""
        return self.at(0.5)

    def at(self, u: float) -> int:
        """The value at quantile ``u`` in [0, 1)."""
        pts = self.points
        if u <= pts[0][0]:
            return pts[0][1]
        for (q0, v0), (q1, v1) in zip(pts, pts[1:]):
            if u <= q1:
                return int(v0 + (v1 - v0) * (u - q0) / (q1 - q0) + 0.5)
        return pts[-1][1]


# The shared resources that queue work beyond their concurrency in virtual time
# (engine/capacity.py): the v5 metadata store (one per run), each ledger's bookie, each
# coordinator, each broker's dispatch, and the host's cores (``cpu``: work a call does besides
# its wait, ResourceSpec.kind_service_us).
RESOURCE_NAMES = ("metadata", "bookie", "coordinator", "dispatch", "cpu")


@dataclass(frozen=True)
class ResourceSpec:
    """One shared resource: busy ``service_us`` per request, serving ``concurrency`` at once.

    ``service_us=None``: each request holds its slot for its own latency (a store that runs the
    operation on the caller's thread, as RocksdbMetadataStore does: the latency is the work).
    ``shared``: one instance for the whole run whatever the caller's key (a standalone's single
    bookie, whose one journal every ledger writes through) instead of one per key. ``kinds``: the
    operation kinds that go through it (None: all); the others run beside it (RocksDB: reads
    take no part in the writes' commit queue). ``latency_kinds``: kinds among them whose
    requests hold the slot for their own latency, not ``service_us`` (work whose length varies
    by call: a listing's walk over the keys under its prefix). ``kind_service_us``: a slot held
    per kind for that long, inside the call's latency (the ``cpu`` resource: the cores a call
    works on while it waits for the rest; a call waits only for the slot, its latency already
    holds the work); its kinds are the resource's ``kinds``."""

    service_us: int | None
    concurrency: int
    shared: bool = False
    kinds: frozenset[str] | None = None
    latency_kinds: frozenset[str] = frozenset()
    kind_service_us: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.service_us is not None and self.service_us < 0) or self.concurrency < 1:
            raise ConfigError(f"resource spec needs service_us >= 0 and concurrency >= 1, got {self}")
        if self.kinds is not None and not self.latency_kinds <= self.kinds:
            raise ConfigError(f"resource spec's latency_kinds must be among its kinds, got {self}")
        if self.kind_service_us and (self.kinds != frozenset(self.kind_service_us) or self.latency_kinds
                                     or any(v < 0 for v in self.kind_service_us.values())):
            raise ConfigError(f"resource spec's kind_service_us needs its kinds as its keys, values >= 0 "
                              f"and no latency_kinds, got {self}")

    @classmethod
    def cores(cls, costs: Mapping[str, int], concurrency: int) -> ResourceSpec:
        """The host's cores (the ``cpu`` resource): ``concurrency`` of them, one set per run, a call
        of each kind in ``costs`` working that many µs on one."""
        return cls(0, concurrency, True, frozenset(costs), frozenset(), dict(costs))

    def describe(self, name: str = "") -> str:
        """In words; ``name``: the resource's, to say what one instance serves (engine/capacity.py)."""
        if self.kind_service_us:
            per = ", ".join(f"{k} {v} µs" for k, v in sorted(self.kind_service_us.items()))
            return f"service per kind ({per}) x{self.concurrency}, within the call's latency, one per run"
        service = "its latency" if self.service_us is None else f"{self.service_us} µs"
        scope = ", one per run" if self.shared else (f", {_INSTANCES[name]}" if name in _INSTANCES else "")
        own = (f" ({'/'.join(sorted(self.latency_kinds))}: its latency)" if self.latency_kinds else "")
        return (f"service {service}{own} x{self.concurrency}" + scope
                + (f", {'/'.join(sorted(self.kinds))} only" if self.kinds is not None else ""))


# What one instance of a resource serves when it is not shared (engine/capacity.py's scopes).
_INSTANCES = {"metadata": "one per broker thread", "bookie": "one per ledger", "coordinator": "one per coordinator",
              "dispatch": "one per broker", "cpu": "one per run"}


class _Constants(dict[str, int]):
    """Each kind's constant; an unknown kind is a configuration error, as in :meth:`LatencyModel.of`."""

    def __missing__(self, kind: str) -> int:
        raise ConfigError(f"latency model has no operation kind {kind!r}")


@dataclass(frozen=True)
class LatencyModel:
    """How long each modelled operation takes in virtual time.

    ``latencies_us`` is each kind's constant (or, for a kind in ``distributions``, its median,
    for reports); a kind in ``distributions`` is sampled: one ``random.Random`` stream per
    (``seed``, kind), so a run is deterministic and more calls of one kind never shift another's
    draws, except a kind ``draws_as`` maps to another: it shares that kind's stream (a kind split
    from another, whose profile gives it the same distribution, bills what it billed before the
    split, draw for draw). Each instance has its own streams: a run takes a fresh copy (:meth:`fresh`)."""

    latencies_us: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LATENCIES_US))
    distributions: Mapping[str, Distribution] = field(default_factory=dict)
    seed: int = 1
    # empty: every resource has infinite capacity (no queueing), the behaviour before capacity
    resources: Mapping[str, ResourceSpec] = field(default_factory=dict)
    draws_as: Mapping[str, str] = field(default_factory=dict)  # kind -> the kind whose stream it draws from

    def __post_init__(self) -> None:
        for name in self.resources:
            if name not in RESOURCE_NAMES:
                raise ConfigError(f"latency model: unknown resource {name!r} (known: {', '.join(RESOURCE_NAMES)})")
        object.__setattr__(self, "_streams", {})  # not a field: replace() and fresh() start anew

    def cost_fn(self) -> Callable[[str], int]:
        """:meth:`of` as the fastest callable for this model: with no distributions, a dict
        lookup in C (the meter calls it on every billed port call)."""
        if self.distributions:
            return self.of
        return _Constants(self.latencies_us).__getitem__

    def of(self, kind: str) -> int:
        """The next cost of one operation of ``kind``: a draw from its distribution, or its constant."""
        dist = self.distributions.get(kind)
        if dist is None:
            try:
                return self.latencies_us[kind]
            except KeyError:
                raise ConfigError(f"latency model has no operation kind {kind!r}") from None
        streams: dict[str, random.Random] = self._streams  # type: ignore[attr-defined]
        key = self.draws_as.get(kind, kind)
        stream = streams.get(key)
        if stream is None:  # seeded by a string: stable across processes (unlike hash())
            stream = streams[key] = random.Random(f"txnbench-latency/{self.seed}/{key}")
        return dist.at(stream.random())

    def fresh(self) -> LatencyModel:
        """The same model with its streams restarted: what each run starts from."""
        return replace(self)

    def with_overrides(self, **latencies_us: int) -> LatencyModel:
        """Override kinds by keyword with constants; dots become underscores (``ledger_append=1500``)."""
        merged = dict(self.latencies_us)
        dists = dict(self.distributions)
        for name, value in latencies_us.items():
            kind = name.replace("_", ".", 1)
            if kind not in merged:
                raise ConfigError(f"latency model has no operation kind {kind!r}")
            merged[kind] = int(value)
            dists.pop(kind, None)
        return replace(self, latencies_us=merged, distributions=dists)

    def with_resources(self, resources: Mapping[str, ResourceSpec]) -> LatencyModel:
        return replace(self, resources=dict(resources))

    @classmethod
    def zero(cls) -> LatencyModel:
        """For wall time: real calls already take real time (and the real service queues)."""
        return cls({k: 0 for k in DEFAULT_LATENCIES_US})
