"""A run's new-txns in two kinds: those that overlapped one of the client's end-txns and the rest.

On v5 the two differ by several times. Pulsar 5's ``TransactionCoordinatorV5`` handles a client's
requests on its connection's broker thread, and ``RocksdbMetadataStore`` commits on the caller's
thread (``storePut``). So a new-txn's sequence CAS and header create wait behind the store calls
of an END_TXN on the same connection: its header reads, its CAS, ``listOpsByTxn``'s walk and its
events. The model bills those calls on that thread too (:mod:`metadata_v5.metered`).

On 2026-11-27's omb set the broker's v5 new-txns were split 51 : 58, with medians of 12.5 ms
and 2.4 ms. A p50 over both kinds then falls between them, where a few txns more or fewer
behind an end-txn move it by milliseconds. The note that goes with a missed new-txn row gives
each kind's median, the broker's beside the model's, so that a wrong cost can be told from a
median caught between two kinds.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class NewTxnModes:
    total: int  # new-txns answered
    behind: int  # of those, how many overlapped one of the run's end-txns
    behind_p50_us: int | None  # their median new-txn latency (None: none)
    rest_p50_us: int | None  # the others' median
    after: int = 0  # of those behind, how many were answered after every end-txn they overlapped

    def to_json(self) -> dict[str, Any]:
        return {"new_txns": self.total, "behind_end_txn": self.behind, "behind_p50_us": self.behind_p50_us,
                "rest_p50_us": self.rest_p50_us, "answered_after_the_end_txn": self.after}


def _median(xs: list[int]) -> int | None:
    return statistics.median_low(xs) if xs else None


def new_txn_modes(txns: Iterable[Mapping[str, Any]]) -> NewTxnModes | None:
    """The kinds of one run's new-txns, from its ``txns.parquet`` rows (one engine's). A new-txn
    is ``opened_ts_us`` -> ``new_txn_answered_ts_us``, an end-txn ``commit_requested_ts_us`` ->
    ``end_ts_us``. They overlap when each began before the other ended. ``after`` counts the
    new-txns answered after the end-txns they overlapped were: on one thread that serves an
    END_TXN's store calls as one chain, nearly all. None when the rows have no answer times
    (results written before that column) or no new-txn was answered."""
    news: list[tuple[int, int]] = []
    ends: list[tuple[int, int]] = []
    for row in txns:
        opened, answered = row.get("opened_ts_us"), row.get("new_txn_answered_ts_us")
        if opened is not None and answered is not None:
            news.append((int(opened), int(answered)))
        asked, ended = row.get("commit_requested_ts_us"), row.get("end_ts_us")
        if asked is not None and ended is not None:
            ends.append((int(asked), int(ended)))
    if not news:
        return None
    ends.sort()
    starts = [a for a, _ in ends]
    latest: list[int] = []  # the latest end among the end-txns asked so far, in order of asking
    for _, b in ends:
        latest.append(max(b, latest[-1]) if latest else b)
    behind: list[int] = []
    rest: list[int] = []
    after = 0
    for issued, back in news:
        k = bisect.bisect_left(starts, back)  # the end-txns asked before this new-txn was answered
        if k and latest[k - 1] > issued:  # the latest of those is one it overlapped
            behind.append(back - issued)
            after += back > latest[k - 1]
        else:
            rest.append(back - issued)
    return NewTxnModes(len(news), len(behind), _median(behind), _median(rest), after)


def _us(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _error(model: int | None, broker: int | None) -> str:
    return "" if model is None or not broker else f" ({(model - broker) / broker:+.0%})"


def note(design: str, model: NewTxnModes | None, broker: NewTxnModes | None) -> str:
    """A sentence on the two kinds in both runs; "" when either run has no answer times."""
    if model is None or broker is None:
        return ""
    return (f"{design} new-txn by kind: {broker.behind} of the broker's {broker.total} new-txns overlapped one of "
            f"the client's end-txns ({model.behind} of {model.total} in the model), and {broker.after} of those were "
            f"answered after it ({model.after} in the model). Their median was "
            f"{_us(broker.behind_p50_us)} µs at the broker and {_us(model.behind_p50_us)} in the model"
            f"{_error(model.behind_p50_us, broker.behind_p50_us)}; the others' was {_us(broker.rest_p50_us)} and "
            f"{_us(model.rest_p50_us)}{_error(model.rest_p50_us, broker.rest_p50_us)} (txns.parquet, "
            "bench/report/new_txn_modes.py). A percentile over both kinds falls where their shares put it: "
            "when those are close, a few txns moving between kinds move it by the gap between the kinds.")
