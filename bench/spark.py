"""Spark batch replay: ``txnbench replay --spark MASTER``.

The driver validates the trace and plans shards (:mod:`bench.sharding`). Spark reads the trace,
tags each row with its shard (topic rows by topic; txn rows without a topic by the txn's topic;
crashes go to every shard, since a crash hits the whole broker), repartitions by shard, restores
trace order within each partition, and replays every shard through every engine configuration
inside the executors (``mapInPandas``, streaming: a shard's rows are spooled to a local Parquet
file, so executor memory does not grow with trace length). Deliveries, txn rows and a per-shard
summary (counts, HdrHistogram-encoded latencies, recovery) come back as one DataFrame written
once; the driver merges summaries and writes the standard result directory.

Works unchanged on a cluster master, as long as executors can import txnbench.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from bench.config import RunConfig
from bench.measure import Histograms
from bench.results import DELIVERY_SCHEMA, TXN_SCHEMA, result_dir
from bench.sharding import plan_shards
from bench.trace import COLUMNS, trace_metadata
from engine.errors import BackendUnavailable, ConfigError

OUT_SCHEMA = (
    "kind string, shard int, engine string, topic string, subscription string, msg string, "
    "delivered_ts_us long, redelivery boolean, txn string, outcome string, end_ts_us long, "
    "visible_ts_us long, commit_requested_ts_us long, messages long, payload string"
)
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
_OUT_NAMES = [c.split()[0] for c in OUT_SCHEMA.split(", ")]


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


def _replay_partition(configs_json: str):  # type: ignore[no-untyped-def]
    """The executor side: a closure over the run configs, for mapInPandas."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        from bench.replay import Replayer
        from bench.trace import Event, TraceWriter

        configs = [_config_from_dict(d) for d in json.loads(configs_json)]
        work = Path(tempfile.mkdtemp(prefix="txnbench-shard-"))
        writers: dict[int, TraceWriter] = {}
        try:
            for pdf in batches:  # spool each shard's rows, in trace order, to local Parquet
                for shard, group in pdf.groupby("shard", sort=False):
                    w = writers.get(int(shard))
                    if w is None:
                        w = writers[int(shard)] = TraceWriter(work / f"shard-{int(shard)}.parquet")
                    for rec in group[COLUMNS].itertuples(index=False):
                        w.add(int(rec.ts_us), rec.op, **{c: _none(getattr(rec, c)) for c in COLUMNS[2:]})
            for shard, w in sorted(writers.items()):
                path = w.close()
                for cfg in configs:
                    yield from _replay_shard(shard, path, cfg, Replayer, Event, pd)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return run


def _replay_shard(shard: int, path: Path, cfg: RunConfig, Replayer: Any, Event: Any, pd: Any) -> Iterator[Any]:
    import pyarrow.parquet as pq_local

    events = (
        Event(i, *values)
        for i, values in enumerate(
            row for batch in pq_local.ParquetFile(path).iter_batches(65_536, columns=COLUMNS)
            for row in zip(*[batch.column(j).to_pylist() for j in range(len(COLUMNS))])
        )
    )
    chunks: list[dict[str, list[Any]]] = []
    replayer = Replayer(cfg, delivery_sink=lambda cols: chunks.append(cols), sink_rows=50_000)
    result = replayer.run(events)
    chunks.append(result.deliveries)
    for cols in chunks:
        if cols["msg"]:
            yield _frame(pd, {**cols, "kind": "delivery", "shard": shard})
    if result.txns["txn"]:
        yield _frame(pd, {**result.txns, "kind": "txn", "shard": shard})
    summary = {"counts": result.counts, "latency": result.latency, "recovery": result.recovery,
               "events": result.events, "wall_seconds": result.wall_seconds, "virtual_end_us": result.virtual_end_us}
    yield _frame(pd, {"kind": "summary", "shard": shard, "engine": cfg.label, "payload": json.dumps(summary)})


_INT_COLS = {"shard", "delivered_ts_us", "end_ts_us", "visible_ts_us", "commit_requested_ts_us", "messages"}


def _frame(pd: Any, cols: dict[str, Any]) -> Any:
    """A pandas frame in OUT_SCHEMA's column order with types Arrow maps onto it exactly:
    missing columns are all-null (object or nullable Int64), scalars are broadcast."""
    n = max((len(v) for v in cols.values() if isinstance(v, list)), default=1)
    data = {}
    for name in _OUT_NAMES:
        v = cols.get(name)
        values = v if isinstance(v, list) else [v] * n
        if name in _INT_COLS:
            data[name] = pd.array(values, dtype="Int64")
        elif name == "redelivery":
            data[name] = pd.array(values, dtype="boolean")
        else:
            data[name] = pd.Series(values, dtype=object)
    return pd.DataFrame(data)


def _none(v: Any) -> Any:
    try:
        import pandas as pd

        return None if pd.isna(v) else v
    except (TypeError, ValueError):
        return v


def _config_from_dict(d: dict[str, Any]) -> RunConfig:
    from engine.clock import LatencyModel
    from engine.dispatcher import DispatchMode

    d = dict(d)
    d.pop("label", None)
    d["dispatch"] = DispatchMode(d["dispatch"])
    d["latency"] = LatencyModel(d["latency"])
    return RunConfig(**d)


