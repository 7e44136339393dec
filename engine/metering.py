"""Metering: the one place virtual time is billed, and counted.

Engine code does not add latencies up itself. Each port call (a ledger append or read, a metadata
get/put/CAS/scan/delete, an RPC hop, a delivery) is billed to a :class:`Meter`, by a metered
wrapper around the port (``metadata_v5/metered.py``) or right at the call (``Meter.bill``), and
the same call increments ``billed[kind]``: what was billed and what was counted are one number.

What a caller waits for is a :class:`Tab`: engine code opens one around the calls a continuation
waits on (``with meter.tab() as tab: ...``; then ``call_later(tab.us, ...)``); every billed call
while it is open adds to the innermost open tab. A tab opened with ``meter.batch()`` holds calls
issued at once: it costs the slowest one's round trip plus, per further call, the store's service
time ``each_further`` (``meta.pipelined``; ``None``: nothing, the calls overlap completely). The
client request a broker is serving (a publish) is a tab too (:class:`RequestCost`):
what engine code does on the request's path is billed to it by the same wrappers.

Calls outside any tab are billed and counted but delay nothing (background work: sweeps).

With ``LatencyModel.resources`` a billed call also goes through its shared resource
(:mod:`engine.capacity`) and waits for a slot in virtual time, and a ledger's appends
(:data:`APPEND`, keyed by ledger) complete in the order they were issued
(:class:`~engine.capacity.AddOrder`).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any, Callable

from engine.capacity import IO_THREADS, PER_RUN, AddOrder, Capacity, Resource, run_capacity
from engine.clock import LatencyModel, Scheduler, VirtualScheduler, Scope
from engine.counters import Counters


APPEND = "ledger.append"  # billed with its ledger as the key: completes in issue order per ledger


class Tab:
    """What one waiter waits for, in microseconds (``us``). Serial unless a batch. A tab that
    ``joins`` adds its total to the enclosing tab when it closes, as one call (a unit of several
    serial calls inside a batch, or a batch inside a serial sequence)."""

    __slots__ = ("us", "_meter", "_further_us", "_n", "_join", "start_us")

    def __init__(self, meter: Meter | None = None, further_us: int | None = -1, join: bool = False) -> None:
        self.us = 0
        self._meter = meter
        self._further_us = further_us  # -1: serial; None: overlapping; else per further call
        self._n = 0
        self._join = join
        self.start_us = 0  # when its first call is issued (for the resources' queues)

    def add(self, took_us: int) -> None:
        f = self._further_us
        if f == -1:
            self.us += took_us
        else:
            n = self._n
            self._n = n + 1
            if n == 0:
                self.us = took_us
            else:
                us = self.us + (f or 0)
                self.us = us if us > took_us else took_us

    def issue_at(self) -> int:
        """When its next call is issued: serial calls one after another, a batch's at once."""
        return self.start_us + self.us if self._further_us == -1 else self.start_us

    def __enter__(self) -> Tab:
        meter: Meter = self._meter  # type: ignore[assignment]  # a tab is entered through its meter
        tabs = meter._tabs
        if meter._run is not None:  # only the resources' queues need to know when
            self.start_us = tabs[-1].issue_at() if self._join and tabs else meter._now()
        tabs.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        tabs = self._meter._tabs  # type: ignore[union-attr]
        tabs.pop()
        if self._join and tabs:
            tabs[-1].add(self.us)


class RequestCost(Tab):
    """The modelled latency of the client request a broker is serving (a publish), for what the
    client waits in virtual time: the broker opens it per request (``with request: ...``, which
    starts it from nothing)
    and bills its own part (request and answer hops, the ledger append); every call engine code
    makes on the way, billed while it is open, adds to it (a coordinator round trip, a header
    read, an op-record write)."""

    __slots__ = ()

    def __enter__(self) -> RequestCost:
        self.us = 0
        meter: Meter = self._meter  # type: ignore[assignment]
        if meter._run is not None:
            self.start_us = meter._now()
        meter._tabs.append(self)
        return self

    def charge(self, kind: str, times: int = 1, resource: str | None = None, key: str = "") -> None:
        """Bill ``times`` calls of ``kind`` on the request's path (the request must be open
        or this adds to whatever tab is)."""
        assert self._meter is not None
        if self._meter._tabs and self._meter._tabs[-1] is self:
            self._meter.bill(kind, resource, key, times)
        else:  # outside a request (a unit test calling the engine directly): bill it to this tab
            with self:
                self._meter.bill(kind, resource, key, times)


