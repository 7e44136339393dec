"""Capacity: shared resources that queue work beyond their concurrency, in virtual time.

A request to a resource starts when one of its ``concurrency`` slots is free for long enough,
holds the slot for the resource's ``service_us`` (or its own latency: ``service_us=None``), and
completes after its latency or its service, whichever is longer; so at most ``concurrency /
service`` requests per microsecond get through and a faster offered rate queues (the delay a
caller sees grows without bound: saturation). Resources without a
:class:`~engine.clock.ResourceSpec` have infinite capacity (no queueing). In wall time nothing
queues here: the real service queues by itself.

Scopes (``LatencyModel.resources`` names): ``metadata`` one per run (every broker shares the v5
store) and broker thread (a write commits on its caller's thread: ``metadata_v5.txnrecords.IO``),
or one per run (``shared``); ``bookie`` one per ledger (its ensemble) or one per run
(``shared``); ``coordinator`` one per broker's coordinator; ``dispatch`` one per broker; ``cpu``
one per run (the host's cores, which a standalone broker, its bookie, its metadata store and the
trace client share; a call waits for a core, then its latency holds the work). Requests
are admitted in the order engine code issues them; each takes the earliest gap that holds it
(:class:`Resource`), so one issued later for an earlier instant still finds the time before
bookings made ahead of it. The broker's single threads (:data:`IN_ORDER`), the client
connection's IO thread and the metadata store's notification thread, run their tasks one after
another in the order they arrive, so there a request also waits for every request that arrived
before it, whenever engine code admitted it (:class:`Resource` ``in_order``). The connection's
thread reads what has arrived when it is free and handles that batch of commands one after
another, and the broker flushes what a batch wrote once the batch is done (Netty's
``FlushConsolidationHandler`` in ``PulsarChannelInitializer``): :meth:`Resource.read_at` and
:meth:`Resource.flushed_at` give a task's batch and when its answer leaves. A ledger's appends
complete in the order they were issued, whatever each one's own latency (:class:`AddOrder`).
"""

from __future__ import annotations

import bisect
import itertools
import weakref
from typing import Mapping

from engine.clock import ResourceSpec, Scheduler, Scope

PER_RUN = frozenset({"metadata", "bookie", "cpu"})  # shared by every broker of a run (cpu: the host's cores)
# The client connection's Netty IO thread (the trace client holds one connection to the broker):
# ServerCnx handles the connection's commands on it in the order they arrive, a store call made
# there blocks it (RocksdbMetadataStore runs storePut on its caller's thread), and the broker's
# writes to the connection queue behind them (PulsarCommandSenderImpl.sendMessagesToConsumer
# runs on ``ctx.channel().eventLoop()``). ``metadata`` is keyed by it; metadata_v5.txnrecords.IO.
IO_THREAD = "io"
# The metadata store's notification thread: AbstractMetadataStore.receivedNotification runs every
# listener on ``eventExecutor``, one single-thread executor per store, so each v5 participant's
# reconcile (subscribeSequence's SequenceWatcher) and, on RocksDB, the store calls it chains (each
# completes on its caller's thread) run there one after another, whatever their segment.
EVENT_THREAD = "event"
IN_ORDER = frozenset({IO_THREAD, EVENT_THREAD})  # served in arrival order (Resource.in_order)
# The broker's Netty IO threads (ServiceConfiguration.numIOThreads: twice the cores, 2 on these
# machines). Tasks scheduled on the group (BrokerService.executor() is the IO event loop group)
# go to them in turn (Netty's next()); the client's connection is served by one of them, IO_THREAD.
IO_THREADS = 4
PER_THREAD = frozenset({"metadata"})  # instances keyed by broker thread (a few), not by ledger (many)


