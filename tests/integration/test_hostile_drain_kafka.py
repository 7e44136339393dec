"""Issue 20: v4 on Kafka with the default drain ended with messages undelivered and committed
txns not visible, exit 0. Now the manifest records whether the run ended quiescent (the CLI
exits 1 if not, tests/unit/test_hostile_drain.py), and the default wall-time drain waits for
in-flight work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_v4_on_kafka_ends_quiescent_with_the_default_drain(kafka_url: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.parquet"
    assert main(["generate", "--profile", "small", "--events", "600", "--out", str(trace)]) == 0
    code = main(["replay", "--trace", str(trace), "--engine", "v4", "--ledger", kafka_url, "--no-progress",
                 "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    run = json.loads((tmp_path / "out" / "manifest.json").read_text())["runs"]["v4"]
    assert run["time_mode"] == "wall" and run["config"]["drain_max_ms"] == 60_000
    assert run["drain"]["quiescent"] and not any(run["drain"]["in_flight"].values())