class Meter:
    """Bills port calls of one broker (its engine and dispatchers) in virtual time."""

    def __init__(self, latency: LatencyModel, scheduler: Scheduler) -> None:
        self.latency = latency
        self._of = latency.cost_fn()  # the model's next cost of one call (a constant, or a draw)
        self._now = scheduler.now_us
        self._tabs: list[Tab] = []
        self.billed = Counters()
        # Wall time: no queueing here, the real service queues (and latencies are zero).
        root = scheduler.parent if isinstance(scheduler, Scope) else scheduler
        queues = bool(latency.resources) and isinstance(root, VirtualScheduler)
        self._run: Capacity | None = run_capacity(root, latency.resources) if queues else None
        self._local: Capacity | None = Capacity(latency.resources) if queues else None
        # the host's cores: kind -> the core time a call of it works (ResourceSpec.kind_service_us)
        cpu = latency.resources.get("cpu") if queues else None
        self._cpu_us: dict[str, int] = dict(cpu.kind_service_us) if cpu is not None else {}
        self._cpu = self._run.resource("cpu") if cpu is not None and self._run is not None else None
        # the last call booked on an in-order thread: (the outermost tab it was billed in, the
        # thread, when its task arrived, when it completes, when the thread read its task:
        # Resource.read_at); see _admit
        self._task: tuple[Tab | None, Resource, int, int, int] | None = None
        self._adds: dict[str, AddOrder] = {}  # per ledger (this broker's handles): its appends' order
        self._io_turn = 0  # the IO thread the next task scheduled on the group lands on (next_io_thread)
        self.request = RequestCost(self)
        if self._run is None:  # nothing queues: every call takes the hot path (instance attributes)
            self.bill = self._free_bill()  # type: ignore[method-assign]
            self.book_per_thousand = self._free_book()  # type: ignore[method-assign]

    def of(self, kind: str) -> int:
        return self._of(kind)

    def _resource(self, name: str, key: str, create: bool = True) -> Resource | None:
        cap = self._run if name in PER_RUN else self._local
        return cap.resource(name, key, create) if cap is not None else None

    def _serving(self, kind: str, resource: str, key: str) -> Resource | None:
        """The instance ``key`` of ``resource`` that queues ``kind``; None when it has no capacity
        or runs ``kind`` beside its queue (a kind outside its ``kinds``)."""
        res = self._resource(resource, key)
        if res is not None and res.spec.kinds is not None and kind not in res.spec.kinds:
            return None
        return res

    def bill(self, kind: str, resource: str | None = None, key: str = "", times: int = 1) -> int:
        """Bill ``times`` calls of ``kind`` issued now, one after another (through ``resource``
        instance ``key`` when it has a capacity): adds each to the open tab and returns the
        time they took."""
        of = self._of
        self.billed[kind] += times
        tabs = self._tabs
        core_us = self._cpu_us.get(kind, 0)
        if resource is None and not core_us:  # a call no resource serves (without resources: _free_bill)
            took = 0
            for _ in range(times):
                lat = of(kind)
                if tabs:
                    tabs[-1].add(lat)
                took += lat
            return took
        top = tabs[-1] if tabs else None
        res = self._resource(resource, key) if resource is not None else None
        beside = None  # the thread, when it runs the call beside its queue (a kind outside its ``kinds``)
        if res is not None and res.spec.kinds is not None and kind not in res.spec.kinds:
            res, beside = None, res
        own = res is not None and kind in res.spec.latency_kinds
        adds = self._add_order(key) if kind == APPEND else None
        took = 0
        for _ in range(times):
            lat = of(kind)
            at = top.issue_at() if top is not None else self._now() + took
            waited = self._core(at, core_us) if core_us else 0
            if res is not None:
                lat = self._admit(res, at + waited, lat, own)
            elif beside is not None and beside.in_order:
                self._beside(beside, at + waited, lat)
            lat += waited
            if adds is not None:
                lat = adds.complete(at, at + lat, self._now()) - at
            if top is not None:
                top.add(lat)
            took += lat
        return took

    def _add_order(self, ledger: str) -> AddOrder:
        order = self._adds.get(ledger)
        if order is None:
            order = self._adds[ledger] = AddOrder()
        return order

    def _admit(self, res: Resource, at_us: int, latency_us: int, own: bool) -> int:
        """``res.admit`` of one call, issued at ``at_us``. On a thread serving in arrival order, a
        call issued the instant the same request's call before it on that thread completes is the
        same task: RocksdbMetadataStore completes each store call on its caller's thread, so a
        chain of them runs as one event-loop task, and work that arrived meanwhile waits for the
        whole chain. Any other call (after a hop, an append, on another thread) arrives anew."""
        if not res.in_order:
            return res.admit(at_us, latency_us, self._now(), own)
        root, arrival, read = self._task_arrival(res, at_us)
        took = res.admit(at_us, latency_us, self._now(), own, arrival)
        self._task = (root, res, arrival, at_us + took, read)
        return took

    def _beside(self, res: Resource, at_us: int, latency_us: int) -> None:
        """A call on an in-order thread that its resource does not queue (a read beside the
        writes' commits): it books nothing, but it runs on the thread, so it starts a task there
        (a command's handler reading the store before it writes) or goes on with the one it
        continues."""
        root, arrival, read = self._task_arrival(res, at_us)
        self._task = (root, res, arrival, at_us + latency_us, read)

    def _task_arrival(self, res: Resource, at_us: int) -> tuple[Tab | None, int, int]:
        """(the outermost open tab, when the task of a call on ``res`` issued at ``at_us`` arrived,
        when the thread read it): the last task's when the call is the same request's on that
        thread, issued the instant that task's last call completes; else ``at_us`` and its read
        (:meth:`Resource.read_at`, before the call books its own arrival)."""
        root = self._tabs[0] if self._tabs else None
        task = self._task
        if task is not None and root is not None and task[0] is root and task[1] is res and task[3] == at_us:
            return root, task[2], task[4]
        return root, at_us, res.read_at(at_us)

    def _core(self, at_us: int, core_us: int) -> int:
        """A call issued at ``at_us`` that works ``core_us`` on the host's cores: its wait for a
        core (the work itself is inside its latency, which was measured with it)."""
        res = self._cpu
        assert res is not None  # _cpu_us is set only with a cpu spec, and only where resources queue
        return res.admit(at_us, core_us, self._now(), True) - core_us

    def bill_per_thousand(self, kind: str, units: int, resource: str | None = None, key: str = "",
                          also: tuple[str, int] | None = None) -> int:
        """One call whose cost is ``kind``'s per thousand ``units`` (a listing walking ``units``
        keys: one draw, scaled), issued now; counted as ``units`` (``billed[kind]``: the keys
        walked). ``also``: (kind, units) priced into the same call and counted alike (the
        entries the walk passes besides its keys). Added to the open tab, through ``resource``
        as :meth:`bill` (as a call of ``kind``); returns its time."""
        lat = self._per_thousand(kind, units, also)
        res = self._serving(kind, resource, key) if resource is not None else None
        tabs = self._tabs
        top = tabs[-1] if tabs else None
        if res is not None:
            lat = self._admit(res, top.issue_at() if top is not None else self._now(), lat, kind in res.spec.latency_kinds)
        if top is not None:
            top.add(lat)
        return lat

    def book_per_thousand(self, kind: str, units: int, resource: str, key: str = "") -> int:
        """Work ``resource`` instance ``key`` does on its own after a call, priced as ``kind`` per
        thousand ``units`` (one draw, scaled) and counted as ``units``: it queues on that thread
        from when the open tab's calls are done (now without one), and nobody waits for it but
        what the thread serves after it (a store's notifications, run on its event thread after
        the write that queued them). Its time (queued only where the resource has a capacity)."""
        lat = self._per_thousand(kind, units)
        res = self._resource(resource, key) if self._run is not None else None
        if res is None or not lat:
            return lat
        tabs = self._tabs
        at = tabs[-1].issue_at() if tabs else self._now()
        res.admit(at, lat, self._now(), True)  # the thread is held for the work itself
        return lat

    def _per_thousand(self, kind: str, units: int, also: tuple[str, int] | None = None) -> int:
        """Count ``units`` of ``kind`` (and ``also``'s) and price them: one draw of each kind per
        thousand units, scaled, rounded to whole µs."""
        self.billed[kind] += units
        cost = self._of(kind) * units
        if also is not None and also[1]:
            self.billed[also[0]] += also[1]
            cost += self._of(also[0]) * also[1]
        return (cost + 500) // 1000

    def _free_bill(self) -> Callable[..., int]:
        """:meth:`bill` without resources, with what it touches bound once: a call is billed on
        every port call of a replay, and attribute lookups were a third of its time."""
        of, billed, tabs = self._of, self.billed, self._tabs

        def bill(kind: str, resource: str | None = None, key: str = "", times: int = 1) -> int:
            billed[kind] += times
            if times == 1:
                lat = of(kind)
                if tabs:
                    tab = tabs[-1]
                    if tab._further_us == -1:  # a serial tab: Tab.add inlined (the publish path)
                        tab.us += lat
                    else:
                        tab.add(lat)
                return lat
            took = 0
            for _ in range(times):
                lat = of(kind)  # one draw per call
                if tabs:
                    tabs[-1].add(lat)
                took += lat
            return took

        bill.__doc__ = Meter.bill.__doc__
        return bill

    def _free_book(self) -> Callable[..., int]:
        """:meth:`book_per_thousand` without resources, :meth:`_per_thousand` inlined: nothing
        queues, so it only counts and prices (a store's notifications are booked on every write)."""
        of, billed = self._of, self.billed

        def book_per_thousand(kind: str, units: int, resource: str, key: str = "") -> int:
            billed[kind] += units
            return (of(kind) * units + 500) // 1000

        book_per_thousand.__doc__ = Meter.book_per_thousand.__doc__
        return book_per_thousand

    def serve(self, resource: str, key: str = "") -> int:
        """A request a resource processes itself (no operation kind: the coordinator handling a
        client request): its wait for a slot plus its service time, added to the open tab; 0
        when the resource has no capacity set (no time, as before capacity)."""
        res = self._resource(resource, key) if self._run is not None else None
        if res is None:
            return 0
        tabs = self._tabs
        tab = tabs[-1] if tabs else None
        took = res.admit(tab.issue_at() if tab is not None else self._now(), res.spec.service_us or 0, self._now())
        if tab is not None:
            tab.add(took)
        return took

    def behind(self, resource: str, key: str = "", in_tab: bool = True) -> int:
        """A request that needs resource instance ``key`` for no time of its own (it waits for the
        thread): its wait, added to the open tab (``in_tab=False``: a continuation's own wait, from
        now, as :meth:`took`); 0 when the resource has no capacity set or nothing was ever booked
        on that instance (v4's IO thread)."""
        if self._run is None:  # no capacity: asked on every request's way, so before a call
            return 0
        res = self._booked(resource, key)
        if res is None:
            return 0
        tabs = self._tabs
        tab = tabs[-1] if tabs and in_tab else None
        at = tab.issue_at() if tab is not None else self._now()
        waited = res.free_at(at) - at
        if tab is not None:
            tab.add(waited)
        return waited

    def next_io_thread(self) -> bool:
        """A task this broker schedules on its IO event loop group lands on the next IO thread in
        turn (Netty's ``next()`` over :data:`engine.capacity.IO_THREADS`): whether it is the one
        serving the client's connection (the first, counting from the broker's first such task)."""
        turn = self._io_turn
        self._io_turn = (turn + 1) % IO_THREADS
        return turn == 0

    def hold(self, resource: str, key: str, until_us: int) -> None:
        """A task that arrives at resource instance ``key`` now and holds it until ``until_us``
        (blocked there: a lock another thread holds), once its turn comes; nothing when the
        resource has no capacity or the turn comes after ``until_us``."""
        res = self._resource(resource, key) if self._run is not None else None
        if res is None:
            return
        now = self._now()
        start = res.free_at(now)
        if until_us > start:
            res.admit(now, until_us - start, now, True)

    def _booked(self, resource: str, key: str) -> Resource | None:
        """Resource instance ``key``, if a request was ever booked on it (None: no capacity set,
        or nothing there yet, as on v4's IO thread)."""
        return self._resource(resource, key, create=False) if self._run is not None else None

    def in_use(self, resource: str, key: str) -> bool:
        """Whether a request was ever booked on resource instance ``key``."""
        return self._run is not None and self._booked(resource, key) is not None

    def read_of_last_task(self, resource: str, key: str) -> int | None:
        """When in-order thread ``key`` of ``resource`` read the task of the last call booked on
        it (:meth:`Resource.read_at`), if that call was the last one on an in-order thread; None
        otherwise (nothing booked there: v4's IO thread, or no capacity)."""
        res = self._booked(resource, key)
        task = self._task
        return task[4] if res is not None and task is not None and task[1] is res else None

    def flushed_at(self, resource: str, key: str, read_us: int, ready_us: int) -> int:
        """When an answer written at ``ready_us`` by a task that in-order thread ``key`` read at
        ``read_us`` leaves the broker: after the batch read with it (:meth:`Resource.flushed_at`)."""
        res = self._booked(resource, key)
        return ready_us if res is None else res.flushed_at(read_us, ready_us)

    def batch_done_at(self, resource: str, key: str, at_us: int) -> int | None:
        """When the batch in-order thread ``key`` of ``resource`` runs at ``at_us`` is done
        (:meth:`Resource.batch_done_at`); None when nothing was ever booked there (nothing waits)."""
        res = self._booked(resource, key)
        return None if res is None else res.batch_done_at(at_us)

    def took(self, kind: str, resource: str | None = None, key: str = "", times: int = 1) -> int:
        """Bill calls a continuation of their own waits for, one after another (not added to
        whatever tab is open: a recovery started on a request's path does not delay the
        request): their time."""
        of = self._of
        self.billed[kind] += times
        core_us = self._cpu_us.get(kind, 0)
        if not core_us and (self._run is None or resource is None):
            return of(kind) if times == 1 else sum(map(of, repeat(kind, times)))
        res = self._resource(resource, key) if resource is not None and self._run is not None else None
        if res is not None and res.spec.kinds is not None and kind not in res.spec.kinds:
            res = None
        took = 0
        for _ in range(times):
            lat = of(kind)
            waited = self._core(self._now() + took, core_us) if core_us else 0
            took += waited + (res.admit(self._now() + took + waited, lat, self._now()) if res is not None else lat)
        return took

    def took_task(self, kind: str, units: int) -> int:
        """``units`` calls of ``kind`` that one thread runs one after another as one task (a
        dispatcher's read: its entries passed in turn), a continuation's own as :meth:`took`:
        counted as ``units``, and on the host's cores one request of their summed work. Its time
        is the task's wait for a core plus the work of every call after the first, whose work is
        inside the latency measured with it; each call's own latency is drawn besides."""
        of = self._of
        self.billed[kind] += units
        took = of(kind) if units == 1 else sum(map(of, repeat(kind, units)))
        core_us = self._cpu_us.get(kind, 0)
        if not core_us or units <= 0:
            return took
        return took + self._core(self._now(), core_us * units) + core_us * (units - 1)

    def tab(self) -> Tab:
        """A serial tab of its own: ``with meter.tab() as t: ...`` then wait ``t.us`` (not
        added to an enclosing tab)."""
        return Tab(self)

    def unit(self) -> Tab:
        """Serial calls that count as one call of the enclosing tab (a store call made of
        several requests, inside a batch)."""
        return Tab(self, join=True)

    def batch(self, each_further: str | None = "meta.pipelined") -> Tab:
        """Calls issued at once (see the module doc), one call of the enclosing tab."""
        return Tab(self, None if each_further is None else self.of(each_further), join=True)

    def capacity_stats(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per resource: requests, busy and queued µs: (this broker's resources, the run's,
        which every broker of the run shares and so counts since the run started)."""
        return (self._local.stats() if self._local is not None else {},
                self._run.stats() if self._run is not None else {})


def billed_counts(meters: Any) -> Counters:
    """The billed op counts of several meters, summed, as ``billed.<kind>``."""
    total = Counters()
    for m in meters:
        total.update(m.billed)
    return Counters({f"billed.{k}": v for k, v in total.items()})
