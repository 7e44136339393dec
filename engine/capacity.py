"""Capacity: shared resources that queue work beyond their concurrency, in virtual time.

A request to a resource starts when one of its ``concurrency`` slots is free, holds the slot for
the resource's ``service_us``, and completes ``latency`` after it starts; so at most
``concurrency / service_us`` requests per microsecond get through and a faster offered rate
queues (the delay a caller sees grows without bound: saturation). Resources without a
:class:`~engine.clock.ResourceSpec` have infinite capacity (no queueing). In wall time nothing
queues here: the real service queues by itself.

Scopes (``LatencyModel.resources`` names): ``metadata`` one per run (every broker shares the v5
store), ``bookie`` one per ledger (its ensemble), ``coordinator`` one per broker's coordinator,
``dispatch`` one per broker. Slots are taken in the order requests are admitted, which is the
order engine code issues them (a request admitted for a later instant than a queued one may take
a slot freed earlier: a small approximation of FIFO, exact for one caller at a time).
"""

from __future__ import annotations

import heapq
import weakref
from typing import Mapping

from engine.clock import ResourceSpec, Scheduler, Scope

PER_RUN = frozenset({"metadata", "bookie"})  # shared by every broker of a run


class Resource:
    """One resource's slots: a heap of the instants each slot is next free."""

    __slots__ = ("spec", "_free", "busy_us", "queued_us", "requests")

    def __init__(self, spec: ResourceSpec) -> None:
        self.spec = spec
        self._free = [0] * spec.concurrency
        self.busy_us = 0  # service time summed over requests
        self.queued_us = 0  # time requests waited for a slot, summed
        self.requests = 0

    def admit(self, at_us: int, latency_us: int) -> int:
        """A request issued at ``at_us`` taking ``latency_us`` once served: returns how long
        after ``at_us`` it completes (its wait for a slot plus its latency)."""
        free = self._free
        start = free[0] if free[0] > at_us else at_us
        heapq.heapreplace(free, start + self.spec.service_us)
        self.requests += 1
        self.busy_us += self.spec.service_us
        self.queued_us += start - at_us
        return start - at_us + latency_us


class Capacity:
    """The resources of one scope (a run, or a broker): instances created on first use, keyed
    by (name, instance key), each from its name's spec; ``None`` for a name without a spec."""

    def __init__(self, specs: Mapping[str, ResourceSpec]) -> None:
        self._specs = dict(specs)
        self._resources: dict[tuple[str, str], Resource] = {}

    def resource(self, name: str, key: str = "") -> Resource | None:
        spec = self._specs.get(name)
        if spec is None:
            return None
        res = self._resources.get((name, key))
        if res is None:
            res = self._resources[(name, key)] = Resource(spec)
        return res

    def stats(self) -> dict[str, int]:
        """Per resource name: requests, busy and queued microseconds (summed over instances)."""
        out: dict[str, int] = {}
        for (name, _), res in sorted(self._resources.items()):
            for what, value in (("requests", res.requests), ("busy_us", res.busy_us), ("queued_us", res.queued_us)):
                out[f"{name}.{what}"] = out.get(f"{name}.{what}", 0) + value
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
