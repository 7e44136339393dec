"""Spark batch replay: ``txnbench replay --spark MASTER``.

Plan: rows per topic and the distinct sets of topics one txn touches (small aggregates, whatever
the trace's length; computed with Arrow while the JVM starts); the driver joins topics linked by
txns into units and bin-packs them onto shards (:mod:`bench.scale.sharding`).

Replay: one Spark task per shard reads the trace itself with pyarrow, keeps its shard's rows
with vectorised filters (:func:`bench.scale.sharding.shard_events`) and replays them through each
engine config in turn, streaming, so a task's memory does not grow with the trace. A task
writes its delivery and txn rows to Parquet itself (in the run's spool directory) and returns
only a summary and its counts per config as Arrow batches: sending millions of rows through
the JVM to have Spark write them cost as much CPU as a third of the replay. Those few rows come
back to the driver as one Arrow table (not through a Spark write to the driver's disk, which
executors on other hosts cannot reach); the driver sums the counts, merges the HdrHistograms and
copies the row files into the standard result directory.

Meanwhile the driver validates the whole trace in a thread (the tasks trust it): a bad trace
cancels the job and is refused with its row number, with nothing written.

Works unchanged on a cluster master (``spark://host:7077``; shown by
``tests/integration/test_spark_cluster.py``), as long as executors can import txnbench and reach
the trace and the spool: give the trace and ``--out`` as URIs on storage every host reaches
(:mod:`bench.scale.storage`: ``s3://``, ``hdfs://``, ``file://`` on a shared mount, ...). With a URI
``--out`` the spool sits beside it on the same store, and the finished result directory is
copied there; with a local ``--out`` the spool is a local temporary directory, which executors
on other hosts cannot reach: the driver then refuses the run instead of losing their rows.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bench.replay.config import RunConfig
from bench.replay.measure import Histograms, peak_rss_mb
from bench.replay.output import check_out
from bench.replay.results import DELIVERY_SCHEMA, TXN_SCHEMA, result_dir
from bench.scale import storage
from bench.replay.runner import write_metrics
from bench.scale.sharding import plan_shards, trace_aggregates
from bench.replay.timeseries import merge_rows
from bench.trace.trace import trace_metadata, validate
from bench.trace.tracefmt import open_trace
from engine.errors import BackendUnavailable, ConfigError, TraceError

Progress = Callable[[str, int, int], None]  # (label, done, total), as bench.replay.runner's

# What a task returns through Spark: per shard and config, one "summary" row (JSON payload) and
# one "count" row per exact count (name in ``name``, value in ``value``).
OUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("shard", pa.int32()), ("engine", pa.string()), ("name", pa.string()),
    ("value", pa.int64()), ("payload", pa.string()),
])
OUT_DDL = "kind string, shard int, engine string, name string, value long, payload string"
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")


def spark_log_path() -> Path:
    """Where this process's Spark driver logs (its errors only): a file in the temp directory,
    removed after a run that succeeded, named in the message of one that failed."""
    return Path(tempfile.gettempdir()) / f"txnbench-spark-{os.getpid()}.log"


LOOPBACK = "127.0.0.1"
# Crash rows go to every shard (bench.scale.sharding.CRASH_OPS: a crash hits the whole broker), so each
# shard counts each crash once; these counts are per crash, not per shard, when summed.
BROADCAST_COUNTS = ("crashes.broker", "crashes.tc", "events.crash_broker", "events.crash_tc")


def _check_master(master: str) -> None:
    """A ``spark://host:port`` master that does not accept connections is refused in bounded
    time (Spark's standalone client retries for minutes)."""
    import socket
    from urllib.parse import urlsplit

    if not master.startswith("spark://"):
        return
    for hostport in master[len("spark://"):].split(","):  # a list of masters (standby HA)
        try:
            parts = urlsplit(f"spark://{hostport}")
            host, port = parts.hostname, parts.port
        except ValueError:
            host = port = None
        if not host or not port:
            raise ConfigError(f"--spark {master}: expected spark://HOST:PORT")
        try:
            with socket.create_connection((host, port), timeout=5):
                return
        except OSError as exc:
            last = exc
    raise BackendUnavailable(f"Spark master {master} is not reachable ({last.strerror or last})")


PY4J_SEND_LOGS = ("KeyboardInterrupt while sending command", "Exception while sending command")


def _drop_py4j_interrupt(record: logging.LogRecord) -> bool:
    """py4j logs a KeyboardInterrupt during a JVM call with its stack trace on the root logger
    (java_gateway.py, ``logging.exception("KeyboardInterrupt while sending command.")``), and a
    call that fails on the connection as "Exception while sending command." (a Ctrl-C landing in
    its socket read, then a second call on that connection: "reentrant call inside
    BufferedReader"). The CLI already says "interrupted" in one line, and a failed call reaches
    the caller as a Py4JError all the same."""
    return not record.getMessage().startswith(PY4J_SEND_LOGS)


def _session(master: str, driver_host: str = LOOPBACK):  # type: ignore[no-untyped-def]
    """A Spark session whose driver listens on ``driver_host`` only: loopback by default, so
    ``local[N]`` opens no port on the machine's external interfaces (Spark's RPC has no
    authentication unless configured); a cluster needs an address its executors can reach."""
    _check_master(master)
    if _drop_py4j_interrupt not in logging.getLogger().filters:
        logging.getLogger().addFilter(_drop_py4j_interrupt)
    # py4j's own loggers report a connection torn down by Ctrl-C ("Exception occurred while
    # shutting down connection") with a stack trace; what fails in the JVM reaches us as an exception
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError(f"pyspark is not installed ({exc})") from None
    try:
        with _signals_deferred() as pending:
            spark = _build(SparkSession, master, driver_host)
    except Exception as exc:  # py4j/JVM start-up failures come in many types
        first = f"cannot start Spark with master {master!r}: {exc}".splitlines()[0]
        raise BackendUnavailable(f"{first} (Spark's log: {spark_log_path()})") from None
    if pending:  # Ctrl-C or SIGTERM while the JVM started: stop it cleanly, then act on the signal
        spark.stop()
        signum, handler = pending[0]
        handler(signum, None)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_deferred() -> Iterator[list[tuple[int, Callable[[int, Any], None]]]]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while Spark's JVM starts, and yield what arrived. pyspark
    launches the JVM with SIGINT ignored and waits for it in a sleep loop
    (``java_gateway.launch_gateway``); interrupted there, it deletes the directory the JVM is
    about to write its port to, and the JVM, its py4j server thread alive, never exits. Interrupted
    later, in ``SparkContext``'s constructor, the JVM's shutdown races the constructor. A second
    signal acts at once."""
    pending: list[tuple[int, Callable[[int, Any], None]]] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous = {sig: signal.getsignal(sig) for sig in DEFERRED_SIGNALS}

    def defer(signum: int, frame: Any) -> None:
        handler = cast(Callable[[int, Any], None], previous[signal.Signals(signum)])
        if pending:
            handler(signum, frame)
        pending.append((signum, handler))

    for sig in DEFERRED_SIGNALS:
        if callable(previous[sig]):  # an ignored or default-action signal stays as it is
            signal.signal(sig, defer)
    try:
        yield pending
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _build(session_class: Any, master: str, driver_host: str) -> Any:
    """A session whose driver listens on ``driver_host`` only and logs its errors into a file."""
    return (
        session_class.builder.master(master)
        .appName("txnbench-replay")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.host", driver_host)
        .config("spark.driver.bindAddress", driver_host)
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J} -Dtxnbench.spark.log={spark_log_path()}")
        .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}")
        .getOrCreate()
    )


ROW_FILES = {"delivery": DELIVERY_SCHEMA, "txn": TXN_SCHEMA}  # spool/rows/<kind>/shard-<n>-<engine>.parquet


def _replay_tasks(trace: str, plan_json: str, configs_json: str, spool: str):  # type: ignore[no-untyped-def]
    """The executor side: a closure for mapInArrow over a frame of shard numbers."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        topic_shard = json.loads(plan_json)
        configs = [_config_from_dict(d) for d in json.loads(configs_json)]
        for batch in batches:
            for shard in batch.column(0).to_pylist():
                for cfg in configs:
                    yield from _replay_shard(trace, topic_shard, int(shard), cfg, spool)

    return run


class _RowFiles:
    """One shard's delivery and txn rows for one config, written straight to Parquet under a
    name unique to this attempt, moved into place when complete (a retried task rewrites
    them whole). The spool is a path or a URI (:mod:`bench.scale.storage`)."""

    def __init__(self, spool: str, shard: int, label: str) -> None:
        self._fs, root = storage.resolve(spool, "spool")
        self._final: dict[str, str] = {}
        self._tmp: dict[str, str] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        for kind, schema in ROW_FILES.items():
            folder = f"{root}/rows/{kind}"
            self._fs.create_dir(folder, recursive=True)
            name = f"shard-{shard}-{label}.parquet"
            self._final[kind] = f"{folder}/{name}"
            self._tmp[kind] = f"{folder}/.{name}.{os.getpid()}.{threading.get_ident()}"
            self._writers[kind] = pq.ParquetWriter(self._tmp[kind], schema, compression="zstd",
                                                   filesystem=self._fs)

    def write(self, kind: str, cols: dict[str, list[Any]]) -> None:
        if next(iter(cols.values())):
            writer = self._writers[kind]
            writer.write_table(pa.table(cols, schema=writer.schema))

    def close(self) -> None:
        for kind, writer in self._writers.items():
            writer.close()
            self._fs.move(self._tmp[kind], self._final[kind])


def _replay_shard(trace: str, topic_shard: dict[str, int], shard: int, cfg: RunConfig,
                  spool: str) -> Iterator[pa.RecordBatch]:
    from bench.replay.replay import Replayer
    from bench.scale.sharding import shard_events

    files = _RowFiles(spool, shard, cfg.label)
    replayer = Replayer(cfg, sink_rows=50_000, delivery_sink=lambda cols: files.write("delivery", cols),
                        txn_sink=lambda cols: files.write("txn", cols))
    progress = storage.child(spool, "progress")
    for n in replayer.steps(shard_events(trace, topic_shard, shard)):
        _note_progress(progress, cfg.label, shard, n)
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


def _note_progress(progress_dir: str, label: str, shard: int, events: int) -> None:
    """Events replayed so far by one shard, for the driver's progress bars (best effort: an
    executor that cannot reach the driver's spool directory just draws no bar)."""
    if storage.is_uri(progress_dir):
        try:  # an object store has no rename: one small overwrite
            fs, path = storage.resolve(progress_dir)
            with fs.open_output_stream(f"{path}/{label}.{shard}") as f:
                f.write(str(events).encode())
        except (OSError, ConfigError):
            pass
        return
    try:
        tmp = Path(progress_dir) / f".{label}.{shard}.tmp"
        tmp.write_text(str(events))
        tmp.replace(Path(progress_dir) / f"{label}.{shard}")
    except OSError:
        pass


def _watch_progress(progress_dir: str, labels: list[str], rows: int, progress: Progress,
                    stop: threading.Event) -> None:
    fs, root = storage.resolve(progress_dir)
    while not stop.wait(0.5):
        try:
            notes = storage.list_files(fs, root)
        except OSError:
            continue
        for label in labels:
            done = 0
            for f in notes:
                if f.rsplit("/", 1)[-1].rsplit(".", 1)[0] == label:
                    try:
                        with fs.open_input_stream(f) as s:
                            done += int(s.read() or 0)
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
    d.pop("design", None)  # both derived from the fields (RunConfig.as_dict)
    d["dispatch"] = DispatchMode(d["dispatch"])
    d["sub_types"] = tuple(tuple(t) for t in d.get("sub_types", ()))  # JSON's lists, back to the field's tuples
    rec = d.pop("latency_profile", None)
    if rec and rec.get("path"):  # the profile file, as the driver loaded it; the model is rebuilt from it
        from engine.profile import LatencyProfile

        profile = LatencyProfile.load(rec["path"])
        if profile.sha256 != rec.get("sha256"):
            from engine.errors import ConfigError

            raise ConfigError(f"latency profile {rec['path']} changed since the replay started (sha256 differs)")
        model = profile.to_latency_model(int(rec.get("seed", 1))).with_overrides(
            **{k.replace(".", "_", 1): v for k, v in rec.get("overrides", {}).items()})
        d.pop("latency")
        return RunConfig(**d, latency=model, latency_profile=profile)
    d["latency"] = LatencyModel(d["latency"])
    return RunConfig(**d)


def spark_replay(trace: str | Path, configs: list[RunConfig], out: str | Path, master: str = "local[*]",
                 shards: int | None = None, progress: Progress | None = None, *, force: bool = False,
                 driver_host: str = LOOPBACK) -> dict[str, Any]:
    for cfg in configs:
        if not cfg.ledger_url.startswith("memory://") or not cfg.metadata_url.startswith("memory://"):
            raise ConfigError("Spark replay runs each shard on embedded backends; drop --ledger/--metadata")
    if not storage.is_uri(out):
        check_out(out, force=force)
    trace_path = str(trace) if storage.is_uri(trace) else str(Path(trace).resolve())
    trace_metadata(trace)  # a missing or unreadable file is refused before Spark starts
    if storage.is_uri(out) and storage.exists(out):  # refused before Spark starts, not after the replay
        raise ConfigError(f"--out {out} exists; give a new location")
    started = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:  # the plan's aggregates are computed while the JVM starts
        aggregates = pool.submit(trace_aggregates, trace_path)
        spark = _session(master, driver_host)
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
        spool = _make_spool(out)
        try:
            result = tasks.mapInArrow(_replay_tasks(trace_path, json.dumps(topic_shard),
                                                    json.dumps([c.as_dict() for c in configs]), spool),
                                      OUT_DDL)
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_progress, daemon=True, args=(
                storage.child(spool, "progress"), [c.label for c in configs], open_trace(trace).num_rows(),
                progress, stop))
            if progress is not None:
                watcher.start()
            try:
                meta = result.toArrow()  # a summary and the counts per shard and config: small
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
            counts = _summed_counts(meta)
            phases = {"start_and_plan": round(planned - started, 2), "replay": round(replayed - planned, 2),
                      "validate_and_count": round(time.perf_counter() - replayed, 2)}
            collected = _collect(spool, meta, trace, rows, configs, counts, out, master, n_shards, started,
                                 phases, force)
        finally:
            _remove_spool(spool)
    finally:
        checked.stop()
        spark.stop()
    spark_log_path().unlink(missing_ok=True)
    return collected


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


