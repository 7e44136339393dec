"""A trace's rows repeated N times over, for saturation runs long enough to measure.

A saturated broker's committed rate over one pass of a validation trace (about a hundred txns)
is a phase of 90-520 ms on this machine, and one v4 run of ``small-slow-2000`` then gave 174 to
789 txn/s; four passes in one run gave 557-616 (``datasets/validation/README.md``, "Saturation
runs were too short"). Each repeat after the first is the trace's rows again with their own txn
and message ids (``.r1``, ``.r2``, ...: a txn is begun once, a message published once) and
shifted after the previous repeat's last row; the subscriptions are made once, by the first.
Rows that change the cluster (split, merge, crashes) do not repeat: such a trace is refused.
"""

from __future__ import annotations

from pathlib import Path

from bench.trace.schema import OPTIONAL_COLUMNS
from bench.trace.trace import TraceWriter, open_checked, read_events, trace_columns, trace_metadata
from engine.errors import TraceError

ONCE = frozenset({"subscribe"})  # made by the first repeat only
UNREPEATABLE = frozenset({"split", "merge", "crash_broker", "crash_tc"})


def unrepeatable_row(path: str | Path) -> tuple[int, str] | None:
    """The first row (its number and op) that cannot repeat, or ``None``."""
    for e in read_events(path):
        if e.op in UNREPEATABLE:
            return e.row, e.op
    return None


def write_repeated(src: str | Path, dst: str | Path, times: int) -> Path:
    """Write ``src``'s rows ``times`` times over to ``dst`` (Parquet, the source's metadata plus
    ``repeated``); raises :class:`TraceError` naming the first row that cannot repeat."""
    if times < 1:
        raise ValueError(f"times must be >= 1, got {times}")
    rows = list(read_events(src))  # read (and validated) once: a saturation trace is thousands of rows
    bad = next((e for e in rows if e.op in UNREPEATABLE), None)
    if bad is not None:
        raise TraceError(f"a {bad.op} row cannot be repeated (it changes the cluster)", row=bad.row, source=str(src))
    last = rows[-1].ts_us if rows else 0  # ts_us never goes backwards in a valid trace
    optional = tuple(c for c in OPTIONAL_COLUMNS if c in trace_columns(open_checked(src)))
    meta = {**trace_metadata(src), "repeated": str(times)}
    with TraceWriter(dst, metadata=meta, optional=optional) as w:
        for i in range(times):
            shift, tag = i * (last + 1), f".r{i}" if i else ""
            for e in rows:
                if i and e.op in ONCE:
                    continue
                fields = e._asdict()
                del fields["row"], fields["ts_us"], fields["op"]
                if tag:
                    fields["txn"] = None if e.txn is None else e.txn + tag
                    fields["msg"] = None if e.msg is None else e.msg + tag
                w.add(e.ts_us + shift, e.op, **fields)
    return Path(dst)
