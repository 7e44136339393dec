"""Spark batch replay gives the same results as the in-process replay of the same trace."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.replay.config import RunConfig
from bench.replay.runner import replay_trace
from bench.scale.spark import spark_replay
from bench.trace.workloads import generate, load_profile
from engine.errors import TraceError

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


def _txns(path: Path) -> list[tuple]:  # type: ignore[type-arg]
    t = pq.read_table(path / "txns.parquet").to_pydict()
    return sorted(zip(*t.values()), key=repr)


def test_spark_replay_of_both_engines_matches_in_process_replay(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 3000, 11, trace)
    configs = [RunConfig(engine="v4"), RunConfig(engine="v5")]
    replay_trace(trace, configs, tmp_path / "local")
    seen: list[tuple[str, int, int]] = []
    spark_replay(trace, configs, tmp_path / "spark", master="local[2]", shards=2,
                 progress=lambda label, done, total: seen.append((label, done, total)))
    rows = pq.ParquetFile(trace).metadata.num_rows
    assert seen[-2:] == [("v4", rows, rows), ("v5-shipped", rows, rows)]  # bars end full, once done
    assert all(done < total for _, done, total in seen[:-2])
    assert _deliveries(tmp_path / "spark") == _deliveries(tmp_path / "local")
    assert _txns(tmp_path / "spark") == _txns(tmp_path / "local")
    local = json.loads((tmp_path / "local" / "counts.json").read_text())
    spark = json.loads((tmp_path / "spark" / "counts.json").read_text())
    assert spark["v4"] == local["v4"]
    # each shard has its own v5 coordinator, whose sweeps query the indexes on their own
    sweeps = {"tc.index_queries", "meta.index_queries", "billed.meta.list"}
    assert {k: v for k, v in spark["v5-shipped"].items() if k not in sweeps} == \
        {k: v for k, v in local["v5-shipped"].items() if k not in sweeps}
    lat_local = json.loads((tmp_path / "local" / "latency.json").read_text())
    lat_spark = json.loads((tmp_path / "spark" / "latency.json").read_text())
    for label in lat_local:
        for name, s in lat_local[label].items():
            assert {k: v for k, v in lat_spark[label][name].items() if k != "hdr"} == \
                {k: v for k, v in s.items() if k != "hdr"}, (label, name)
    # the shards' per-second series merge into the in-process one (same windows, sums, percentiles)
    series = {}
    for where in ("local", "spark"):
        t = pq.read_table(tmp_path / where / "timeseries.parquet").to_pylist()
        series[where] = sorted(t, key=lambda r: (r["engine"], r["window_start_us"]))
    assert series["spark"] == series["local"] and len(series["local"]) > 2


def test_spark_refuses_a_bad_trace_by_row_and_writes_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 2000, 11, trace)
    table = pq.read_table(trace)
    cols = table.to_pydict()
    bad = 1500
    cols["op"][bad], cols["msg"][bad], cols["subscription"][bad] = "ack", "ghost", "s"
    cols["topic"][bad] = cols["topic"][bad] or next(t for t in cols["topic"] if t)
    pq.write_table(pa.table(cols, schema=table.schema), trace)
    with pytest.raises(TraceError, match=f"row {bad}: ack of unknown msg 'ghost'"):
        spark_replay(trace, [RunConfig(engine="v4")], tmp_path / "out", master="local[2]", shards=2)
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
