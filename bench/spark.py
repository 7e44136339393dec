"""Spark batch replay: ``txnbench replay --spark MASTER``.

Plan: rows per topic and the distinct sets of topics one txn touches (small aggregates, whatever
the trace's length; computed with Arrow while the JVM starts); the driver joins topics linked by
txns into units and bin-packs them onto shards (:mod:`bench.sharding`).

Replay: one Spark task per shard reads the trace itself with pyarrow, keeps its shard's rows
with vectorised filters (:func:`bench.sharding.shard_events`) and replays them through each
engine config in turn, streaming, so a task's memory does not grow with the trace. Tasks return
Arrow batches (deliveries, txn rows, a summary per shard and config); Spark writes them once,
Spark SQL sums the counts, and the driver merges the HdrHistograms and writes the standard
result directory.

Meanwhile the driver validates the whole trace in a thread (the tasks trust it): a bad trace
cancels the job and is refused with its row number, with nothing written.

Works unchanged on a cluster master, as long as executors can import txnbench and read the
trace's path (shared storage).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from bench.config import RunConfig
from bench.measure import Histograms, peak_rss_mb
from bench.results import DELIVERY_SCHEMA, TXN_SCHEMA, result_dir
from bench.sharding import plan_shards, trace_aggregates
from bench.trace import trace_metadata, validate
from engine.errors import BackendUnavailable, ConfigError, TraceError

Progress = Callable[[str, int, int], None]  # (label, done, total), as bench.runner's

OUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("shard", pa.int32()), ("engine", pa.string()), ("topic", pa.string()),
    ("subscription", pa.string()), ("msg", pa.string()), ("delivered_ts_us", pa.int64()),
    ("redelivery", pa.bool_()), ("txn", pa.string()), ("outcome", pa.string()), ("end_ts_us", pa.int64()),
    ("visible_ts_us", pa.int64()), ("commit_requested_ts_us", pa.int64()), ("messages", pa.int64()),
    ("payload", pa.string()),
])
OUT_DDL = ", ".join(f"{f.name} {_t}" for f, _t in zip(OUT_SCHEMA, (
    "string", "int", "string", "string", "string", "string", "long", "boolean", "string", "string",
    "long", "long", "long", "long", "string")))
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")


def _session(master: str):  # type: ignore[no-untyped-def]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError(f"pyspark is not installed ({exc})") from None
    try:
        spark = (
            SparkSession.builder.master(master)
            .appName("txnbench-replay")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.driver.memory", "2g")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}")
            .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}")
            .getOrCreate()
        )
    except Exception as exc:  # py4j/JVM start-up failures come in many types
        raise BackendUnavailable(f"cannot start Spark with master {master!r}: {exc}".splitlines()[0]) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _replay_tasks(trace: str, plan_json: str, configs_json: str, progress_dir: str):  # type: ignore[no-untyped-def]
    """The executor side: a closure for mapInArrow over a frame of shard numbers."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        topic_shard = json.loads(plan_json)
        configs = [_config_from_dict(d) for d in json.loads(configs_json)]
        for batch in batches:
            for shard in batch.column(0).to_pylist():
                for cfg in configs:
                    yield from _replay_shard(trace, topic_shard, int(shard), cfg, Path(progress_dir))

    return run


def _replay_shard(trace: str, topic_shard: dict[str, int], shard: int, cfg: RunConfig,
                  progress_dir: Path) -> Iterator[pa.RecordBatch]:
    from bench.replay import Replayer
    from bench.sharding import shard_events

    out: list[pa.RecordBatch] = []
    replayer = Replayer(cfg, sink_rows=50_000,
                        delivery_sink=lambda cols: out.append(_batch("delivery", shard, cols)),
                        txn_sink=lambda cols: out.append(_batch("txn", shard, cols)))
    for n in replayer.steps(shard_events(trace, topic_shard, shard)):
        yield from out  # stream the sinks' output while the replay goes on
        out.clear()
        _note_progress(progress_dir, cfg.label, shard, n)
    result = replayer.result
    assert result is not None
    yield from out
    for kind, cols in (("delivery", result.deliveries), ("txn", result.txns)):
        if next(iter(cols.values())):
            yield _batch(kind, shard, cols)
    summary = {"latency": result.latency, "recovery": result.recovery, "events": result.events,
               "wall_seconds": result.wall_seconds, "virtual_end_us": result.virtual_end_us,
               "peak_rss_mb": result.peak_rss_mb}
    yield _batch("summary", shard, {"engine": [cfg.label], "payload": [json.dumps(summary)]})
    counts = sorted(result.counts.items())  # summed across shards by Spark SQL
    yield _batch("count", shard, {"engine": [cfg.label] * len(counts), "topic": [k for k, _ in counts],
                                  "messages": [v for _, v in counts]})


