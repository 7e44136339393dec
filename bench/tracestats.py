"""What ``txnbench validate-trace`` prints: a trace's rows, ops, topics, txns and time span,
after the same validation as a replay (:func:`bench.trace.validate`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc

from bench.trace import OPS, open_checked, validate


@dataclass(frozen=True)
class TraceSummary:
    path: str
    format: str
    rows: int
    ops: tuple[tuple[str, int], ...]  # (op, rows), in OPS order, ops absent left out
    topics: int  # distinct, after short names are expanded
    txns: int  # new_txn rows
    first_us: int | None
    last_us: int | None

    def lines(self) -> list[str]:
        span = 0.0 if self.first_us is None or self.last_us is None else (self.last_us - self.first_us) / 1e6
        ops = ", ".join(f"{op} {n}" for op, n in self.ops) or "none"
        return [
            f"{self.path}: valid {self.format} trace",
            f"rows: {self.rows}",
            f"ops: {ops}",
            f"topics: {self.topics}",
            f"txns: {self.txns}",
            f"time span: {span:.6f} s" + ("" if self.first_us is None else f" ({self.first_us} .. {self.last_us} us)"),
        ]


def summarize(path: str | Path, fmt: str | None = None, batch_rows: int = 65_536) -> TraceSummary:
    """Validate the trace (TraceError at the first bad row), then count it in one streaming pass."""
    rows = validate(path, batch_rows=batch_rows, fmt=fmt)
    tf = open_checked(path, fmt)
    counts: dict[str, int] = {}
    topics: set[str] = set()
    first = last = None
    for batch in tf.iter_batches(batch_size=batch_rows, columns=["ts_us", "op", "topic"]):
        if batch.num_rows == 0:
            continue
        if first is None:
            first = batch.column(0)[0].as_py()
        last = batch.column(0)[-1].as_py()
        for entry in pc.value_counts(batch.column(1)).to_pylist():
            counts[entry["values"]] = counts.get(entry["values"], 0) + entry["counts"]
        topics.update(t for t in pc.unique(batch.column(2)).to_pylist() if t is not None)
    return TraceSummary(str(path), tf.format, rows, tuple((op, counts[op]) for op in OPS if op in counts),
                        len(topics), counts.get("new_txn", 0), first, last)