def _make_spool(out: str | Path) -> str:
    """Where the tasks write their rows and progress notes: beside a URI ``--out``, on the same
    store (reached by executors on every host); else a local temporary directory."""
    if storage.is_uri(out):
        spool = storage.sibling(out, f".{storage.basename(out)}.spool-{uuid.uuid4().hex[:12]}")
        fs, path = storage.resolve(spool, "spool")
        fs.create_dir(f"{path}/progress", recursive=True)
        return spool
    local = Path(tempfile.mkdtemp(prefix="txnbench-spark-"))
    (local / "progress").mkdir()
    return str(local)


def _remove_spool(spool: str) -> None:
    if not storage.is_uri(spool):
        shutil.rmtree(spool, ignore_errors=True)
        return
    try:
        fs, path = storage.resolve(spool)
        fs.delete_dir(path)
    except (OSError, ConfigError):
        pass


def _summed_counts(meta: pa.Table) -> dict[str, dict[str, int]]:
    """Every shard's exact counts, summed per engine and name."""
    rows = (meta.filter(pc.equal(meta["kind"], "count")).group_by(["engine", "name"])
            .aggregate([("value", "sum")]).to_pylist())
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r["engine"], {})[r["name"]] = int(r["value_sum"])
    return {label: dict(sorted(c.items())) for label, c in sorted(counts.items())}


