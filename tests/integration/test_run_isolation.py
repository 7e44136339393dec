"""Runs on a shared Redis or Kafka are isolated and cleaned up (issue 20): each run works in its
own namespace (``RunConfig.namespace``: a Redis key prefix, a Kafka ledger-name prefix) and
deletes it when it ends. A run's leftovers (here: a first run whose cleanup is switched off, as
after a kill) must not change what a second run delivers: both give the embedded run's results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import bench.replay.engines
import metadata_v5.spec
from bench.replay.config import RunConfig
from bench.replay.runner import replay_trace

TRACE = Path(__file__).resolve().parents[2] / "datasets" / "samples" / "small.parquet"


def _results(out: Path) -> dict[str, Any]:
    """Deliveries and txn rows in a canonical order, and the counts that do not depend on the
    backend (its own round-trip and storage counters excluded)."""
    tables = {}
    for name in ("deliveries", "txns"):
        df = pd.read_parquet(out / f"{name}.parquet")
        tables[name] = df.sort_values(list(df.columns)).reset_index(drop=True)
    import json

    counts = {run: {k: v for k, v in c.items() if not k.startswith(("meta.", "ledger.", "tc.log_trimmed"))}
              for run, c in json.loads((out / "counts.json").read_text()).items()}
    return {"tables": tables, "counts": counts}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for name in ("deliveries", "txns"):
        pd.testing.assert_frame_equal(a["tables"][name], b["tables"][name])
    assert a["counts"] == b["counts"]


def _replay(cfg: RunConfig, out: Path) -> dict[str, Any]:
    replay_trace(TRACE, [cfg], out)
    return _results(out)


@pytest.mark.redis
def test_two_v5_runs_on_one_redis(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import redis as redislib

    embedded = _replay(RunConfig(engine="v5"), tmp_path / "memory")
    first, second = RunConfig(engine="v5", metadata_url=redis_url), RunConfig(engine="v5", metadata_url=redis_url)
    assert first.namespace != second.namespace and first.namespace.startswith("run-")
    with monkeypatch.context() as m:  # the first run leaves everything behind, as if killed
        m.setattr(metadata_v5.spec, "purge_metadata", lambda url: 0)
        _same(_replay(first, tmp_path / "first"), embedded)
    client = redislib.Redis.from_url(redis_url)
    try:
        assert client.exists(f"txnbench:{first.namespace}:rev")
        _same(_replay(second, tmp_path / "second"), embedded)
        assert not list(client.scan_iter(match=f"txnbench:{second.namespace}:*"))  # cleaned up
        manifest = (tmp_path / "second" / "manifest.json").read_text()
        assert second.namespace in manifest
    finally:
        for key in client.scan_iter(match=f"txnbench:{first.namespace}:*"):
            client.delete(key)
        client.close()


@pytest.mark.redis
def test_a_run_on_redis_through_pulsars_fallbacks_from_a_history_cleans_up_and_matches_the_embedded_one(
        redis_url: str, tmp_path: Path) -> None:
    """The standalone's store (``emulated=1``) on Redis, started from 300 txns of history: the
    same results and the same keys walked as in process (the counters counted on the server),
    and nothing left behind: the purge at close takes the wrapper's flag too."""
    import json

    import redis as redislib

    url = redis_url + ("&" if "?" in redis_url else "?") + "emulated=1"
    embedded = RunConfig(engine="v5", metadata_url="memory://?emulated=1", options={"history": 300})
    remote = RunConfig(engine="v5", metadata_url=url, options={"history": 300})
    _same(_replay(embedded, tmp_path / "memory"), _replay(remote, tmp_path / "redis"))
    walked = [next(iter(json.loads((tmp_path / d / "counts.json").read_text()).values()))["meta.scan_keys"]
              for d in ("memory", "redis")]
    assert walked[0] == walked[1] > 300
    client = redislib.Redis.from_url(redis_url)
    try:
        assert not list(client.scan_iter(match=f"txnbench:{remote.namespace}:*"))
    finally:
        client.close()


@pytest.mark.kafka
def test_two_v4_runs_on_one_kafka(kafka_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.backends import namespaced_ledger_url, open_ledgers, purge_ledgers

    embedded = _replay(RunConfig(engine="v4"), tmp_path / "memory")
    first, second = RunConfig(engine="v4", ledger_url=kafka_url), RunConfig(engine="v4", ledger_url=kafka_url)
    with monkeypatch.context() as m:  # the first run leaves its ledgers behind, as if killed
        m.setattr(bench.replay.engines, "purge_ledgers", lambda ledgers: 0)
        _same(_replay(first, tmp_path / "first"), embedded)
    _same(_replay(second, tmp_path / "second"), embedded)
    left = open_ledgers(namespaced_ledger_url(kafka_url, first.namespace))
    mine = open_ledgers(namespaced_ledger_url(kafka_url, second.namespace))
    try:
        assert left.names("")  # the first run's ledgers are still there ...
        assert mine.names("") == []  # ... the second run's are gone
        purge_ledgers(left)
    finally:
        left.close()
        mine.close()
