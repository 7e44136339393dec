"""A run's requests in two kinds: those that overlapped one of the client's end-txns, and the rest.

The trace client sends a run's requests on one connection (on v5 one per distinct txn timeout),
and Pulsar handles a connection's commands one after another on its Netty IO thread (ServerCnx). On v5 an END_TXN's
store calls run on that thread too (``TransactionCoordinatorV5.endTransaction``: the header CAS,
``listOpsByTxn``'s walk, the events; ``RocksdbMetadataStore`` commits on its caller's thread), so
a request sent meanwhile waits for them. The model bills them on that thread as well
(:mod:`metadata_v5.metered`).

Of the rest, :func:`modes` sets apart those sent soon after an end-txn's answer
(:data:`SOON_AFTER_US`). At the broker a v5 publish sent then is slower for a while, plain or in a
txn and whatever its segment, where v4's is not (datasets/validation/README.md, session 42): the
buffers' applies that the END_TXN's events start run then (``MetadataTransactionBuffer
.applyTerminalNow``), and so do the dispatchers' reads of what they made visible.

The end-txns themselves split the same way, by whether another of them was in flight
(:func:`crowd_modes`).

A percentile over both kinds falls where their shares put it. The note that goes with a missed
row gives each kind's count, median and p99, the broker's beside the model's, so that a kind the
model gets wrong can be told from a percentile caught between two kinds. The spans come from
``txns.parquet`` (new-txns and end-txns), the model's ``publishes.parquet`` (its publishes, kept
by validate: ``bench.replay.runner.replay_trace``'s ``publish_spans``) and the broker's
``pulsar-events-<design>.jsonl`` (its client's publishes).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow.parquet as pq

from bench.replay.results import PUBLISHES
from bench.report.client_events import events

Span = tuple[int, int]  # (issued, answered) µs from the run's start
SOON_AFTER_US = 10_000  # "soon after an end-txn's answer": the broker's v5 publishes are slower that long


@dataclass(frozen=True)
class Modes:
    total: int  # requests answered
    behind: int  # of those, how many overlapped one of the run's end-txns
    behind_p50_us: int | None  # their median latency (None: none)
    rest_p50_us: int | None  # the others' median
    after: int = 0  # of those behind, how many were answered after every end-txn they overlapped
    behind_p99_us: int | None = None
    rest_p99_us: int | None = None
    # of the rest, how many were sent within SOON_AFTER_US of an end-txn's answer (None: not split,
    # as for end-txns), and their median and p99
    soon: int | None = None
    soon_p50_us: int | None = None
    soon_p99_us: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.total, "behind_end_txn": self.behind, "behind_p50_us": self.behind_p50_us,
            "behind_p99_us": self.behind_p99_us, "rest_p50_us": self.rest_p50_us,
            "rest_p99_us": self.rest_p99_us, "answered_after_the_end_txn": self.after}
        if self.soon is not None:
            out |= {"soon_after_end_txn": self.soon, "soon_after_us": SOON_AFTER_US,
                    "soon_p50_us": self.soon_p50_us, "soon_p99_us": self.soon_p99_us}
        return out


def _pct(xs: list[int], q: float) -> int | None:
    """The ``q`` quantile of ``xs`` by nearest rank: the smallest value with at least ``q`` of them
    at or below it (as hdrh reports a percentile)."""
    if not xs:
        return None
    s = sorted(xs)
    # rounded first: q * n can land a hair under a whole rank (0.57 * 100 is 56.99999999999999)
    return s[max(0, math.ceil(round(q * len(s), 9)) - 1)]


def end_spans(txns: Iterable[Mapping[str, Any]]) -> list[Span]:
    """Each end-txn of ``txns.parquet`` rows (one engine's): ``commit_requested_ts_us`` ->
    ``end_ts_us``."""
    return [(int(r["commit_requested_ts_us"]), int(r["end_ts_us"])) for r in txns
            if r.get("commit_requested_ts_us") is not None and r.get("end_ts_us") is not None]


def new_txn_spans(txns: Iterable[Mapping[str, Any]]) -> list[Span]:
    """Each new-txn of ``txns.parquet`` rows: ``opened_ts_us`` -> ``new_txn_answered_ts_us``
    (none in results written before that column)."""
    return [(int(r["opened_ts_us"]), int(r["new_txn_answered_ts_us"])) for r in txns
            if r.get("opened_ts_us") is not None and r.get("new_txn_answered_ts_us") is not None]


def modes(spans: Sequence[Span], ends: Sequence[Span]) -> Modes | None:
    """``spans`` in two kinds against ``ends``: a request and an end-txn overlap when each began
    before the other ended. ``after`` counts those answered after the end-txns they overlapped
    were (on one thread that serves an END_TXN's store calls as one chain, nearly all). Of the
    rest, ``soon`` counts those sent less than :data:`SOON_AFTER_US` after an end-txn's answer.
    None without a request."""
    if not spans:
        return None
    ordered = sorted(ends)
    starts = [a for a, _ in ordered]
    answers = sorted(b for _, b in ends)
    latest: list[int] = []  # the latest end among the end-txns asked so far, in order of asking
    for _, b in ordered:
        latest.append(max(b, latest[-1]) if latest else b)
    behind: list[int] = []
    rest: list[int] = []
    soon: list[int] = []
    after = 0
    for issued, back in spans:
        k = bisect.bisect_left(starts, back)  # the end-txns asked before this request was answered
        if k and latest[k - 1] > issued:  # the latest of those is one it overlapped
            behind.append(back - issued)
            after += back > latest[k - 1]
            continue
        rest.append(back - issued)
        j = bisect.bisect_right(answers, issued)  # the end-txns answered by the time it was sent
        if j and issued - answers[j - 1] < SOON_AFTER_US:
            soon.append(back - issued)
    return Modes(len(spans), len(behind), _pct(behind, 0.5), _pct(rest, 0.5), after,
                 _pct(behind, 0.99), _pct(rest, 0.99), len(soon), _pct(soon, 0.5), _pct(soon, 0.99))


def crowd_modes(ends: Sequence[Span]) -> Modes | None:
    """A run's end-txns in two kinds: those that overlapped another of them (``behind``) and those
    alone. A crowd of END_TXNs shares what serves them (the coordinator, the broker's threads and
    cores) where a lone one does not: a trace's generator commits every txn still open at its
    end, at one instant (``bench.trace.workloads.generate``). ``after`` counts those answered
    after every other end-txn they overlapped. None without an end-txn."""
    if not ends:
        return None
    order = sorted(range(len(ends)), key=lambda i: ends[i])
    starts = [ends[i][0] for i in order]
    # per prefix of ``order``: its latest end, that end's position, and the latest end among the rest
    tops: list[tuple[int, int, int]] = []
    first, at, second = -1, -1, -1
    for pos, i in enumerate(order):
        end = ends[i][1]
        if end > first:
            first, at, second = end, pos, first
        elif end > second:
            second = end
        tops.append((first, at, second))
    crowd: list[int] = []
    alone: list[int] = []
    after = 0
    for pos, i in enumerate(order):
        asked, back = ends[i]
        k = bisect.bisect_left(starts, back)  # the end-txns asked before this one was answered
        latest = -1
        if k:
            first, at, second = tops[k - 1]
            latest = second if at == pos else first  # the latest of the others
        if latest > asked:
            crowd.append(back - asked)
            after += back > latest
        else:
            alone.append(back - asked)
    return Modes(len(ends), len(crowd), _pct(crowd, 0.5), _pct(alone, 0.5), after,
                 _pct(crowd, 0.99), _pct(alone, 0.99))


def publish_spans(run_dir: str | Path, label: str, design: str) -> dict[bool, list[Span]] | None:
    """A run's publishes, plain (True) and in a txn (False): the model's from its
    ``publishes.parquet`` rows of engine ``label``, else the broker's client's from
    ``pulsar-events-<design>.jsonl`` (the sends that succeeded); None when the run kept neither."""
    run_dir = Path(run_dir)
    out: dict[bool, list[Span]] = {True: [], False: []}
    if (run_dir / PUBLISHES).exists():
        table = pq.read_table(run_dir / PUBLISHES, columns=["txn", "issued_ts_us", "answered_ts_us"],
                              filters=[("engine", "=", label)])
        for txn, issued, answered in zip(*(table.column(c).to_pylist() for c in table.column_names)):
            out[txn is None].append((issued, answered))
        return out
    path = run_dir / f"pulsar-events-{design}.jsonl"
    if not path.exists():
        return None
    for e in events(path, '"publish"'):
        if e.get("ev") == "op" and e.get("op") == "publish" and e.get("ok") and e.get("end_us") is not None:
            out[e.get("txn") is None].append((int(e["start_us"]), int(e["end_us"])))
    return out


def _us(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _error(model: int | None, broker: int | None) -> str:
    return "" if model is None or not broker else f" ({(model - broker) / broker:+.0%})"


def note(what: str, model: Modes | None, broker: Modes | None, against: str = "one of the client's end-txns") -> str:
    """A sentence on the two kinds of ``what`` (e.g. "v5 new-txn") in both runs, ``against`` what
    the first kind overlapped (end-txns: "another of the client's end-txns", :func:`crowd_modes`);
    "" when either run has no spans."""
    if model is None or broker is None:
        return ""
    return (f"{what} by kind: {broker.behind} of the broker's {broker.total} overlapped {against} "
            f"({model.behind} of {model.total} in the model), and {broker.after} of those were answered "
            f"after it ({model.after} in the model). Their p50 / p99 were {_us(broker.behind_p50_us)} / "
            f"{_us(broker.behind_p99_us)} µs at the broker and {_us(model.behind_p50_us)}"
            f"{_error(model.behind_p50_us, broker.behind_p50_us)} / {_us(model.behind_p99_us)}"
            f"{_error(model.behind_p99_us, broker.behind_p99_us)} in the model; the others' "
            f"{_us(broker.rest_p50_us)} / {_us(broker.rest_p99_us)} and {_us(model.rest_p50_us)}"
            f"{_error(model.rest_p50_us, broker.rest_p50_us)} / {_us(model.rest_p99_us)}"
            f"{_error(model.rest_p99_us, broker.rest_p99_us)}{_soon(model, broker)} "
            "(bench/report/behind_end_txn.py). A percentile over both kinds falls where their shares put it.")


def _soon(model: Modes, broker: Modes) -> str:
    """The clause on the others sent soon after an end-txn's answer ("" when not split)."""
    if model.soon is None or broker.soon is None:
        return ""
    return (f". Of the others, {broker.soon} were sent within {SOON_AFTER_US // 1000} ms after an end-txn's "
            f"answer ({model.soon} in the model): p50 / p99 {_us(broker.soon_p50_us)} / {_us(broker.soon_p99_us)} "
            f"µs at the broker and {_us(model.soon_p50_us)}{_error(model.soon_p50_us, broker.soon_p50_us)} / "
            f"{_us(model.soon_p99_us)}{_error(model.soon_p99_us, broker.soon_p99_us)} in the model")


ModesOf = tuple[str, Modes | None, Modes | None]  # (what, the model's, the broker's)
SECTION_COLUMNS = ["behind (n): broker", "behind p50: broker", "behind p50: model", "soon (n): broker",
                   "soon p50: broker", "soon p50: model", "rest p50: broker", "rest p50: model"]


def section(kinds: Sequence[ModesOf], row_cls: Callable[..., Any]) -> tuple[str, list[str], list[Any], str] | None:
    """The report section of a validation's requests around the client's end-txns: per design and
    kind of request (``kinds``: e.g. ("v5 publish (plain)", model, broker)), how many of the
    broker's were behind an end-txn and the two runs' medians of those, of those sent soon after
    an end-txn's answer, and of the rest (µs). None when no kind has both runs."""
    rows = []
    for what, m, b in kinds:
        if m is None or b is None:
            continue
        design, label = what.split(" ", 1)
        rows.append(row_cls(f"Around END_TXNs {design}", label, "µs", {
            "behind (n): broker": b.behind, "behind p50: broker": b.behind_p50_us, "behind p50: model": m.behind_p50_us,
            "soon (n): broker": b.soon, "soon p50: broker": b.soon_p50_us, "soon p50: model": m.soon_p50_us,
            "rest p50: broker": b.rest_p50_us, "rest p50: model": m.rest_p50_us}, None, "n/a"))
    if not rows:
        return None
    note = ("The requests of the runs at the trace's pace in three kinds: behind = those that overlapped one of the "
            "client's end-txns (for the end-txns: another end-txn); soon = of the others, those sent within "
            f"{SOON_AFTER_US // 1000} ms after an end-txn's answer (the end-txns are not split so); rest = the "
            "others, soon included. The broker's counts, then each kind's median in µs in the broker's run and the "
            "model's (bench/report/behind_end_txn.py). At the broker a v5 publish is slower for about 10 ms "
            "after an END_TXN's answer, where v4's is not (datasets/validation/README.md, session 42).")
    return "Requests around the client's END_TXNs, model vs broker", SECTION_COLUMNS, rows, note