class Resource:
    """One resource's slots, each a calendar of the blocks it is busy (sorted, merged): a request
    takes the earliest gap at or after its issue instant that holds its service time, on any slot.
    Engine code issues a serial chain's later calls when it bills the chain, for instants still to
    come; a calendar keeps the time before such a booking free for requests issued earlier, where
    a slot's next-free instant alone would count the slot busy from now on (and, under load, queue
    everything behind bookings far ahead). An ``in_order`` resource is a queue served first come,
    first served (a Netty event loop's task queue, a single-thread executor): a request starts no
    earlier than every request that *arrived* (was issued for an instant) before it, whenever
    engine code admitted them; one admitted ahead, for a later instant, is only an obstacle."""

    __slots__ = ("spec", "_starts", "_ends", "busy_us", "queued_us", "requests", "in_order", "_arrivals",
                 "_latest_start", "_latest_end")

    def __init__(self, spec: ResourceSpec, in_order: bool = False) -> None:
        self.spec = spec
        # a queue served in arrival order (a thread; concurrency k: k threads taking from one
        # queue): a request starts no earlier than the latest start among those that arrived
        # at or before it (_arrivals, sorted, with _latest_start the running maximum of their starts)
        self.in_order = in_order
        self._starts: list[list[int]] = [[] for _ in range(spec.concurrency)]
        self._ends: list[list[int]] = [[] for _ in range(spec.concurrency)]
        self._arrivals: list[int] = []
        self._latest_start: list[int] = []
        self._latest_end: list[int] = []  # the running maximum of their ends, as _latest_start
        self.busy_us = 0  # service time summed over requests
        self.queued_us = 0  # time requests waited for a slot, summed
        self.requests = 0

    def admit(self, at_us: int, latency_us: int, now_us: int | None = None, own: bool = False,
              arrival_us: int | None = None) -> int:
        """A request issued at ``at_us`` taking ``latency_us`` once served: returns how long
        after ``at_us`` it completes: its wait for a slot plus its latency, or its service time
        when that is longer (the answer cannot come before the work that makes it is done: a
        profile's fitted service time can exceed a latency measured on an idle broker).
        ``now_us``: no later request is issued before it (blocks that ended by then are forgotten).
        ``own``: the request holds its slot for its own latency whatever the resource's service
        time (``ResourceSpec.latency_kinds``). ``arrival_us``: on an in-order resource, when the
        task it belongs to arrived (by default ``at_us``): a synchronous continuation of a task
        the thread is running keeps its place in the queue (``Meter``'s tasks)."""
        service = self.spec.service_us
        if service is None or own:  # the request's own latency is the work (see ResourceSpec)
            service = latency_us
        if now_us is not None:
            self._forget(min(now_us, at_us))
        arrival = at_us if arrival_us is None else arrival_us
        earliest = max(at_us, self._fifo(arrival)) if self.in_order else at_us
        best, best_slot = -1, 0
        for k, (starts, ends) in enumerate(zip(self._starts, self._ends)):
            start = _fit(starts, ends, earliest, service)
            if best < 0 or start < best:
                best, best_slot = start, k
                if start == earliest:
                    break
        _book(self._starts[best_slot], self._ends[best_slot], best, best + service)
        if self.in_order:
            self._arrived(arrival, best, best + service)
        self.requests += 1
        self.busy_us += service
        self.queued_us += best - at_us
        return best - at_us + max(latency_us, service)

    def _forget(self, before_us: int) -> None:
        """Drop the blocks that ended by ``before_us`` (no request is issued before it now), and
        the arrivals before it that ended by then (they bound no later request's start, nor a
        later answer's flush: :meth:`flushed_at`)."""
        for starts, ends in zip(self._starts, self._ends):
            if ends and ends[0] <= before_us:
                gone = bisect.bisect_right(ends, before_us)
                del starts[:gone], ends[:gone]
        arrivals = self._arrivals
        if arrivals and arrivals[0] <= before_us:
            k = bisect.bisect_right(arrivals, before_us)
            if self._latest_end[k - 1] <= before_us:
                del arrivals[:k], self._latest_start[:k], self._latest_end[:k]

    def _fifo(self, at_us: int) -> int:
        """The earliest a request arriving at ``at_us`` may start: after the starts of all that
        arrived at or before it (on one slot, after their ends: they hold it in turn)."""
        i = bisect.bisect_right(self._arrivals, at_us)
        return max(at_us, self._latest_start[i - 1]) if i else at_us

    def _arrived(self, at_us: int, start_us: int, end_us: int) -> None:
        i = bisect.bisect_right(self._arrivals, at_us)
        self._arrivals.insert(i, at_us)
        _insert_max(self._latest_start, i, start_us)
        _insert_max(self._latest_end, i, end_us)

    def read_at(self, arrival_us: int) -> int:
        """On an in-order thread, when a task arriving at ``arrival_us`` is read: once the thread
        is done with every task that arrived before it (a Netty event loop reads what its
        connection holds when it is free, and handles that batch of commands one after another)."""
        i = bisect.bisect_left(self._arrivals, arrival_us)
        return max(arrival_us, self._latest_end[i - 1]) if i else arrival_us

    def flushed_at(self, read_us: int, ready_us: int) -> int:
        """When an answer written at ``ready_us`` by a task read at ``read_us`` (:meth:`read_at`)
        leaves: once the thread is done with every task read with it, i.e. that had arrived by
        then. The broker's connections flush what a batch of commands wrote when the batch is
        done (``PulsarChannelInitializer``: Netty's ``FlushConsolidationHandler(1024, true)``
        holds a flush while a read is in progress and flushes at ``channelReadComplete``)."""
        k = bisect.bisect_right(self._arrivals, read_us)
        return max(ready_us, self._latest_end[k - 1]) if k else ready_us

    def batch_done_at(self, at_us: int) -> int:
        """When the batch the thread is running at ``at_us`` is done (``at_us`` when it is idle):
        what another thread writes to the connection meanwhile (a publish's receipt, from the add's
        completion) is a task the event loop runs after that batch, and its flush goes with it."""
        j = bisect.bisect_right(self._latest_start, at_us)  # the calls started by then (FIFO: in arrival order)
        if not j:
            return at_us
        # the last task started by then, all its calls (one arrival: a chain of store calls is
        # one task, whose later calls may start after ``at_us``)
        arrival = self._arrivals[j - 1]
        if self._latest_end[bisect.bisect_right(self._arrivals, arrival) - 1] <= at_us:
            return at_us
        return self.flushed_at(self.read_at(arrival), at_us)

    def free_at(self, at_us: int) -> int:
        """When a request issued at ``at_us`` that takes no time of its own gets a slot: on an
        in-order resource after every request that arrived before it, and on any resource not
        inside a busy block."""
        earliest = self._fifo(at_us) if self.in_order else at_us
        best = -1
        for starts, ends in zip(self._starts, self._ends):
            i = bisect.bisect_right(ends, earliest)  # the first block still busy after it
            free = ends[i] if i < len(starts) and starts[i] <= earliest else earliest
            best = free if best < 0 else min(best, free)
        return best


