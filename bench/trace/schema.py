"""The trace schema (DESIGN.md): its columns and their Arrow types, apart from the readers
(:mod:`bench.trace.tracefmt`) and the validator (:mod:`bench.trace.trace`) that both use it."""

from __future__ import annotations

import pyarrow as pa

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
# Optional columns: traces written before them still load (the values read as null).
# ``sub_type``: the subscription type of a ``subscribe`` row (Exclusive, Failover, Shared,
# Key_Shared; null = Failover), which picks the dispatcher's polling (engine.dispatcher).
OPTIONAL_SCHEMA = pa.schema([("sub_type", pa.string())])
OPTIONAL_COLUMNS = OPTIONAL_SCHEMA.names
WRITE_SCHEMA = pa.schema(list(SCHEMA) + list(OPTIONAL_SCHEMA))