def spark_replay(trace: str | Path, configs: list[RunConfig], out: str | Path, master: str = "local[*]",
                 shards: int | None = None) -> dict[str, Any]:
    for cfg in configs:
        if not cfg.ledger_url.startswith("memory://") or not cfg.metadata_url.startswith("memory://"):
            raise ConfigError("Spark replay runs each shard on embedded backends; drop --ledger/--metadata")
    started = time.perf_counter()
    spark = _session(master)
    try:
        n_shards = shards or max(2, spark.sparkContext.defaultParallelism)
        topic_shard, rows = plan_shards(trace, n_shards)
        from pyspark.sql import functions as F

        df = spark.read.parquet(str(Path(trace).resolve())).select(*COLUMNS).withColumn("row", F.monotonically_increasing_id())
        topics = spark.createDataFrame(list(topic_shard.items()) or [("", 0)], "topic string, tshard int")
        txn_shard = (df.where(F.col("txn").isNotNull() & F.col("topic").isNotNull())
                     .join(F.broadcast(topics), "topic").groupBy("txn").agg(F.min("tshard").alias("xshard")))
        all_shards = spark.createDataFrame([(i,) for i in range(n_shards)], "cshard int")
        tagged = (df.join(F.broadcast(topics), "topic", "left").join(txn_shard, "txn", "left")
                  .withColumn("shard", F.coalesce("tshard", "xshard", F.pmod(F.hash("txn"), F.lit(n_shards)))))
        crashes = df.where(F.col("op").isin("crash_broker", "crash_tc")).crossJoin(all_shards).withColumnRenamed("cshard", "shard")
        rows_df = tagged.where(~F.col("op").isin("crash_broker", "crash_tc")).select(*COLUMNS, "row", "shard") \
            .unionByName(crashes.select(*COLUMNS, "row", "shard"))
        # One shard per partition: hash (and range) partitioning of a few small ints can put two
        # shards in one task and leave a core idle, so each shard gets a key that Spark's own
        # partitioner (Murmur3 pmod n, as F.hash) sends to a partition of its own.
        keys = spark.createDataFrame(list(_partition_keys(spark, n_shards).items()), "shard int, pkey int")
        ordered = (rows_df.join(F.broadcast(keys), "shard").repartition(n_shards, "pkey")
                   .sortWithinPartitions("shard", "ts_us", "row").drop("pkey"))
        configs_json = json.dumps([c.as_dict() for c in configs])
        result = ordered.mapInPandas(_replay_partition(configs_json), OUT_SCHEMA)
        spool = Path(tempfile.mkdtemp(prefix="txnbench-spark-"))
        try:
            result.write.mode("overwrite").partitionBy("kind").parquet(str(spool / "out"))
            return _collect(spool / "out", trace, rows, configs, out, master, n_shards, time.perf_counter() - started)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
    finally:
        spark.stop()


def _partition_keys(spark: Any, n: int) -> dict[int, int]:
    """shard -> an int key whose Spark hash partition (pmod n) is ``shard``."""
    from pyspark.sql import functions as F

    rows = (spark.range(0, 64 * n).select(F.col("id").cast("int").alias("c"))
            .select("c", F.pmod(F.hash("c"), F.lit(n)).alias("p")).collect())
    keys: dict[int, int] = {}
    for r in rows:
        keys.setdefault(int(r.p), int(r.c))
    if len(keys) < n:
        raise ConfigError(f"could not find a partition key for each of {n} shards")
    return keys


def _parts(root: Path, kind: str) -> list[Path]:
    return sorted((root / f"kind={kind}").glob("*.parquet"))


def _collect(root: Path, trace: str | Path, rows: int, configs: list[RunConfig], out: str | Path,
             master: str, shards: int, wall: float) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    latency_parts: dict[str, list[dict[str, Any]]] = {}
    recovery: list[dict[str, Any]] = []
    events: dict[str, int] = {}
    for part in _parts(root, "summary"):
        t = pq.read_table(part, columns=["engine", "payload"]).to_pydict()
        for label, payload in zip(t["engine"], t["payload"]):
            s = json.loads(payload)
            c = counts.setdefault(label, {})
            for k, v in s["counts"].items():
                c[k] = c.get(k, 0) + v
            latency_parts.setdefault(label, []).append(s["latency"])
            recovery.extend(s["recovery"])
            events[label] = events.get(label, 0) + s["events"]
    meta = trace_metadata(trace)
    manifest: dict[str, Any] = {
        "trace": {"path": str(trace), "rows": rows, **meta}, "seed": meta.get("seed"),
        "spark": {"master": master, "shards": shards, "wall_seconds": round(wall, 3)}, "runs": {},
    }
    with result_dir(out) as writer:
        for part in _parts(root, "delivery"):
            for batch in pq.ParquetFile(part).iter_batches(100_000, columns=DELIVERY_SCHEMA.names):
                writer.deliveries(pa.Table.from_batches([batch]).cast(DELIVERY_SCHEMA).to_pydict())
        txns: dict[str, list[Any]] = {k: [] for k in TXN_SCHEMA.names}
        for part in _parts(root, "txn"):
            t = pq.read_table(part, columns=TXN_SCHEMA.names).to_pydict()
            for k in TXN_SCHEMA.names:
                txns[k].extend(t[k])
        for cfg in configs:
            manifest["runs"][cfg.label] = {
                "config": cfg.as_dict(), "events": events.get(cfg.label, 0), "wall_seconds": round(wall, 3),
                "events_per_second": round(rows / wall) if wall else None, "time_mode": cfg.time_mode,
            }
        latency = {label: Histograms.merge_summaries(parts) for label, parts in latency_parts.items()}
        writer.finish(txns=txns, counts={k: dict(sorted(v.items())) for k, v in counts.items()},
                      latency=latency, recovery=recovery, manifest=manifest)
    return manifest
