"""Spark batch replay: ``txnbench replay --spark MASTER``.

Plan: rows per topic and the distinct sets of topics one txn touches (small aggregates, whatever
the trace's length; computed with Arrow while the JVM starts); the driver joins topics linked by
txns into units and bin-packs them onto shards (:mod:`bench.sharding`).

Replay: one Spark task per shard reads the trace itself with pyarrow, keeps its shard's rows
with vectorised filters (:func:`bench.sharding.shard_events`) and replays them through each
engine config in turn, streaming, so a task's memory does not grow with the trace. A task
writes its delivery and txn rows to Parquet itself (in the run's spool directory) and returns
only a summary and its counts per config as Arrow batches: sending millions of rows through
the JVM to have Spark write them cost as much CPU as a third of the replay. Spark SQL sums the
counts, and the driver merges the HdrHistograms and the row files into the standard result
directory.

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
from bench.runner import write_metrics
from bench.sharding import plan_shards, trace_aggregates
from bench.timeseries import merge_rows
from bench.trace import parquet_stream, trace_metadata, validate
from engine.errors import BackendUnavailable, ConfigError, TraceError

Progress = Callable[[str, int, int], None]  # (label, done, total), as bench.runner's

# What a task returns through Spark: per shard and config, one "summary" row (JSON payload) and
# one "count" row per exact count (name in ``name``, value in ``value``).
OUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("shard", pa.int32()), ("engine", pa.string()), ("name", pa.string()),
    ("value", pa.int64()), ("payload", pa.string()),
])
OUT_DDL = "kind string, shard int, engine string, name string, value long, payload string"
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


ROW_FILES = {"delivery": DELIVERY_SCHEMA, "txn": TXN_SCHEMA}  # spool/rows/<kind>/shard-<n>-<engine>.parquet


def _replay_tasks(trace: str, plan_json: str, configs_json: str, spool: str):  # type: ignore[no-untyped-def]
    """The executor side: a closure for mapInArrow over a frame of shard numbers."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        topic_shard = json.loads(plan_json)
        configs = [_config_from_dict(d) for d in json.loads(configs_json)]
        for batch in batches:
            for shard in batch.column(0).to_pylist():
                for cfg in configs:
                    yield from _replay_shard(trace, topic_shard, int(shard), cfg, Path(spool))

    return run


class _RowFiles:
    """One shard's delivery and txn rows for one config, written straight to Parquet under a
    name unique to this attempt, renamed into place when complete (a retried task rewrites
    them whole)."""

    def __init__(self, spool: Path, shard: int, label: str) -> None:
        self._final: dict[str, Path] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        for kind, schema in ROW_FILES.items():
            final = spool / "rows" / kind / f"shard-{shard}-{label}.parquet"
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}")
            self._final[kind] = final
            self._writers[kind] = pq.ParquetWriter(tmp, schema, compression="zstd")

    def write(self, kind: str, cols: dict[str, list[Any]]) -> None:
        if next(iter(cols.values())):
            writer = self._writers[kind]
            writer.write_table(pa.table(cols, schema=writer.schema))

    def close(self) -> None:
        for kind, writer in self._writers.items():
            writer.close()
            Path(writer.where).replace(self._final[kind])


def _replay_shard(trace: str, topic_shard: dict[str, int], shard: int, cfg: RunConfig,
                  spool: Path) -> Iterator[pa.RecordBatch]:
    from bench.replay import Replayer
    from bench.sharding import shard_events

    files = _RowFiles(spool, shard, cfg.label)
    replayer = Replayer(cfg, sink_rows=50_000, delivery_sink=lambda cols: files.write("delivery", cols),
                        txn_sink=lambda cols: files.write("txn", cols))
    for n in replayer.steps(shard_events(trace, topic_shard, shard)):
        _note_progress(spool / "progress", cfg.label, shard, n)
    result = replayer.result
    assert result is not None
    files.write("delivery", result.deliveries)
    files.write("txn", result.txns)
    files.close()
    summary = {"latency": result.latency, "recovery": result.recovery, "events": result.events,
               "wall_seconds": result.wall_seconds, "virtual_end_us": result.virtual_end_us,
               "peak_rss_mb": result.peak_rss_mb, "series": result.series}
    yield _batch("summary", shard, {"engine": [cfg.label], "payload": [json.dumps(summary)]})
    counts = sorted(result.counts.items())  # summed across shards by Spark SQL
    yield _batch("count", shard, {"engine": [cfg.label] * len(counts), "name": [k for k, _ in counts],
                                  "value": [v for _, v in counts]})


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
        planned = time.perf_counter()
        tasks = spark.range(0, n_shards, 1, numPartitions=n_shards).selectExpr("cast(id as int) as shard")
        spool = Path(tempfile.mkdtemp(prefix="txnbench-spark-"))
        try:
            (spool / "progress").mkdir()
            result = tasks.mapInArrow(_replay_tasks(trace_path, json.dumps(topic_shard),
                                                    json.dumps([c.as_dict() for c in configs]), str(spool)),
                                      OUT_DDL)
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_progress, daemon=True, args=(
                spool / "progress", [c.label for c in configs], pq.ParquetFile(trace).metadata.num_rows, progress, stop))
            if progress is not None:
                watcher.start()
            try:
                result.write.mode("overwrite").partitionBy("kind").parquet(str(spool / "meta"))
            except Exception:
                checked.wait()  # a bad trace fails a task before the validator reaches the row: say why
                raise
            finally:
                stop.set()
                if watcher.is_alive():
                    watcher.join()
            replayed = time.perf_counter()
            rows = checked.wait()
            for cfg in configs:
                if progress is not None:
                    progress(cfg.label, rows, rows)
            counts = _summed_counts(spark, spool / "meta")
            phases = {"start_and_plan": round(planned - started, 2), "replay": round(replayed - planned, 2),
                      "validate_and_count": round(time.perf_counter() - replayed, 2)}
            return _collect(spool, trace, rows, configs, counts, out, master, n_shards, started, phases)
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

    rows = (spark.read.parquet(str(root)).where(F.col("kind") == "count").groupBy("engine", "name")
            .agg(F.sum("value").alias("n")).collect())
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r.engine, {})[r["name"]] = int(r.n)
    return {label: dict(sorted(c.items())) for label, c in counts.items()}