def _row_parts(spool: str, kind: str, summaries: list[tuple[int, str]]) -> tuple[pafs.FileSystem, list[str]]:
    """The row files the tasks wrote, one per (shard, config) that reported a summary. A missing
    one means the executors wrote to a spool the driver does not see (a local --out with
    executors on other hosts): refused rather than reported without their rows."""
    fs, root = storage.resolve(spool, "spool")
    parts = storage.list_files(fs, f"{root}/rows/{kind}", ".parquet")
    names = {p.rsplit("/", 1)[-1] for p in parts}
    missing = [f"shard-{shard}-{label}.parquet" for shard, label in summaries
               if f"shard-{shard}-{label}.parquet" not in names]
    if missing:
        raise BackendUnavailable(
            f"the Spark tasks' {kind} rows ({', '.join(missing[:3])}) are not in the spool {spool}: executors on "
            "other hosts cannot write to the driver's local disk; give --out as a URI on storage every "
            "host reaches (hdfs://, s3://, file:// on a shared mount)")
    return fs, parts


def _collect(spool: str, meta_rows: pa.Table, trace: str | Path, rows: int, configs: list[RunConfig],
             counts: dict[str, dict[str, int]], out: str | Path, master: str, shards: int, started: float,
             phases: dict[str, float], force: bool = False) -> dict[str, Any]:
    latency_parts: dict[str, list[dict[str, Any]]] = {}
    recovery: list[dict[str, Any]] = []
    events: dict[str, int] = {}
    task_rss: list[float] = []
    shard_seconds: dict[str, dict[int, float]] = {}
    series: list[list[dict[str, Any]]] = []  # every shard's time series, merged per window below
    t = (meta_rows.filter(pc.equal(meta_rows["kind"], "summary")).select(["shard", "engine", "payload"])
         .sort_by([("shard", "ascending"), ("engine", "ascending")]).to_pydict())
    for shard, label, payload in zip(t["shard"], t["engine"], t["payload"]):
        s = json.loads(payload)
        latency_parts.setdefault(label, []).append(s["latency"])
        recovery.extend(s["recovery"])
        events[label] = events.get(label, 0) + s["events"]
        task_rss.append(s["peak_rss_mb"])
        shard_seconds.setdefault(label, {})[shard] = round(s["wall_seconds"], 2)
        series.append(s.get("series", []))
    for label, c in counts.items():  # every shard replayed every crash row: count each once
        ran = len(shard_seconds.get(label, {})) or 1
        crash_rows = sum(c.get(f"events.{op}", 0) for op in ("crash_broker", "crash_tc")) // ran
        for key in BROADCAST_COUNTS:
            if key in c:
                c[key] //= ran
        events[label] = events.get(label, 0) - crash_rows * (ran - 1)
    reported = list(zip(t["shard"], t["engine"]))
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
    staging = Path(tempfile.mkdtemp(prefix="txnbench-out-")) if storage.is_uri(out) else None
    protect = [] if storage.is_uri(trace) else [Path(trace)]
    try:
        with result_dir(out if staging is None else staging / "results", force=force, protect=protect) as writer:
            _write_results(writer, spool, reported, latency_parts, recovery, events, configs, counts, manifest,
                           rows, started, phases, merge_rows(series))
        if staging is not None:  # finished locally, then copied to the store, manifest last
            storage.publish_dir(staging / "results", str(out))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _write_results(writer: Any, spool: str, reported: list[tuple[int, str]],
                   latency_parts: dict[str, list[dict[str, Any]]], recovery: list[dict[str, Any]],
                   events: dict[str, int], configs: list[RunConfig], counts: dict[str, dict[str, int]],
                   manifest: dict[str, Any], rows: int, started: float, phases: dict[str, float],
                   series: list[dict[str, Any]]) -> None:
    for kind, schema, write in (("delivery", DELIVERY_SCHEMA, writer.deliveries_table),
                                ("txn", TXN_SCHEMA, writer.txns_table)):
        fs, parts = _row_parts(spool, kind, reported)
        for part in parts:
            pf = pq.ParquetFile(part, filesystem=fs, pre_buffer=False)  # streamed, as parquet_stream
            for batch in pf.iter_batches(100_000, columns=schema.names):
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
    write_metrics(writer.dir, manifest["runs"], counts, latency, {}, [series])
    writer.finish(counts=counts, latency=latency, recovery=recovery, manifest=manifest)