class AddOrder:
    """One ledger's appends, which complete in the order they were issued: BookKeeper's
    ``LedgerHandle.sendAddSuccessCallbacks`` completes only the head of ``pendingAddOps``, so an
    add its bookie answered early waits for every earlier add of the ledger (and the managed
    ledger runs its ``OpAddEntry`` callbacks in that order). The adds are recorded in the order
    engine code bills them: one billed later for an earlier instant waits for the earlier adds
    it finds, and holds back only what is billed after it."""

    __slots__ = ("_at", "_done")

    def __init__(self) -> None:
        self._at: list[int] = []  # the adds' issue instants, sorted
        self._done: list[int] = []  # aligned: the running maximum of their completions

    def complete(self, at_us: int, done_us: int, now_us: int) -> int:
        """When an add issued at ``at_us``, which its bookie answers at ``done_us``, completes:
        no earlier than any add issued before it. ``now_us``: no add is issued before it now."""
        at, done = self._at, self._done
        if done and done[0] <= now_us:  # adds complete by now hold back no later one
            gone = bisect.bisect_right(done, now_us)
            del at[:gone], done[:gone]
        i = bisect.bisect_right(at, at_us)
        at.insert(i, at_us)
        return _insert_max(done, i, done_us)


def _insert_max(latest: list[int], i: int, value: int) -> int:
    """Insert at ``i`` into ``latest``, a running maximum, the entry of ``value``: the larger of it
    and the maximum before ``i``, raising the entries after ``i`` below it (an entry inserted before
    later ones, admitted after them: common on a v5 store thread booked ahead). Returns the entry."""
    entry = max(value, latest[i - 1]) if i else value
    latest.insert(i, entry)
    # ``latest`` is non-decreasing: the entries to raise are those before the first >= it
    k = bisect.bisect_left(latest, entry, i + 1)
    if k > i + 1:
        latest[i + 1:k] = [entry] * (k - i - 1)
    return entry


