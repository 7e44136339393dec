"""Traces: one row per client event, in Parquet (or CSV or JSON lines: :mod:`bench.trace.tracefmt`),
as specified in DESIGN.md. Short topic names are expanded as a Pulsar client expands them
(:func:`bench.trace.tracefmt.expand_topic`) before any check, so every reader sees full names.
The columns and their types are in :mod:`bench.trace.schema`.

:func:`read_events` streams a trace in record batches and validates every row before it is
yielded; :func:`validate` runs the same checks over a whole file without replaying it, so a
replay can refuse a bad trace before it writes anything. Errors are :class:`TraceError` naming
the file, the 0-based row number and the reason.
"""

from __future__ import annotations

import os
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import TraceError, TxnbenchError
from engine.topics import TopicName
from bench.trace.schema import COLUMNS, OPTIONAL_COLUMNS, WRITE_SCHEMA
from bench.trace.tracefmt import TraceFile, open_trace, short_name_error

SUB_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")

OPS = (
    "new_txn", "publish", "ack", "commit", "abort", "subscribe",
    "split", "merge", "crash_broker", "crash_tc",
)
ACK_KINDS = ("individual", "cumulative")
MAX_SIZE = 100 * 1024 * 1024  # Pulsar's largest message with chunking disabled is far below this
MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000
# ts_us counts microseconds from the trace's start. Virtual time is simulated tick by tick (v5's
# periodic GC and watch timers run through idle time: ~8 s of CPU per idle virtual year), so a
# trace in epoch microseconds (~1.7e15) would run for minutes before its first event, and
# ts_us near 2^63 overflows the clock; both are refused up front.
MAX_TS_US = 31 * 24 * 3600 * 1_000_000
# Labels (txn, msg, subscription, key, target) are names, not payloads: a replay keeps many of
# them in memory at once, so a trace of megabyte-long labels is refused rather than held.
MAX_LABEL = 1024
LABEL_COLUMNS = ("txn", "msg", "subscription", "key", "target", "topic")


class Event(NamedTuple):  # a tuple, not a frozen dataclass: 5x cheaper to build per row
    row: int
    ts_us: int
    op: str
    txn: str | None
    topic: str | None
    msg: str | None
    subscription: str | None
    size: int | None
    timeout_ms: int | None
    ack_kind: str | None
    target: str | None
    key: str | None
    sub_type: str | None = None  # optional column; rows built from COLUMNS alone lack it


# An Event from a row tuple without ``Event._make``'s Python-level call (once per trace row).
event_of_row: Callable[[tuple[Any, ...]], Event] = partial(tuple.__new__, Event)  # type: ignore[assignment]


class LabelSet:
    """A set of labels that stays small on long traces: a label of the form ``<prefix><n>``
    (a decimal without a leading zero, as the generator writes ``m123``/``t45``) is one byte in
    a per-prefix bytearray, so checking a 10M-row trace does not hold millions of strings;
    any other label is kept as is."""

    __slots__ = ("_bits", "_other")
    _DENSE_START = 1 << 16

    def __init__(self) -> None:
        self._bits: dict[str, bytearray] = {}
        self._other: set[str] = set()

    @staticmethod
    def _split(label: str) -> tuple[str, int] | None:
        prefix = label.rstrip("0123456789")
        digits = label[len(prefix):]
        if not digits or (digits[0] == "0" and len(digits) > 1) or len(digits) > 9 or not digits.isascii():
            return None
        return prefix, int(digits)

    def add(self, label: str) -> None:
        split = self._split(label)
        if split is None:
            self._other.add(label)
            return
        prefix, n = split
        bits = self._bits.get(prefix)
        if n >= max(2 * len(bits) if bits is not None else 0, self._DENSE_START):
            self._other.add(label)  # too sparse for the bitmap
            return
        if bits is None:
            bits = self._bits[prefix] = bytearray()
        if n >= len(bits):
            bits.extend(bytes(max(n + 1 - len(bits), len(bits))))  # doubling: amortised O(1)
        bits[n] = 1

    def __contains__(self, label: object) -> bool:
        if not isinstance(label, str):
            return False
        split = self._split(label)
        if split is None:
            return label in self._other
        bits = self._bits.get(split[0])
        if bits is not None and split[1] < len(bits) and bits[split[1]] == 1:
            return True
        return label in self._other