def _note_progress(progress_dir: Path, label: str, shard: int, events: int) -> None:
    """Events replayed so far by one shard, for the driver's progress bars (best effort: an
    executor that cannot reach the driver's spool directory just draws no bar)."""
    try:
        tmp = progress_dir / f".{label}.{shard}.tmp"
        tmp.write_text(str(events))
        tmp.replace(progress_dir / f"{label}.{shard}")
    except OSError:
        pass


def _watch_progress(progress_dir: Path, labels: list[str], rows: int, progress: Progress,
                    stop: threading.Event) -> None:
    while not stop.wait(0.5):
        for label in labels:
            done = 0
            for f in progress_dir.glob(f"{label}.*"):
                try:
                    done += int(f.read_text() or 0)
                except (OSError, ValueError):
                    pass
            progress(label, min(done, rows - 1), rows)  # full only once Spark has written the results


def _batch(kind: str, shard: int, cols: dict[str, list[Any]]) -> pa.RecordBatch:
    """Columns in OUT_SCHEMA's order; the ones ``cols`` lacks are all-null."""
    n = len(next(iter(cols.values())))
    arrays = []
    for f in OUT_SCHEMA:
        if f.name == "kind":
            arrays.append(pa.array([kind] * n, f.type))
        elif f.name == "shard":
            arrays.append(pa.array([shard] * n, f.type))
        elif f.name in cols:
            arrays.append(pa.array(cols[f.name], f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUT_SCHEMA)


def _config_from_dict(d: dict[str, Any]) -> RunConfig:
    from engine.clock import LatencyModel
    from engine.dispatcher import DispatchMode

    d = dict(d)
    d.pop("label", None)
    d["dispatch"] = DispatchMode(d["dispatch"])
    d["latency"] = LatencyModel(d["latency"])
    return RunConfig(**d)


def spark_replay(trace: str | Path, configs: list[RunConfig], out: str | Path, master: str = "local[*]",
                 shards: int | None = None, progress: Progress | None = None) -> dict[str, Any]:
    for cfg in configs:
        if not cfg.ledger_url.startswith("memory://") or not cfg.metadata_url.startswith("memory://"):
            raise ConfigError("Spark replay runs each shard on embedded backends; drop --ledger/--metadata")
    trace_path = str(Path(trace).resolve())
    trace_metadata(trace)  # a missing or unreadable file is refused before Spark starts
    started = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:  # the plan's aggregates are computed while the JVM starts
        aggregates = pool.submit(trace_aggregates, trace_path)
        spark = _session(master)
        checked = _Validation(trace, spark)
        try:
            rows_per_topic, topic_sets = aggregates.result()
        except BaseException:
            checked.stop()
            spark.stop()
            raise
    try:
        n_shards = shards or max(2, spark.sparkContext.defaultParallelism)
        topic_shard = plan_shards(rows_per_topic, topic_sets, n_shards)
        tasks = spark.range(0, n_shards, 1, numPartitions=n_shards).selectExpr("cast(id as int) as shard")
        spool = Path(tempfile.mkdtemp(prefix="txnbench-spark-"))
        try:
            (spool / "progress").mkdir()
            result = tasks.mapInArrow(_replay_tasks(trace_path, json.dumps(topic_shard),
                                                    json.dumps([c.as_dict() for c in configs]), str(spool / "progress")),
                                      OUT_DDL)
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_progress, daemon=True, args=(
                spool / "progress", [c.label for c in configs], pq.ParquetFile(trace).metadata.num_rows, progress, stop))
            if progress is not None:
                watcher.start()
            try:
                result.write.mode("overwrite").partitionBy("kind").parquet(str(spool / "out"))
            except Exception:
                checked.wait()  # a bad trace fails a task before the validator reaches the row: say why
                raise
            finally:
                stop.set()
                if watcher.is_alive():
                    watcher.join()
            rows = checked.wait()
            for cfg in configs:
                if progress is not None:
                    progress(cfg.label, rows, rows)
            counts = _summed_counts(spark, spool / "out")
            return _collect(spool / "out", trace, rows, configs, counts, out, master, n_shards,
                            time.perf_counter() - started)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
    finally:
        checked.stop()
        spark.stop()


