"""Result sets on disk (DESIGN.md "Results"): ``deliveries.parquet``, ``txns.parquet``,
``counts.json``, ``latency.json``, ``recovery.json``, ``manifest.json``, ``metrics.txt`` (OpenMetrics,
:mod:`bench.openmetrics`) and ``timeseries.parquet`` (:mod:`bench.timeseries`) in one directory.

Writes go to a hidden sibling directory that is renamed into place at the end, so a failed run
leaves nothing half-written; an existing result directory is replaced only on success.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import ConfigError

DELIVERY_SCHEMA = pa.schema(
    [
        ("engine", pa.string()), ("topic", pa.string()), ("subscription", pa.string()),
        ("msg", pa.string()), ("delivered_ts_us", pa.int64()), ("redelivery", pa.bool_()),
    ]
)
TXN_SCHEMA = pa.schema(
    [
        ("engine", pa.string()), ("txn", pa.string()), ("outcome", pa.string()),
        ("end_ts_us", pa.int64()), ("visible_ts_us", pa.int64()),
        ("commit_requested_ts_us", pa.int64()), ("messages", pa.int64()),
    ]
)
FILES = ("deliveries.parquet", "txns.parquet", "counts.json", "latency.json", "recovery.json", "manifest.json",
         "metrics.txt", "timeseries.parquet")  # the last two: bench.openmetrics, bench.timeseries


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
           "cpus": str(os.cpu_count())}
    for dist in ("txnbench", "pyarrow", "pandas", "pyspark", "redis", "kafka-python", "hdrhistogram", "sortedcontainers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


class ResultWriter:
    """Streams deliveries and txn rows into Parquet and writes the rest at :meth:`finish`."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp
        self._deliveries = pq.ParquetWriter(tmp / "deliveries.parquet", DELIVERY_SCHEMA, compression="zstd")
        self.delivery_rows = 0
        self._txns = pq.ParquetWriter(tmp / "txns.parquet", TXN_SCHEMA, compression="zstd")

    def deliveries(self, columns: dict[str, list[Any]]) -> None:
        if columns["msg"]:
            self._deliveries.write_table(pa.table(columns, schema=DELIVERY_SCHEMA))
            self.delivery_rows += len(columns["msg"])

    def txns(self, columns: dict[str, list[Any]]) -> None:
        if columns["txn"]:
            self._txns.write_table(pa.table(columns, schema=TXN_SCHEMA))

    def deliveries_table(self, table: pa.Table) -> None:
        """Append delivery rows already in :data:`DELIVERY_SCHEMA` (e.g. from Spark's parts)."""
        self._deliveries.write_table(table)
        self.delivery_rows += table.num_rows

    def txns_table(self, table: pa.Table) -> None:
        self._txns.write_table(table)

    def finish(self, *, counts: dict[str, dict[str, int]], latency: dict[str, Any],
               recovery: list[dict[str, Any]], manifest: dict[str, Any],
               txns: dict[str, list[Any]] | None = None) -> None:
        self._deliveries.close()
        if txns is not None:
            self.txns(txns)
        self._txns.close()
        _dump(self.dir / "counts.json", counts)
        _dump(self.dir / "latency.json", latency)
        _dump(self.dir / "recovery.json", recovery)
        _dump(self.dir / "manifest.json", {**manifest, "versions": versions(), "delivery_rows": self.delivery_rows})

    def abort(self) -> None:
        for w in (self._deliveries, self._txns):
            try:
                w.close()
            except Exception:  # noqa: BLE001 - already failing; the directory is removed below
                pass


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def result_dir(out: str | Path) -> Iterator[ResultWriter]:
    """Yield a writer on a temporary directory; on success it becomes ``out``."""
    final = Path(out)
    if final.exists() and not final.is_dir():
        raise ConfigError(f"--out {final} exists and is not a directory")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    writer = ResultWriter(tmp)
    try:
        yield writer
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


def load(path: str | Path) -> dict[str, Any]:
    """Load a result set's JSON parts (not the Parquet tables)."""
    p = Path(path)
    if not (p / "manifest.json").is_file():
        raise ConfigError(f"{p} is not a txnbench result directory (no manifest.json)")
    out: dict[str, Any] = {"path": str(p)}
    for name in ("counts", "latency", "recovery", "manifest"):
        f = p / f"{name}.json"
        try:
            out[name] = json.loads(f.read_text()) if f.is_file() else {}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{f}: not valid JSON ({exc})") from None
    return out