class RowValidator:
    """Checks rows in order; keeps just enough state for reference checks (open txns as
    strings, ended txns and published messages as :class:`LabelSet`)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.last_ts = 0
        self.open_txns: set[str] = set()
        self.ended_txns = LabelSet()
        self.msgs = LabelSet()
        self.topics: dict[str, bool] = {}  # name -> scalable

    def fail(self, row: int, reason: str) -> TraceError:
        return TraceError(reason, row=row, source=self.source)

    def check(self, e: Event) -> None:
        row = e.row
        if e.ts_us is None or e.ts_us < 0:
            raise self.fail(row, f"ts_us must be a non-negative integer, got {e.ts_us!r}")
        if e.ts_us > MAX_TS_US:
            raise self.fail(row, f"ts_us {e.ts_us} is beyond {MAX_TS_US} (31 days): ts_us counts microseconds "
                                 "from the trace's start; rebase epoch timestamps to the first row")
        if e.ts_us < self.last_ts:
            raise self.fail(row, f"ts_us goes backwards ({e.ts_us} after {self.last_ts})")
        self.last_ts = e.ts_us
        for name in LABEL_COLUMNS:
            v = getattr(e, name)
            if v is not None and len(v) > MAX_LABEL:
                raise self.fail(row, f"{name} is {len(v):,} characters long; labels may have at most {MAX_LABEL}")
        op = e.op
        if op not in OPS:
            raise self.fail(row, f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        if op not in ("crash_broker", "crash_tc", "new_txn", "commit", "abort"):
            if not e.topic:
                raise self.fail(row, f"{op} needs a topic")
            scalable = self.topics.get(e.topic)
            if scalable is None:
                short = short_name_error(e.topic)
                if short is not None:
                    raise self.fail(row, short)
                try:
                    scalable = self.topics[e.topic] = TopicName.parse(e.topic).scalable
                except TxnbenchError as exc:
                    raise self.fail(row, str(exc)) from None
            if op in ("split", "merge") and not scalable:
                raise self.fail(row, f"{op} needs a scalable topic (topic://...), got {e.topic}")
        if op == "new_txn":
            if not e.txn:
                raise self.fail(row, "new_txn needs a txn label")
            if e.txn in self.open_txns or e.txn in self.ended_txns:
                raise self.fail(row, f"txn {e.txn!r} is created twice")
            if e.timeout_ms is not None and not 0 < e.timeout_ms <= MAX_TIMEOUT_MS:
                raise self.fail(row, f"timeout_ms must be in 1..{MAX_TIMEOUT_MS}, got {e.timeout_ms}")
            self.open_txns.add(e.txn)
        elif op in ("commit", "abort"):
            self._txn_in_use(e)
            assert e.txn is not None
            self.open_txns.discard(e.txn)
            self.ended_txns.add(e.txn)
        elif op == "publish":
            if e.txn is not None:
                self._txn_in_use(e)
            if not e.msg:
                raise self.fail(row, "publish needs a msg label")
            if e.msg in self.msgs:
                raise self.fail(row, f"msg {e.msg!r} is published twice")
            if e.size is None or not 0 <= e.size <= MAX_SIZE:
                raise self.fail(row, f"publish size must be in 0..{MAX_SIZE}, got {e.size!r}")
            self.msgs.add(e.msg)
        elif op == "ack":
            if e.txn is not None:
                self._txn_in_use(e)
            if not e.subscription:
                raise self.fail(row, "ack needs a subscription")
            if not e.msg or e.msg not in self.msgs:
                raise self.fail(row, f"ack of unknown msg {e.msg!r} (not published earlier in the trace)")
            if (e.ack_kind or "individual") not in ACK_KINDS:
                raise self.fail(row, f"ack_kind must be individual or cumulative, got {e.ack_kind!r}")
        elif op == "subscribe":
            if not e.subscription:
                raise self.fail(row, "subscribe needs a subscription")
        elif op in ("split", "merge"):
            if e.msg is not None and e.msg not in self.msgs:
                raise self.fail(row, f"{op} names unknown msg {e.msg!r}")
            if op == "merge" and e.target and len(e.target.split(",")) != 2:
                raise self.fail(row, f"merge target must name two segments, got {e.target!r}")
        if len(e) > _SUB_TYPE and e.sub_type is not None:
            if op != "subscribe":
                raise self.fail(row, f"sub_type is for subscribe rows, not {op}")
            if e.sub_type not in SUB_TYPES:
                raise self.fail(row, f"sub_type must be one of {', '.join(SUB_TYPES)}, got {e.sub_type!r}")

    def _txn_in_use(self, e: Event) -> None:
        if not e.txn:
            raise self.fail(e.row, f"{e.op} needs a txn label")
        if e.txn in self.ended_txns:
            raise self.fail(e.row, f"txn {e.txn!r} is used after it ended")
        if e.txn not in self.open_txns:
            raise self.fail(e.row, f"{e.op} references unknown txn {e.txn!r} (no new_txn before it)")


def parquet_stream(path: str | Path) -> pq.ParquetFile:
    """A Parquet file to read batch by batch. Without pre-buffering: pyarrow's pre-buffer cache
    keeps what it has read until the file is closed, so reading a 20M-row trace ends with 134 MB
    of Arrow memory (11 MB at most without it, at the same speed) and a replay's memory grew
    with the trace."""
    return pq.ParquetFile(path, pre_buffer=False)


def _open(path: str | Path, fmt: str | None = None) -> TraceFile:
    p = Path(path)
    tf = open_trace(path, fmt)
    all_names = tf.schema_arrow.names
    dup = sorted({n for n in all_names if all_names.count(n) > 1})
    if dup:
        raise TraceError(f"duplicate columns {', '.join(dup)}", source=str(path))
    names = set(all_names)
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TraceError(f"missing columns {', '.join(missing)}", source=str(p))
    for col in COLUMNS + [c for c in OPTIONAL_COLUMNS if c in names]:
        have = tf.schema_arrow.field(col).type
        want = WRITE_SCHEMA.field(col).type
        ok = have == want or (pa.types.is_integer(have) and pa.types.is_integer(want)) or (
            pa.types.is_null(have)
        ) or (pa.types.is_large_string(have) and pa.types.is_string(want))
        if not ok:
            raise TraceError(f"column {col} has type {have}, expected {want}", source=str(p))
    return tf


def open_checked(path: str | Path, fmt: str | None = None) -> TraceFile:
    """The trace file to stream, its columns checked (not its rows: see :func:`validate`)."""
    return _open(path, fmt)


def read_events(path: str | Path, batch_rows: int = 65_536, *, validated: bool = False,
                fmt: str | None = None) -> Iterator[Event]:
    """Yield validated events in order. Raises TraceError at the first bad row.

    ``validated=True`` skips the row checks for a trace that :func:`validate` has just passed
    (a replay validates once up front, then reads once per engine). ``fmt``: parquet, csv or
    jsonl (default: by extension, else by content)."""
    pf = _open(path, fmt)
    check = None if validated else RowValidator(str(path)).check
    row = 0
    columns = trace_columns(pf)
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        cols = event_columns(batch, columns)
        events = map(event_of_row, zip(range(row, row + batch.num_rows), *cols))
        if check is None:
            yield from events
        else:
            for event in events:
                check(event)
                yield event
        row += batch.num_rows


def trace_metadata(path: str | Path, fmt: str | None = None) -> dict[str, str]:
    """The generator's notes stored in the file (profile, seed, events), if any (Parquet only)."""
    meta = _open(path, fmt).schema_arrow.metadata or {}
    return {k.decode()[len("txnbench."):]: v.decode() for k, v in meta.items() if k.startswith(b"txnbench.")}


