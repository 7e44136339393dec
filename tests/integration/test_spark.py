"""Spark batch replay gives the same results as the in-process replay of the same trace."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.config import RunConfig
from bench.runner import replay_trace
from bench.spark import spark_replay
from bench.workloads import generate, load_profile

pytestmark = pytest.mark.spark


def _deliveries(path: Path) -> list[tuple]:  # type: ignore[type-arg]
    t = pq.read_table(path / "deliveries.parquet").to_pydict()
    return sorted(zip(t["engine"], t["topic"], t["subscription"], t["msg"], t["delivered_ts_us"]))


def test_spark_replay_matches_in_process_replay(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("nontxn"), 600, 5, trace)
    configs = [RunConfig(engine="none")]
    replay_trace(trace, configs, tmp_path / "local")
    manifest = spark_replay(trace, configs, tmp_path / "spark", master="local[2]", shards=2)
    assert manifest["spark"]["shards"] == 2
    local = json.loads((tmp_path / "local" / "counts.json").read_text())
    spark = json.loads((tmp_path / "spark" / "counts.json").read_text())
    assert spark == local
    assert _deliveries(tmp_path / "spark") == _deliveries(tmp_path / "local")
