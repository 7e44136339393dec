"""Spark beyond ``local[N]``: a standalone master and one worker started on loopback from the
pyspark distribution itself (``$SPARK_HOME`` is the pyspark package: ``bin/spark-class`` runs the
master and worker classes; the pip package has no ``sbin/start-master.sh``). A replay through
``--spark spark://127.0.0.1:PORT`` runs its shard tasks in the worker's executor, a separate JVM
with its own Python workers, and gives the same results as the in-process replay. Traces and
result directories are given as ``file://`` URIs, as a cluster's shared storage would be."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest

from bench.replay.config import RunConfig
from bench.replay.runner import replay_trace
from bench.scale.spark import spark_replay
from bench.trace.workloads import generate, load_profile

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0  # a master and a worker JVM on a loaded 2-core machine
# After this the driver's jobs are cancelled and the daemons stopped: a replay still waiting on
# the cluster (say, for an executor that never came) fails instead of hanging the suite.
REPLAY_TIMEOUT_S = float(os.environ.get("TXNBENCH_SPARK_CLUSTER_TIMEOUT_S", "420"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark  # a dependency: its wheel ships the launcher a standalone cluster runs

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        pytest.fail(f"no bin/spark-class in {home}: the pyspark install is incomplete")
    return home


def _alive_workers(webui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def _stop(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    try:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
    except ProcessLookupError:  # already gone (the watchdog and the teardown both stop it)
        pass


@pytest.fixture
def standalone_master(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a running master with one registered 1-core worker."""
    home = _spark_home()
    port, webui, worker_ui = _free_port(), _free_port(), _free_port()
    logs = tmp_path / "spark-logs"
    logs.mkdir()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(logs),
               SPARK_WORKER_DIR=str(tmp_path / "spark-work"), PYSPARK_PYTHON=sys.executable,
               # executors import this worktree's code (a cluster's workers have txnbench installed)
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []  # type: ignore[type-arg]

    def start(name: str, *args: str) -> None:
        with (logs / f"{name}.out").open("wb") as out:
            procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))

    def stop_all() -> None:
        for p in reversed(procs):
            _stop(p)

    master = f"spark://127.0.0.1:{port}"
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(webui))
        start("worker", "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
              "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
              "--work-dir", str(tmp_path / "spark-work"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while _alive_workers(webui) < 1:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tails = "\n".join(f.read_text()[-2000:] for f in sorted(logs.glob("*.out")))
                pytest.fail(f"standalone master/worker not up within {START_TIMEOUT_S:.0f} s:\n{tails}")
            time.sleep(0.5)
        monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # the driver, for the executor to call back
        monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
        def give_up() -> None:
            from pyspark import SparkContext

            try:
                sc = SparkContext._active_spark_context
                if sc is not None:
                    sc.cancelAllJobs()
            except Exception:  # noqa: BLE001 - a context still starting: stopping the daemons is enough
                pass
            finally:
                stop_all()

        watchdog = threading.Timer(REPLAY_TIMEOUT_S, give_up)
        watchdog.daemon = True
        watchdog.start()
        try:
            yield master
        finally:
            watchdog.cancel()
    finally:
        stop_all()


def _rows(path: Path, name: str) -> list[tuple]:  # type: ignore[type-arg]
    t = pq.read_table(path / name).to_pydict()
    return sorted(zip(*t.values()), key=repr)


def test_standalone_cluster_replay_matches_in_process_replay(tmp_path: Path, standalone_master: str) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 1500, 11, trace)
    configs = [RunConfig(engine="v4"), RunConfig(engine="v5")]
    replay_trace(trace, configs, tmp_path / "local")
    seen: list[tuple[str, int, int]] = []
    manifest = spark_replay(trace.as_uri(), configs, (tmp_path / "cluster").as_uri(),
                            master=standalone_master, shards=2,
                            progress=lambda label, done, total: seen.append((label, done, total)))
    rows = pq.ParquetFile(trace).metadata.num_rows
    assert seen[-2:] == [(c.label, rows, rows) for c in configs]  # bars end full, once done
    assert not [p for p in tmp_path.iterdir() if ".spool-" in p.name]  # the spool beside --out is gone
    assert manifest["spark"]["master"] == standalone_master
    # the shard tasks ran in an executor the worker launched, not in the driver
    assert list((tmp_path / "spark-work").glob("app-*/*/stderr"))
    assert manifest["spark"]["shards"] == 2
    local, cluster = tmp_path / "local", tmp_path / "cluster"
    assert _rows(cluster, "deliveries.parquet") == _rows(local, "deliveries.parquet")
    assert _rows(cluster, "txns.parquet") == _rows(local, "txns.parquet")
    counts_local = json.loads((local / "counts.json").read_text())
    counts_cluster = json.loads((cluster / "counts.json").read_text())
    assert counts_cluster.keys() == counts_local.keys()
    # each shard has its own v5 coordinator, whose sweeps query the indexes on their own
    sweeps = {"tc.index_queries", "meta.index_queries", "billed.meta.list"}
    for label in counts_local:
        assert {k: v for k, v in counts_cluster[label].items() if k not in sweeps} == \
            {k: v for k, v in counts_local[label].items() if k not in sweeps}, label
    assert counts_cluster[configs[0].label] == counts_local[configs[0].label]  # v4: every count exact
    runs = json.loads((cluster / "manifest.json").read_text())["runs"]
    assert sum(r["events"] for r in runs.values()) > 0