def validate(path: str | Path, batch_rows: int = 65_536, fmt: str | None = None) -> int:
    """Validate a whole trace; return its number of rows. Same checks and errors as
    :func:`read_events`, faster: a batch whose common rows (txns, publishes, acks) pass
    vectorised domain checks only has its labels checked row by row; any other batch, and any
    row that fails, goes through the full per-row check, which words the error."""
    pf = _open(path, fmt)
    v = RowValidator(str(path))
    row = 0
    columns = trace_columns(pf)
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        if _domain_ok(batch, v):
            _check_labels(batch, row, v)
            v.last_ts = batch.column(0)[-1].as_py() if batch.num_rows else v.last_ts
        else:
            cols = event_columns(batch, columns)
            for event in map(Event._make, zip(range(row, row + batch.num_rows), *cols)):
                v.check(event)
        row += batch.num_rows
    return row


def trace_columns(pf: pq.ParquetFile | TraceFile) -> list[str]:
    """The required columns, then the optional ones the file has."""
    names = set(pf.schema_arrow.names)
    return COLUMNS + [c for c in OPTIONAL_COLUMNS if c in names]


def event_columns(batch: pa.RecordBatch, columns: list[str]) -> list[list[Any]]:
    """Every Event column of ``batch`` as a list, nulls for optional columns it lacks."""
    cols = [batch.column(i).to_pylist() for i in range(len(columns))]
    for name in OPTIONAL_COLUMNS[len(columns) - len(COLUMNS):]:
        cols.append([None] * batch.num_rows)
    return cols


