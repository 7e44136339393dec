"""``txnbench stream`` against a real Kafka broker: load a trace, run the Faust app to the end
marker, and check the result directory against an in-process replay of the same trace."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.report.report import build_report
from bench.stream.stream import default_configs, load_trace
from bench.stream.stream_app import run_stream
from bench.trace.trace import read_events
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError, TraceError

pytestmark = [pytest.mark.kafka, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _topic() -> str:
    return f"txnbench-stream-test-{uuid.uuid4().hex[:10]}"


def test_stream_run_matches_replay_and_reports(kafka_url: str, tmp_path: Path) -> None:
    trace = tmp_path / "small.parquet"
    generate(load_profile("small"), 300, 1, trace)
    topic = _topic()
    rows = load_trace(trace, kafka_url, topic)
    with pytest.raises(ConfigError, match="already exists"):
        load_trace(trace, kafka_url, topic)

    out = tmp_path / "results"
    manifest = run_stream(kafka_url, out, default_configs(drain_ms=500), topic=topic, timeout_s=60)

    assert manifest["stream"]["events"] == rows
    assert set(manifest["runs"]) == {"v4", "v5-shipped"}
    expected = Replayer(RunConfig(engine="v4")).run(read_events(trace)).counts["deliveries"]
    counts = json.loads((out / "counts.json").read_text())
    for label in ("v4", "v5-shipped"):
        assert counts[label]["deliveries"] == expected, label
        assert counts[label]["events.publish"] > 0
        assert manifest["runs"][label]["time_mode"] == "wall"
    import pyarrow.parquet as pq

    deliveries = pq.read_table(out / "deliveries.parquet").to_pydict()
    assert sorted(set(deliveries["engine"])) == ["v4", "v5-shipped"]
    assert len(deliveries["msg"]) == 2 * expected

    report = build_report([out], tmp_path / "report")
    assert report.is_file()
    assert "v5-shipped" in (tmp_path / "report" / "report.md").read_text()


def test_bad_trace_produces_nothing(kafka_url: str, tmp_path: Path) -> None:
    trace = tmp_path / "bad.parquet"
    generate(load_profile("small"), 50, 1, trace)
    import pyarrow.parquet as pq

    table = pq.read_table(trace)
    ops = table.column("op").to_pylist()
    ops[3] = "explode"
    import pyarrow as pa

    pq.write_table(table.set_column(1, "op", pa.array(ops, pa.string())), trace)
    topic = _topic()
    with pytest.raises(TraceError, match="row 3"):
        load_trace(trace, kafka_url, topic)
    with pytest.raises(ConfigError, match=f"no trace topic {topic}"):
        run_stream(kafka_url, tmp_path / "out", topic=topic)
    assert not (tmp_path / "out").exists()


def test_stream_cli_load_then_run(kafka_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    trace = tmp_path / "small.parquet"
    generate(load_profile("small"), 200, 2, trace)
    topic = _topic()
    assert main(["stream", "load", "--trace", str(trace), "--kafka", kafka_url, "--topic", topic]) == 0
    assert f"into {topic}" in capsys.readouterr().out
    out = tmp_path / "results"
    assert main(["stream", "run", "--kafka", kafka_url, "--topic", topic, "--out", str(out), "--no-progress",
                 "--drain-ms", "500", "--timeout", "60"]) == 0
    printed = capsys.readouterr().out
    assert "streamed" in printed and f"results in {out}" in printed
    counts = json.loads((out / "counts.json").read_text())
    assert set(counts) == {"v4", "v5-shipped"}
    expected = Replayer(RunConfig(engine="v4")).run(read_events(trace)).counts["deliveries"]
    assert counts["v4"]["deliveries"] == counts["v5-shipped"]["deliveries"] == expected

    # user mistakes: one line on stderr, exit 2, nothing written
    assert main(["stream", "run", "--kafka", kafka_url, "--topic", topic, "--out", str(tmp_path / "v"),
                 "--time", "virtual"]) == 2
    assert main(["stream", "run", "--kafka", "kafka://127.0.0.1:1", "--topic", topic, "--out", str(tmp_path / "u"),
                 "--timeout", "20"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("txnbench")]
    assert len(errors) == 2 and "wall time only" in errors[0] and "127.0.0.1:1" in errors[1], errors
    assert not (tmp_path / "v").exists() and not (tmp_path / "u").exists()
