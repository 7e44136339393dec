"""The per-second time series of a run through the real broker (:mod:`bench.replay.timeseries`), built
from the trace client's events once the run is folded (:class:`bench.pulsar.fold.EventFold`).

Publishes and commits/aborts count in the window of their answer, deliveries in the window they
arrived in; end-to-end latency is send -> first delivery (as the fold measures dispatch); the
backlog counts messages sent to a subscribed topic, outside txns that did not commit, and not yet
delivered at the window's end. Blocked time is not observable from outside the broker.
"""

from __future__ import annotations

from typing import Any

from bench.pulsar.fold import EventFold
from bench.replay.timeseries import WINDOW_US, from_timeline


def broker_series(fold: EventFold, window_us: int = WINDOW_US) -> list[dict[str, Any]]:
    first: dict[str, int] = {}
    for _topic, _sub, msg, t, *_ in fold.deliveries:
        if msg not in first or t < first[msg]:
            first[msg] = t
    committed = {label for label, txn in fold.txns.items() if txn.outcome == "committed"}
    backlog: list[tuple[int, int | None]] = []
    firsts: list[tuple[int, int]] = []
    for msg, pub in fold.pubs.items():
        seen = first.get(msg)
        if seen is not None:
            firsts.append((seen, seen - pub.start_us))
        if pub.topic in fold.subscribed and (pub.txn is None or pub.txn in committed):
            backlog.append((pub.start_us, seen))
    return from_timeline(fold.label, fold.answers, (d[3] for d in fold.deliveries), firsts, backlog, window_us)
