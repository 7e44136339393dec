"""Issue 19's last goal: on real services the engines deliver, decide and count what they do on the
embedded backends, on every sample trace (virtual time: the same latencies too). v5 as shipped
on Redis against the in-process store; v4 on Kafka against the in-process ledgers.

Counts that are the backend's own are left out: round trips, and ``tc.log_trimmed_entries`` /
``tc.recovery_entries_replayed`` on Kafka, whose ledgers trim entry by entry where the in-process
ones drop whole ledgers (``KafkaManagedLedger.trims_whole_ledgers``): fewer coordinator-log
entries are left to replay after a crash, which changes no delivery, outcome or latency.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.replay.config import RunConfig
from bench.replay.runner import replay_trace

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "datasets" / "samples").glob("*.parquet"))
BACKEND_COUNTS = ("meta.round_trips", "ledger.round_trips")
KAFKA_TRIMS = ("tc.log_trimmed_entries", "tc.recovery_entries_replayed")


def _results(cfg: RunConfig, trace: Path, out: Path, own: tuple[str, ...]) -> dict[str, Any]:
    replay_trace(trace, [cfg], out)
    tables = {}
    for name in ("deliveries", "txns"):
        df = pd.read_parquet(out / f"{name}.parquet").drop(columns=["engine"])
        tables[name] = df.sort_values(list(df.columns)).reset_index(drop=True)
    [counts] = json.loads((out / "counts.json").read_text()).values()
    [latency] = json.loads((out / "latency.json").read_text()).values()
    return {"tables": tables, "counts": {k: v for k, v in counts.items() if not k.startswith(own)},
            "latency": latency}


def _same(real: dict[str, Any], embedded: dict[str, Any]) -> None:
    for name in ("deliveries", "txns"):
        pd.testing.assert_frame_equal(real["tables"][name], embedded["tables"][name])
    assert real["counts"] == embedded["counts"]
    assert real["latency"] == embedded["latency"]


@pytest.mark.redis
@pytest.mark.parametrize("trace", SAMPLES, ids=lambda p: p.stem)
def test_v5_on_redis_matches_the_embedded_store(trace: Path, redis_url: str, tmp_path: Path) -> None:
    embedded = _results(RunConfig(engine="v5"), trace, tmp_path / "memory", BACKEND_COUNTS)
    _same(_results(RunConfig(engine="v5", metadata_url=redis_url), trace, tmp_path / "redis", BACKEND_COUNTS), embedded)


@pytest.mark.kafka
@pytest.mark.parametrize("trace", SAMPLES, ids=lambda p: p.stem)
def test_v4_on_kafka_matches_the_embedded_ledgers(trace: Path, kafka_url: str, tmp_path: Path) -> None:
    own = BACKEND_COUNTS + KAFKA_TRIMS
    embedded = _results(RunConfig(engine="v4"), trace, tmp_path / "memory", own)
    _same(_results(RunConfig(engine="v4", ledger_url=kafka_url), trace, tmp_path / "kafka", own), embedded)