_SUB_TYPE = Event._fields.index("sub_type")
_COMMON_OPS = pa.array(["new_txn", "commit", "abort", "publish", "ack"])
_C = {name: i for i, name in enumerate(COLUMNS)}


def _domain_ok(batch: pa.RecordBatch, v: RowValidator) -> bool:
    """True if every row's own fields are fine (no state needed) and every rare op is one the
    label loop hands to the full check: then only labels remain to be checked."""
    if batch.num_rows == 0:
        return True
    col = batch.column
    ts = col(_C["ts_us"])
    if ts.null_count or pc.min(ts).as_py() < v.last_ts or ts[0].as_py() < v.last_ts or pc.max(ts).as_py() > MAX_TS_US:
        return False
    if batch.num_rows > 1 and pc.any(pc.less(ts.slice(1), ts.slice(0, batch.num_rows - 1))).as_py():
        return False
    op = col(_C["op"])
    if op.null_count or not pc.all(pc.is_in(op, value_set=pa.array(OPS))).as_py():
        return False
    for name in LABEL_COLUMNS:
        longest = pc.max(pc.utf8_length(col(_C[name]))).as_py()
        if longest is not None and longest > MAX_LABEL:
            return False
    common = pc.is_in(op, value_set=_COMMON_OPS)

    def bad(where: pa.Array) -> bool:  # any common row where the condition holds
        return bool(pc.any(pc.fill_null(pc.and_(common, where), True)).as_py())

    def empty(c: str) -> pa.Array:
        return pc.or_kleene(pc.is_null(col(_C[c])), pc.equal(pc.utf8_length(col(_C[c])), 0))

    is_op = lambda name: pc.equal(op, name)  # noqa: E731
    needs_topic = pc.or_(is_op("publish"), is_op("ack"))
    if bad(pc.and_(needs_topic, empty("topic"))):
        return False
    topics = pc.unique(pc.filter(col(_C["topic"]), needs_topic)).to_pylist()
    for t in topics:
        if t not in v.topics:
            try:
                v.topics[t] = TopicName.parse(t).scalable
            except TxnbenchError:
                return False
    txn_ops = pc.or_(pc.or_(is_op("new_txn"), is_op("commit")), is_op("abort"))
    if bad(pc.and_(txn_ops, empty("txn"))) or bad(pc.and_(pc.or_(needs_topic, txn_ops), _empty_not_null(col(_C["txn"])))):
        return False
    timeout = col(_C["timeout_ms"])
    if bad(pc.and_(is_op("new_txn"), pc.and_kleene(pc.is_valid(timeout), pc.or_(
            pc.less_equal(timeout, 0), pc.greater(timeout, MAX_TIMEOUT_MS))))):
        return False
    size = col(_C["size"])
    if bad(pc.and_(is_op("publish"), pc.or_kleene(empty("msg"), pc.or_kleene(pc.is_null(size), pc.or_(
            pc.less(size, 0), pc.greater(size, MAX_SIZE)))))):
        return False
    if "sub_type" in batch.schema.names and bad(pc.is_valid(batch.column("sub_type"))):
        return False  # a common row with a sub_type: the full check words the error
    kind = col(_C["ack_kind"])
    return not bad(pc.and_(is_op("ack"), pc.or_kleene(pc.or_kleene(empty("subscription"), empty("msg")),
                                                       pc.and_kleene(pc.is_valid(kind), pc.invert(pc.is_in(kind, value_set=pa.array(ACK_KINDS)))))))