class _Validation:
    """Validates the trace in a thread while Spark replays it; a bad trace cancels the job."""

    def __init__(self, trace: str | Path, spark: Any) -> None:
        self.error: TraceError | None = None
        self.rows = 0
        self._spark = spark
        self._thread = threading.Thread(target=self._run, args=(trace,), name="txnbench-validate", daemon=True)
        self._thread.start()

    def _run(self, trace: str | Path) -> None:
        try:
            self.rows = validate(trace)
        except TraceError as exc:
            self.error = exc
            self._spark.sparkContext.cancelAllJobs()

    def wait(self) -> int:
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.rows

    def stop(self) -> None:
        self._thread.join()


def _summed_counts(spark: Any, root: Path) -> dict[str, dict[str, int]]:
    """Every shard's exact counts, summed per engine and name with Spark SQL."""
    from pyspark.sql import functions as F

    rows = (spark.read.parquet(str(root)).where(F.col("kind") == "count").groupBy("engine", "topic")
            .agg(F.sum("messages").alias("n")).collect())
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r.engine, {})[r.topic] = int(r.n)
    return {label: dict(sorted(c.items())) for label, c in counts.items()}


def _parts(root: Path, kind: str) -> list[Path]:
    return sorted((root / f"kind={kind}").glob("*.parquet"))


def _collect(root: Path, trace: str | Path, rows: int, configs: list[RunConfig], counts: dict[str, dict[str, int]],
             out: str | Path, master: str, shards: int, wall: float) -> dict[str, Any]:
    latency_parts: dict[str, list[dict[str, Any]]] = {}
    recovery: list[dict[str, Any]] = []
    events: dict[str, int] = {}
    task_rss: list[float] = []
    for part in _parts(root, "summary"):
        t = pq.read_table(part, columns=["engine", "payload"]).to_pydict()
        for label, payload in zip(t["engine"], t["payload"]):
            s = json.loads(payload)
            latency_parts.setdefault(label, []).append(s["latency"])
            recovery.extend(s["recovery"])
            events[label] = events.get(label, 0) + s["events"]
            task_rss.append(s["peak_rss_mb"])
    meta = trace_metadata(trace)
    manifest: dict[str, Any] = {
        "trace": {"path": str(trace), "rows": rows, **meta}, "seed": meta.get("seed"),
        "spark": {"master": master, "shards": shards, "wall_seconds": round(wall, 3),
                  # peak RSS of the Python worker that replayed a shard (max over shards), and the driver's
                  "task_peak_rss_mb": max(task_rss, default=0.0), "driver_peak_rss_mb": peak_rss_mb()},
        "runs": {},
    }
    with result_dir(out) as writer:
        for kind, schema, write in (("delivery", DELIVERY_SCHEMA, writer.deliveries_table),
                                    ("txn", TXN_SCHEMA, writer.txns_table)):
            for part in _parts(root, kind):
                for batch in pq.ParquetFile(part).iter_batches(100_000, columns=schema.names):
                    write(pa.Table.from_batches([batch]).cast(schema))
        for cfg in configs:
            manifest["runs"][cfg.label] = {
                "config": cfg.as_dict(), "events": events.get(cfg.label, 0), "wall_seconds": round(wall, 3),
                "events_per_second": round(rows / wall) if wall else None, "time_mode": cfg.time_mode,
            }
        latency = {label: Histograms.merge_summaries(parts) for label, parts in latency_parts.items()}
        writer.finish(counts=counts, latency=latency, recovery=recovery, manifest=manifest)
    return manifest
