"""Traces: one row per client event, in Parquet, as specified in DESIGN.md.

:func:`read_events` streams a trace in record batches and validates every row before it is
yielded; :func:`validate` runs the same checks over a whole file without replaying it, so a
replay can refuse a bad trace before it writes anything. Errors are :class:`TraceError` naming
the file, the 0-based row number and the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import TraceError, TxnbenchError
from engine.topics import TopicName

SCHEMA = pa.schema(
    [
        ("ts_us", pa.int64()),
        ("op", pa.string()),
        ("txn", pa.string()),
        ("topic", pa.string()),
        ("msg", pa.string()),
        ("subscription", pa.string()),
        ("size", pa.int32()),
        ("timeout_ms", pa.int64()),
        ("ack_kind", pa.string()),
        ("target", pa.string()),
        ("key", pa.string()),
    ]
)
COLUMNS = SCHEMA.names

OPS = (
    "new_txn", "publish", "ack", "commit", "abort", "subscribe",
    "split", "merge", "crash_broker", "crash_tc",
)
ACK_KINDS = ("individual", "cumulative")
MAX_SIZE = 100 * 1024 * 1024  # Pulsar's largest message with chunking disabled is far below this
MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000


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


class LabelSet:
    """A set of labels that stays small on long traces: a label of the form ``<prefix><n>``
    (a decimal without a leading zero, as the generator writes ``m123``/``t45``) is one byte in
    a per-prefix bytearray, so checking a 10M-row trace does not hold millions of strings;
    any other label is kept as is."""

    __slots__ = ("_bits", "_other")
    _MAX_INDEX = 1 << 31

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
        return bits is not None and split[1] < len(bits) and bits[split[1]] == 1


class _Validator:
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
        if e.ts_us < self.last_ts:
            raise self.fail(row, f"ts_us goes backwards ({e.ts_us} after {self.last_ts})")
        self.last_ts = e.ts_us
        op = e.op
        if op not in OPS:
            raise self.fail(row, f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        if op not in ("crash_broker", "crash_tc", "new_txn", "commit", "abort"):
            if not e.topic:
                raise self.fail(row, f"{op} needs a topic")
            scalable = self.topics.get(e.topic)
            if scalable is None:
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

    def _txn_in_use(self, e: Event) -> None:
        if not e.txn:
            raise self.fail(e.row, f"{e.op} needs a txn label")
        if e.txn in self.ended_txns:
            raise self.fail(e.row, f"txn {e.txn!r} is used after it ended")
        if e.txn not in self.open_txns:
            raise self.fail(e.row, f"{e.op} references unknown txn {e.txn!r} (no new_txn before it)")


def _open(path: str | Path) -> pq.ParquetFile:
    p = Path(path)
    if not p.is_file():
        raise TraceError("no such trace file", source=str(p))
    try:
        pf = pq.ParquetFile(p)
    except Exception as exc:  # pyarrow raises several types for a non-Parquet file
        raise TraceError(f"not a readable Parquet file ({exc})", source=str(p)) from None
    names = set(pf.schema_arrow.names)
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TraceError(f"missing columns {', '.join(missing)}", source=str(p))
    for col in COLUMNS:
        have = pf.schema_arrow.field(col).type
        want = SCHEMA.field(col).type
        ok = have == want or (pa.types.is_integer(have) and pa.types.is_integer(want)) or (
            pa.types.is_null(have)
        ) or (pa.types.is_large_string(have) and pa.types.is_string(want))
        if not ok:
            raise TraceError(f"column {col} has type {have}, expected {want}", source=str(p))
    return pf


def read_events(path: str | Path, batch_rows: int = 65_536, *, validated: bool = False) -> Iterator[Event]:
    """Yield validated events in order. Raises TraceError at the first bad row.

    ``validated=True`` skips the row checks for a trace that :func:`validate` has just passed
    (a replay validates once up front, then reads once per engine)."""
    pf = _open(path)
    check = None if validated else _Validator(str(path)).check
    make = Event._make
    row = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=COLUMNS):
        cols = [batch.column(i).to_pylist() for i in range(len(COLUMNS))]
        for event in map(make, zip(range(row, row + batch.num_rows), *cols)):
            if check is not None:
                check(event)
            yield event
        row += batch.num_rows


def trace_metadata(path: str | Path) -> dict[str, str]:
    """The generator's notes stored in the file (profile, seed, events), if any."""
    meta = _open(path).schema_arrow.metadata or {}
    return {k.decode()[len("txnbench."):]: v.decode() for k, v in meta.items() if k.startswith(b"txnbench.")}


def validate(path: str | Path) -> int:
    """Validate a whole trace; return its number of rows."""
    n = 0
    for _ in read_events(path):
        n += 1
    return n


class TraceWriter:
    """Writes a trace in row groups; the file appears only when closed (written to a temp name
    first), so a failed generation leaves nothing half-written."""

    def __init__(self, path: str | Path, rows_per_group: int = 65_536,
                 metadata: dict[str, str] | None = None) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        schema = SCHEMA.with_metadata({f"txnbench.{k}": v for k, v in (metadata or {}).items()})
        self._writer = pq.ParquetWriter(self.tmp, schema, compression="zstd")
        self._schema = schema
        self._rows: dict[str, list] = {c: [] for c in COLUMNS}  # type: ignore[type-arg]
        self._n = 0
        self._group = rows_per_group
        self.rows_written = 0

    def add(self, ts_us: int, op: str, **fields: object) -> None:
        rows = self._rows
        rows["ts_us"].append(ts_us)
        rows["op"].append(op)
        for col in COLUMNS[2:]:
            rows[col].append(fields.get(col))
        self._n += 1
        if self._n >= self._group:
            self._flush()

    def _flush(self) -> None:
        if self._n:
            self._writer.write_table(pa.table(self._rows, schema=self._schema))
            self.rows_written += self._n
            self._rows = {c: [] for c in COLUMNS}
            self._n = 0

    def close(self) -> Path:
        self._flush()
        self._writer.close()
        self.tmp.replace(self.path)
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
