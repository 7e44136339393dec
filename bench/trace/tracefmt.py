"""Trace files in Parquet, CSV or JSON lines, read as Arrow record batches of the trace schema,
with short topic names expanded as a Pulsar client expands them.

:func:`open_trace` picks the format from ``fmt``, else the file's extension, else its first bytes
(Parquet's ``PAR1`` magic, a JSON object, else CSV), and returns a :class:`TraceFile` whose
``iter_batches`` every trace reader goes through (:mod:`bench.trace.trace`, :mod:`bench.scale.sharding`), so
a CSV or JSON-lines trace is validated, replayed and sharded like a Parquet one, streamed batch by
batch (memory flat), with the same errors: file, 0-based row number, reason.

* CSV: a header row naming the columns, in any order; ``ts_us`` and ``op`` are required, a column
  left out is all nulls, an empty field is null. Read by pyarrow's streaming CSV reader with the
  trace schema's types; a value of the wrong type is named by its row.
* JSON lines: one object per line, keys the column names; a key left out is null. Read by
  pyarrow's streaming JSON reader; on an error the rest is parsed here line by line, which names
  the bad row.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from bench.scale import storage
from bench.trace.schema import WRITE_SCHEMA
from engine.errors import TraceError

FORMATS = ("parquet", "csv", "jsonl")
EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv",
              ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}

# Pulsar's client-side default tenant and namespace for a one-part topic name
# (org.apache.pulsar.common.naming.TopicName: PUBLIC_TENANT "public", DEFAULT_NAMESPACE "default").
DEFAULT_PREFIX = "persistent://public/default/"


def expand_topic(name: str) -> str | None:
    """A topic name as a Pulsar client completes it (``org.apache.pulsar.common.naming.TopicName``'s
    constructor: a name without ``://`` is short; one part ``t`` -> ``persistent://public/default/t``,
    three parts ``tenant/ns/t`` -> ``persistent://tenant/ns/t``; any other short form is refused
    there with "Invalid short topic name"). ``None`` for such a refused name; a full name as is."""
    if "://" in name:
        return name
    parts = name.split("/")
    if len(parts) == 1 and name:
        return DEFAULT_PREFIX + name
    if len(parts) == 3 and all(parts):
        return "persistent://" + name
    return None


def short_name_error(name: str) -> str | None:
    """The reason a short topic name is refused, or None when it is not a refused short name."""
    if "://" in name or expand_topic(name) is not None:
        return None
    return (f"invalid short topic name {name!r}: expected <topic> or <tenant>/<namespace>/<topic> "
            f"(as Pulsar's TopicName), or a full persistent://tenant/ns/name or topic://tenant/ns/name")


def expand_topics(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with the short names of its ``topic`` column expanded (vectorised: the distinct
    short names of a batch, usually one or a few, are expanded once each). A refused short name
    is left as it is: the validator words the error for its row."""
    if "topic" not in batch.schema.names:
        return batch
    i = batch.schema.get_field_index("topic")
    col = batch.column(i)
    if col.null_count == len(col):
        return batch
    short = pc.fill_null(pc.invert(pc.match_substring(col, "://")), False)
    if not pc.any(short).as_py():
        return batch
    names = pc.unique(pc.filter(col, short)).to_pylist()
    full = [expand_topic(n) or n for n in names]
    where = pc.index_in(col, value_set=pa.array(names, col.type))
    expanded = pc.if_else(pc.is_valid(where), pc.take(pa.array(full, col.type), where), col)
    return batch.set_column(i, batch.schema.field(i), expanded)


