"""Result sets on disk (DESIGN.md "Results"): ``deliveries.parquet``, ``txns.parquet``,
``counts.json``, ``latency.json``, ``recovery.json``, ``manifest.json``, ``metrics.txt`` (OpenMetrics,
:mod:`bench.replay.openmetrics`) and ``timeseries.parquet`` (:mod:`bench.replay.timeseries`) in one directory.

Writes go to a private sibling directory whose files are renamed into place at the end
(:mod:`bench.replay.output`), so a failed run leaves nothing half-written and nothing txnbench did not
write is ever replaced.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from bench.replay.output import staged_dir
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
        ("commit_requested_ts_us", pa.int64()), ("messages", pa.int64()), ("opened_ts_us", pa.int64()),
        ("new_txn_answered_ts_us", pa.int64()),
    ]
)
# each publish's issue and answer, where a run kept them (replay_trace's publish_spans: validate's
# model runs, for bench.report.behind_end_txn); a broker run has them in pulsar-events-*.jsonl
PUBLISH_SCHEMA = pa.schema(
    [
        ("engine", pa.string()), ("msg", pa.string()), ("txn", pa.string()),
        ("issued_ts_us", pa.int64()), ("answered_ts_us", pa.int64()),
    ]
)
PUBLISHES = "publishes.parquet"
FILES = ("deliveries.parquet", "txns.parquet", "counts.json", "latency.json", "recovery.json", "manifest.json",
         "metrics.txt", "timeseries.parquet")  # the last two: bench.replay.openmetrics, bench.replay.timeseries


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
           "cpus": str(os.cpu_count())}
    for dist in ("txnbench", "pyarrow", "pandas", "pyspark", "redis", "kafka-python", "hdrhistogram", "sortedcontainers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_identity() -> dict[str, Any] | None:
    """The commit of the txnbench checkout this code runs from and whether it has uncommitted
    changes (None outside a git checkout, e.g. an installed wheel)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": bool(status.strip())}


def run_identity() -> dict[str, Any]:
    """What a result set needs to be traced back to its run (issue 18 item 3): the code's git
    commit and dirty flag, the command line, and the host."""
    return {"git": git_identity(), "argv": list(sys.argv), "cwd": os.getcwd(),
            "host": {"hostname": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
                     "python": sys.version.split()[0]}}


class ResultWriter:
    """Streams deliveries and txn rows into Parquet and writes the rest at :meth:`finish`."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp
        self._deliveries = pq.ParquetWriter(tmp / "deliveries.parquet", DELIVERY_SCHEMA, compression="zstd")
        self.delivery_rows = 0
        self._txns = pq.ParquetWriter(tmp / "txns.parquet", TXN_SCHEMA, compression="zstd")
        self._publishes: pq.ParquetWriter | None = None  # opened by the first publish rows

    def deliveries(self, columns: dict[str, list[Any]]) -> None:
        if columns["msg"]:
            self._deliveries.write_table(pa.table(columns, schema=DELIVERY_SCHEMA))
            self.delivery_rows += len(columns["msg"])

    def txns(self, columns: dict[str, list[Any]]) -> None:
        if columns["txn"]:
            self._txns.write_table(pa.table(columns, schema=TXN_SCHEMA))

    def publishes(self, columns: dict[str, list[Any]]) -> None:
        """Publish spans (:data:`PUBLISH_SCHEMA`): the first rows open :data:`PUBLISHES`."""
        if not columns["msg"]:
            return
        if self._publishes is None:
            self._publishes = pq.ParquetWriter(self.dir / PUBLISHES, PUBLISH_SCHEMA, compression="zstd")
        self._publishes.write_table(pa.table(columns, schema=PUBLISH_SCHEMA))

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
        if self._publishes is not None:
            self._publishes.close()
        _dump(self.dir / "counts.json", counts)
        _dump(self.dir / "latency.json", latency)
        _dump(self.dir / "recovery.json", recovery)
        _dump(self.dir / "manifest.json", {**manifest, "versions": versions(), "identity": run_identity(),
                                           "delivery_rows": self.delivery_rows})

    def abort(self) -> None:
        for w in (self._deliveries, self._txns, self._publishes):
            if w is None:
                continue
            try:
                w.close()
            except Exception:  # noqa: BLE001 - already failing; the directory is removed below
                pass


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def result_dir(out: str | Path, *, force: bool = False, protect: Iterable[Path] = ()) -> Iterator[ResultWriter]:
    """Yield a writer on a private temporary directory; on success its files become ``out``'s
    (:func:`bench.replay.output.staged_dir`: a non-empty ``out`` is refused unless ``force``, and then
    only what txnbench wrote there is replaced; ``protect`` names inputs never to replace)."""
    with staged_dir(out, force=force, protect=protect) as tmp:
        writer = ResultWriter(tmp)
        try:
            yield writer
        except BaseException:
            writer.abort()
            raise


def load(path: str | Path) -> dict[str, Any]:
    """Load a result set's JSON parts (not the Parquet tables), checking their shape, so a
    malformed or foreign file is one ConfigError naming it rather than a traceback later."""
    p = Path(path)
    if not (p / "manifest.json").is_file():
        raise ConfigError(f"{p} is not a txnbench result directory (no manifest.json)")
    out: dict[str, Any] = {"path": str(p)}
    for name, kind in (("counts", dict), ("latency", dict), ("recovery", list), ("manifest", dict)):
        f = p / f"{name}.json"
        try:
            data = json.loads(f.read_text()) if f.is_file() else kind()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{f}: not valid JSON ({exc})") from None
        if not isinstance(data, kind):
            raise ConfigError(f"{f}: expected a JSON {'object' if kind is dict else 'array'}, got {type(data).__name__}")
        out[name] = data
    _check_shape(p, out)
    return out


def _check_shape(p: Path, rs: dict[str, Any]) -> None:
    from bench.replay.measure import histogram_from_summary

    def bad(name: str, why: str) -> ConfigError:
        return ConfigError(f"{p / name}: {why}")

    runs = rs["manifest"].get("runs")
    if not isinstance(runs, dict) or not runs:
        raise bad("manifest.json", "no runs (expected a non-empty object \"runs\")")
    for label, run in runs.items():
        if not isinstance(run, dict) or not isinstance(run.get("config"), dict):
            raise bad("manifest.json", f"run {label!r} is not an object with a \"config\" object")
    if not isinstance(rs["manifest"].get("trace", {}), dict):
        raise bad("manifest.json", "\"trace\" is not an object")
    for label, counts in rs["counts"].items():
        if not isinstance(counts, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in counts.values()):
            raise bad("counts.json", f"{label!r}: expected an object of numbers")
    for label, metrics in rs["latency"].items():
        if not isinstance(metrics, dict):
            raise bad("latency.json", f"{label!r}: expected an object of latency summaries")
        for metric, s in metrics.items():
            ok = isinstance(s, dict) and isinstance(s.get("count"), int) and all(
                isinstance(s.get(k), (int, float)) for k in ("p50_us", "p99_us", "p99.9_us", "max_us"))
            if ok:
                try:
                    histogram_from_summary(s)
                except Exception:  # noqa: BLE001 - the decoder raises several types on bad input
                    ok = False
            if not ok:
                raise bad("latency.json", f"{label!r} {metric!r}: not a latency summary (count, p50_us.., hdr)")
    if not all(isinstance(r, dict) for r in rs["recovery"]):
        raise bad("recovery.json", "expected an array of objects")
