"""The streaming replay's per-event logic without a broker: records in, measurements out, and the
same delivery counts as an in-process replay of the same trace."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.stream.stream import (END, StreamReplay, bootstrap, decode_event, default_configs, encode_event, load_trace,
                          trace_records)
from bench.trace.trace import read_events, validate
from bench.trace.workloads import generate, load_profile
from engine.errors import BackendUnavailable, ConfigError, TraceError


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stream") / "small.parquet"
    generate(load_profile("small"), 300, 1, path)
    return path


def _feed(replay: StreamReplay, records: list[dict]) -> list[list[dict]]:
    async def go() -> list[list[dict]]:
        return [await replay.handle(r) for r in records]

    return asyncio.run(go())


def test_records_round_trip(trace: Path) -> None:
    for e in read_events(trace):
        assert decode_event(encode_event(e)) == e


def test_handler_matches_in_process_replay(trace: Path) -> None:
    rows = validate(trace)
    records = list(trace_records(trace, rows))
    assert records[0]["kind"] == "start" and records[-1] == {"kind": END, "rows": rows}
    replay = StreamReplay(default_configs(drain_ms=300))
    out = _feed(replay, records)
    assert replay.finished and replay.events == rows
    measured = [m for ms in out for m in ms]
    assert len(measured) == 2 * rows
    assert {m["engine"] for m in measured} == {"v4", "v5-shipped"}
    assert all(m["lag_us"] >= 0 and m["apply_us"] >= 0 for m in measured)
    expected = Replayer(RunConfig(engine="v4")).run(read_events(trace)).counts["deliveries"]
    assert expected > 0
    for result in replay.results:
        assert result.events == rows
        assert result.counts["deliveries"] == expected, result.label
        assert len(result.deliveries["msg"]) == expected
        assert replay.summary(result.label)["deliveries"] == expected
        assert replay.summary(result.label)["final"] is True


def test_refuses_records_out_of_place(trace: Path) -> None:
    records = list(trace_records(trace, validate(trace)))
    with pytest.raises(TraceError, match="header"):
        _feed(StreamReplay(default_configs()), records[1:2])
    replay = StreamReplay(default_configs(drain_ms=0))
    with pytest.raises(TraceError, match="expected row 0"):
        _feed(replay, [records[0], records[2]])
    replay.close()
    replay = StreamReplay(default_configs(drain_ms=0))
    with pytest.raises(TraceError, match="ended after 1 events"):
        _feed(replay, [records[0], records[1], records[-1]])
    replay.close()


def test_bad_trace_refused_before_kafka(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    # the URL is never contacted: validation comes first
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        load_trace(bad, "kafka://127.0.0.1:1", "t")


def test_urls() -> None:
    assert bootstrap("kafka://h:1,k:2") == "h:1,k:2"
    with pytest.raises(ConfigError):
        bootstrap("redis://h:1")


def test_unreachable_kafka(trace: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"kafka://127.0.0.1:{port}"
    with pytest.raises(BackendUnavailable, match=f"kafka at {url} is unreachable"):
        load_trace(trace, url, "t")