def detect_format(path: Path, fmt: str | None = None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise TraceError(f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}", source=str(path))
        return fmt
    by_ext = EXTENSIONS.get(path.suffix.lower())
    if by_ext is not None:
        return by_ext
    with path.open("rb") as f:  # no telling extension: look at the content
        head = f.read(4)
    if head == b"PAR1":
        return "parquet"
    return "jsonl" if head.lstrip()[:1] == b"{" else "csv"


@dataclass(frozen=True)
class TraceFile:
    """One trace file, whatever its format; ``schema_arrow`` holds the columns it has (with the
    trace schema's types for CSV and JSON lines) and, for Parquet, the generator's metadata."""

    path: Path
    format: str
    schema_arrow: pa.Schema
    _parquet: pq.ParquetFile | None

    def iter_batches(self, batch_size: int = 65_536, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Record batches of ``columns`` (default: all the file has), in file order, topics expanded."""
        columns = columns or self.schema_arrow.names
        if self._parquet is not None:
            batches = self._parquet.iter_batches(batch_size=batch_size, columns=columns)
        elif self.format == "csv":
            batches = _csv_batches(self, batch_size, columns)
        else:
            batches = _jsonl_batches(self, batch_size, columns)
        for batch in batches:
            yield expand_topics(batch)

    def num_rows(self) -> int:
        """Rows in the trace: from the footer for Parquet, one pass for the others."""
        if self._parquet is not None:
            return int(self._parquet.metadata.num_rows)
        return sum(b.num_rows for b in self.iter_batches(columns=["op"]))


def _open_parquet_uri(uri: str, fmt: str | None) -> TraceFile:
    """A trace at a URI (bench.scale.storage): Parquet only, so that Spark executors on other hosts
    read it where it lives; CSV and JSON lines are read from local paths."""
    if fmt not in (None, "parquet"):
        raise TraceError(f"a trace at a URI must be Parquet, not {fmt}", source=uri)
    if not storage.is_file(uri):
        raise TraceError("no such trace file", source=uri)
    try:
        pf = pq.ParquetFile(uri, pre_buffer=False)
    except Exception as exc:  # pyarrow raises several types for a non-Parquet file
        raise TraceError(f"not a readable Parquet file ({exc})", source=uri) from None
    return TraceFile(Path(uri), "parquet", pf.schema_arrow, pf)


def open_trace(path: str | Path, fmt: str | None = None) -> TraceFile:
    """A trace file to stream; its columns' presence and types are checked by the caller
    (:func:`bench.trace.trace._open`). Parquet is read without pre-buffering (see
    :func:`bench.trace.trace.parquet_stream`)."""
    if storage.is_uri(path):  # file://, s3://, hdfs://...: Parquet through pyarrow's filesystems
        return _open_parquet_uri(str(path), fmt)
    p = Path(path)
    if not p.is_file():
        raise TraceError("no such trace file", source=str(p))
    kind = detect_format(p, fmt)
    if kind == "parquet":
        try:
            pf = pq.ParquetFile(p, pre_buffer=False)
        except Exception as exc:  # pyarrow raises several types for a non-Parquet file
            raise TraceError(f"not a readable Parquet file ({exc})", source=str(p)) from None
        return TraceFile(p, kind, pf.schema_arrow, pf)
    if kind == "csv":
        names = _csv_header(p)
        unknown = [n for n in names if n not in WRITE_SCHEMA.names]
        if unknown:
            raise TraceError(f"unknown columns {', '.join(unknown)}; expected {', '.join(WRITE_SCHEMA.names)}",
                             source=str(p))
        missing = [n for n in ("ts_us", "op") if n not in names]
        if missing:
            raise TraceError(f"missing columns {', '.join(missing)} in the CSV header", source=str(p))
    # A column left out of a CSV header or of every JSON line reads as nulls: the row checks say
    # which rows needed it.
    return TraceFile(p, kind, WRITE_SCHEMA.remove_metadata(), None)


def _csv_header(path: Path) -> list[str]:
    with path.open("r", encoding="utf-8", errors="replace", newline="") as f:
        line = f.readline()
    names = [n.strip() for n in next(csv.reader([line]))] if line.strip() else []
    if not names:
        raise TraceError("empty CSV file: expected a header row naming the columns", source=str(path))
    return names


# pyarrow's streaming CSV and JSON readers keep a couple of dozen blocks read ahead: 1 MB blocks
# hold ~30 MB of a 85 MB CSV trace, 4 MB blocks held the first 80 MB of it (measured).
_BLOCK = 1 << 20


def _csv_batches(tf: TraceFile, batch_size: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    types = {f.name: f.type for f in tf.schema_arrow}
    read = pcsv.ReadOptions(block_size=_BLOCK, use_threads=False)
    convert = pcsv.ConvertOptions(column_types=types, include_columns=columns, include_missing_columns=True,
                                  null_values=[""],
                                  strings_can_be_null=True, quoted_strings_can_be_null=False)
    row = 0
    try:
        reader = pcsv.open_csv(tf.path, read_options=read, convert_options=convert)
        for batch in reader:
            for start in range(0, batch.num_rows, batch_size):
                yield batch.slice(start, batch_size)
            row += batch.num_rows
    except pa.ArrowInvalid as exc:
        located = _csv_locate(tf, row, types)  # pyarrow names the column, not the row
        if located is not None:
            raise TraceError(located[1], row=located[0], source=str(tf.path)) from None
        text = " ".join(str(exc).split())
        raise TraceError(f"not a readable CSV trace ({text})", source=str(tf.path), row=row) from None


def _csv_locate(tf: TraceFile, first_row: int, types: dict[str, pa.DataType]) -> tuple[int, str] | None:
    """The first row from ``first_row`` on with a value that is not of its column's type, and
    why (only on an error: re-reads that part of the file with Python's csv module)."""
    with tf.path.open("r", encoding="utf-8", errors="replace", newline="") as f:
        for row, record in enumerate(csv.DictReader(f)):
            if row < first_row:
                continue
            if None in record:
                return row, f"{len(record) - 1 + len(record[None])} fields, the header names {len(record) - 1}"
            for name, text in record.items():
                if text and name in types and pa.types.is_integer(types[name]):
                    try:
                        int(text)
                    except ValueError:
                        return row, f"{name} must be an integer, got {text!r}"
    return None


_INT_COLUMNS = frozenset(("ts_us", "size", "timeout_ms"))


def _jsonl_batches(tf: TraceFile, batch_size: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """pyarrow's streaming JSON reader (4x faster than parsing here); on its first error, the
    lines from the failing block on are parsed here, which names the row and the reason."""
    read = pjson.ReadOptions(block_size=_BLOCK, use_threads=False)
    parse = pjson.ParseOptions(explicit_schema=tf.schema_arrow, unexpected_field_behavior="error")
    row = 0
    try:
        for batch in pjson.open_json(tf.path, read_options=read, parse_options=parse):
            for start in range(0, batch.num_rows, batch_size):
                yield batch.slice(start, batch_size).select(columns)
            row += batch.num_rows
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # raises for the bad row; should it accept what pyarrow refused, its rows are the trace's
        yield from _jsonl_python(tf, batch_size, columns, row)


def _jsonl_python(tf: TraceFile, batch_size: int, columns: list[str], first_row: int = 0) -> Iterator[pa.RecordBatch]:
    """Rows from ``first_row`` on, parsed line by line; earlier rows are skipped unparsed."""
    schema = pa.schema([tf.schema_arrow.field(c) for c in columns])
    known = set(tf.schema_arrow.names)
    cols: dict[str, list[Any]] = {c: [] for c in columns}
    row = n = 0

    def fail(reason: str) -> TraceError:
        return TraceError(reason, row=row, source=str(tf.path))

    with tf.path.open("r", encoding="utf-8", errors="strict") as f:
        try:
            for line in f:
                if not line.strip():
                    continue  # blank lines (a trailing newline) are not rows
                if row < first_row:
                    row += 1
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise fail(f"not a JSON object ({exc.msg} at column {exc.colno})") from None
                if not isinstance(obj, dict):
                    raise fail(f"not a JSON object, got {type(obj).__name__}")
                if not known.issuperset(obj):
                    extra = sorted(set(obj) - known)
                    raise fail(f"unknown fields {', '.join(map(repr, extra))}; expected {', '.join(sorted(known))}")
                for c in columns:
                    v = obj.get(c)
                    if v is not None:
                        if c in _INT_COLUMNS:
                            if not isinstance(v, int) or isinstance(v, bool):
                                raise fail(f"{c} must be an integer, got {v!r}")
                        elif not isinstance(v, str):
                            raise fail(f"{c} must be a string, got {v!r}")
                    cols[c].append(v)
                row += 1
                n += 1
                if n >= batch_size:
                    yield _batch(cols, schema, tf, row - n)
                    cols = {c: [] for c in columns}
                    n = 0
        except UnicodeDecodeError as exc:
            raise fail(f"not UTF-8 text ({exc.reason})") from None
    if n:
        yield _batch(cols, schema, tf, row - n)


def _batch(cols: dict[str, list[Any]], schema: pa.Schema, tf: TraceFile, first_row: int) -> pa.RecordBatch:
    try:
        return pa.RecordBatch.from_pydict(cols, schema=schema)
    except (pa.ArrowInvalid, OverflowError) as exc:  # an integer beyond the column's type
        raise TraceError(f"a value out of range for its column ({exc})", row=first_row, source=str(tf.path)) from None