def _fit(starts: list[int], ends: list[int], at: int, service: int) -> int:
    """The earliest start >= ``at`` with ``service`` free before the next block."""
    i = bisect.bisect_right(ends, at)  # the first block still busy after ``at``
    if i == len(starts) or starts[i] >= at + service:
        return at
    # then the first gap of ``service`` after a block's end: the blocks are sorted, disjoint and
    # never empty (_book), so each one found in the way ends later than the one before. A queue
    # booked far ahead holds hundreds of them: the walk is over the lists' items, not indexes
    start = ends[i]
    for s, e in zip(itertools.islice(starts, i + 1, None), itertools.islice(ends, i + 1, None)):
        if s - start >= service:
            return start
        start = e
    return start


def _book(starts: list[int], ends: list[int], start: int, end: int) -> None:
    """Add the busy block [start, end), merged with the blocks it touches."""
    if start == end:
        return
    i = bisect.bisect_left(starts, start)
    if i > 0 and ends[i - 1] == start:  # continues the block before
        i -= 1
        ends[i] = end
    else:
        starts.insert(i, start)
        ends.insert(i, end)
    if i + 1 < len(starts) and starts[i + 1] == end:  # and touches the one after
        ends[i] = ends[i + 1]
        del starts[i + 1], ends[i + 1]


class Capacity:
    """The resources of one scope (a run, or a broker): instances created on first use, keyed
    by (name, instance key), each from its name's spec; ``None`` for a name without a spec."""

    def __init__(self, specs: Mapping[str, ResourceSpec]) -> None:
        self._specs = dict(specs)
        self._resources: dict[tuple[str, str], Resource] = {}

    def resource(self, name: str, key: str = "", create: bool = True) -> Resource | None:
        """The instance, made on first use (``create=False``: ``None`` until a request made it)."""
        spec = self._specs.get(name)
        if spec is None:
            return None
        if spec.shared:
            key = ""
        res = self._resources.get((name, key))
        if res is None and create:
            res = self._resources[(name, key)] = Resource(spec, in_order=key in IN_ORDER)
        return res

    def stats(self) -> dict[str, int]:
        """Per resource name: requests, busy and queued microseconds, summed over instances; a
        resource of :data:`PER_THREAD` per instance (``metadata@io``: which thread saturates)."""
        out: dict[str, int] = {}
        for (name, key), res in sorted(self._resources.items()):
            label = f"{name}@{key}" if key and name in PER_THREAD else name
            for what, value in (("requests", res.requests), ("busy_us", res.busy_us), ("queued_us", res.queued_us)):
                out[f"{label}.{what}"] = out.get(f"{label}.{what}", 0) + value
        return out


# The per-run resources of each run, found from the run's root scheduler (a run's brokers, one
# after another across crashes, share one clock and one store).
_PER_RUN: "weakref.WeakKeyDictionary[Scheduler, tuple[Mapping[str, ResourceSpec], Capacity]]" = weakref.WeakKeyDictionary()


def run_capacity(scheduler: Scheduler, specs: Mapping[str, ResourceSpec]) -> Capacity:
    """The run-wide resources (``metadata``, ``bookie``) of the run ``scheduler`` belongs to."""
    root = scheduler.parent if isinstance(scheduler, Scope) else scheduler
    run_specs = {k: v for k, v in specs.items() if k in PER_RUN}
    known = _PER_RUN.get(root)
    if known is None or dict(known[0]) != run_specs:
        known = _PER_RUN[root] = (run_specs, Capacity(run_specs))
    return known[1]