def _parts(spool: Path, kind: str) -> list[Path]:
    if kind in ROW_FILES:  # written by the tasks themselves
        return sorted((spool / "rows" / kind).glob("*.parquet"))
    return sorted((spool / "meta" / f"kind={kind}").glob("*.parquet"))  # written by Spark


def _collect(spool: Path, trace: str | Path, rows: int, configs: list[RunConfig], counts: dict[str, dict[str, int]],
             out: str | Path, master: str, shards: int, started: float, phases: dict[str, float]) -> dict[str, Any]:
    latency_parts: dict[str, list[dict[str, Any]]] = {}
    recovery: list[dict[str, Any]] = []
    events: dict[str, int] = {}
    task_rss: list[float] = []
    shard_seconds: dict[str, dict[int, float]] = {}
    series: list[list[dict[str, Any]]] = []  # every shard's time series, merged per window below
    for part in _parts(spool, "summary"):
        t = pq.read_table(part, columns=["shard", "engine", "payload"]).to_pydict()
        for shard, label, payload in zip(t["shard"], t["engine"], t["payload"]):
            s = json.loads(payload)
            latency_parts.setdefault(label, []).append(s["latency"])
            recovery.extend(s["recovery"])
            events[label] = events.get(label, 0) + s["events"]
            task_rss.append(s["peak_rss_mb"])
            shard_seconds.setdefault(label, {})[shard] = round(s["wall_seconds"], 2)
            series.append(s.get("series", []))
    meta = trace_metadata(trace)
    manifest: dict[str, Any] = {
        "trace": {"path": str(trace), "rows": rows, **meta}, "seed": meta.get("seed"),
        "spark": {"master": master, "shards": shards, "wall_seconds": 0.0,
                  # peak RSS of the Python worker that replayed a shard (max over shards), and the driver's
                  "task_peak_rss_mb": max(task_rss, default=0.0), "driver_peak_rss_mb": peak_rss_mb(),
                  # where the time went: driver phases, and each shard's replay per engine
                  "phases_seconds": phases,
                  "shard_replay_seconds": {k: [v[i] for i in sorted(v)] for k, v in sorted(shard_seconds.items())}},
        "runs": {},
    }
    with result_dir(out) as writer:
        for kind, schema, write in (("delivery", DELIVERY_SCHEMA, writer.deliveries_table),
                                    ("txn", TXN_SCHEMA, writer.txns_table)):
            for part in _parts(spool, kind):
                for batch in parquet_stream(part).iter_batches(100_000, columns=schema.names):
                    write(pa.Table.from_batches([batch]).cast(schema))
        latency = {label: Histograms.merge_summaries(parts) for label, parts in latency_parts.items()}
        phases["collect"] = round(time.perf_counter() - started - sum(phases.values()), 2)
        wall = time.perf_counter() - started
        manifest["spark"]["wall_seconds"] = round(wall, 3)
        for cfg in configs:
            manifest["runs"][cfg.label] = {
                "config": cfg.as_dict(), "events": events.get(cfg.label, 0), "wall_seconds": round(wall, 3),
                "events_per_second": round(rows / wall) if wall else None, "time_mode": cfg.time_mode,
            }
        write_metrics(writer.dir, manifest["runs"], counts, latency, {}, [merge_rows(series)])
        writer.finish(counts=counts, latency=latency, recovery=recovery, manifest=manifest)
    return manifest