def _empty_not_null(c: pa.Array) -> pa.Array:
    """An empty string (a null txn is a non-transactional row; an empty one is an error)."""
    return pc.fill_null(pc.equal(pc.utf8_length(c), 0), False)


def _check_labels(batch: pa.RecordBatch, first_row: int, v: RowValidator) -> None:
    """The reference checks of :meth:`RowValidator.check` for a batch that passed
    :func:`_domain_ok`; a rare op or a failing row goes through the full check."""
    ops = batch.column(_C["op"]).to_pylist()
    txns = batch.column(_C["txn"]).to_pylist()
    msgs = batch.column(_C["msg"]).to_pylist()
    open_txns, ended, published = v.open_txns, v.ended_txns, v.msgs
    for i, (op, txn, msg) in enumerate(zip(ops, txns, msgs)):
        if op == "publish":
            if (txn is None or txn in open_txns) and msg not in published:
                published.add(msg)
                continue
        elif op == "ack":
            if (txn is None or txn in open_txns) and msg in published:
                continue
        elif op == "new_txn":
            if txn not in open_txns and txn not in ended:
                open_txns.add(txn)
                continue
        elif op == "commit" or op == "abort":
            if txn in open_txns:
                open_txns.discard(txn)
                ended.add(txn)
                continue
        row = batch.slice(i, 1)
        v.last_ts = row.column(0)[0].as_py()  # ts_us is fine batch-wide: no false "goes backwards"
        v.check(Event._make([first_row + i] + [row.column(j)[0].as_py() for j in range(len(COLUMNS))]
                            + [row.column(c)[0].as_py() if c in row.schema.names else None for c in OPTIONAL_COLUMNS]))


class TraceWriter:
    """Writes a trace in row groups; the file appears only when closed (written to a temp name
    first), so a failed generation leaves nothing half-written. Optional columns are written
    when named in ``optional`` (a trace without them reads them as null)."""

    def __init__(self, path: str | Path, rows_per_group: int = 65_536,
                 metadata: dict[str, str] | None = None, optional: tuple[str, ...] = ()) -> None:
        unknown = [c for c in optional if c not in OPTIONAL_COLUMNS]
        if unknown:
            raise TraceError(f"unknown optional columns {', '.join(unknown)}", source=str(path))
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A new private file (O_EXCL): a fixed ".NAME.partial" could be a planted symlink.
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent)
        os.close(fd)
        self.tmp = Path(tmp)
        self._columns = COLUMNS + [c for c in OPTIONAL_COLUMNS if c in optional]
        base = pa.schema([WRITE_SCHEMA.field(c) for c in self._columns])
        schema = base.with_metadata({f"txnbench.{k}": v for k, v in (metadata or {}).items()})
        try:
            self._writer = pq.ParquetWriter(self.tmp, schema, compression="zstd")
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        self._schema = schema
        self._rows: dict[str, list] = {c: [] for c in self._columns}  # type: ignore[type-arg]
        self._n = 0
        self._group = rows_per_group
        self.rows_written = 0

    def add(self, ts_us: int, op: str, **fields: object) -> None:
        rows = self._rows
        rows["ts_us"].append(ts_us)
        rows["op"].append(op)
        for col in self._columns[2:]:
            rows[col].append(fields.get(col))
        for col in OPTIONAL_COLUMNS:
            if fields.get(col) is not None and col not in rows:
                raise TraceError(f"a value for {col}, a column this writer was not opened with")
        self._n += 1
        if self._n >= self._group:
            self._flush()

    def _flush(self) -> None:
        if self._n:
            self._writer.write_table(pa.table(self._rows, schema=self._schema))
            self.rows_written += self._n
            self._rows = {c: [] for c in self._columns}
            self._n = 0

    def close(self) -> Path:
        try:
            self._flush()
            self._writer.close()
            self.tmp.replace(self.path)
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        return self.path

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        if exc_type is None:
            self.close()
        else:
            self.abort()
