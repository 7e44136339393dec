"""OpenMessaging Benchmark workload YAML -> profile -> trace (bench.trace.omb, generate --omb-workload)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.cli import main
from bench.trace.omb import DEFAULT_MAX_EVENTS, load_omb_workload, omb_profile
from bench.trace.trace import read_events, trace_metadata, validate
from bench.trace.workloads import generate, load_profile
from engine.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "datasets" / "omb" / "1-topic-16-partitions-1kb.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shipped_workload_is_the_omb_profile_written_as_omb_yaml() -> None:
    # two independent writings of one workload: the YAML (OMB's fields + txnbench:) and the JSON profile
    w = load_omb_workload(SHIPPED)
    ours, theirs = asdict(w.profile), asdict(load_profile("omb-1-topic-16-partitions-1kb"))
    for d in (ours, theirs):
        del d["name"], d["description"]
    assert ours == theirs
    assert w.profile.name == "1 topic / 16 partitions / 1Kb"
    assert w.duration_s == 15 * 60
    assert set(w.ignored) == {"payloadFile", "consumerPerSubscription"}
    assert w.events_bound(None) == DEFAULT_MAX_EVENTS and w.events_bound(300) == 300


def test_omb_fields_map_onto_the_profile() -> None:
    w = omb_profile({"name": "w", "topics": 3, "partitionsPerTopic": 2, "messageSize": 100, "producerRate": 700,
                     "subscriptionsPerTopic": 2, "producersPerTopic": 4, "testDurationMinutes": 1,
                     "keyDistributor": "KEY_ROUND_ROBIN", "warmupDurationMinutes": 1,
                     "txnbench": {"txn_fraction": 0.25, "abort_ratio": 0.5}}, "w.yaml")
    p = w.profile
    assert (p.topics, p.partitions, p.message_size, p.rate_per_s, p.subscriptions) == (3, 2, 100, 700, 2)
    assert p.concurrent_txns == 12  # one open txn per producer: 4 producers on each of 3 topics
    assert (p.txn_fraction, p.abort_ratio) == (0.25, 0.5) and w.duration_s == 60
    assert w.ignored == ("warmupDurationMinutes",)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "w", "topicz": 1}, "w.yaml: unknown OMB workload fields topicz"),
        ({"name": "w", "producerRate": 0}, "producerRate 0 asks OMB to search"),
        ({"name": "w", "consumerBacklogSizeGB": 5}, "consumerBacklogSizeGB > 0"),
        ({"name": "w", "keyDistributor": "SOMETIMES"}, "keyDistributor must be one of NO_KEY"),
        ({"name": "w", "partitionsPerTopic": "many"}, "partitionsPerTopic must be an integer, got 'many'"),
        ({"name": "w", "topics": 0}, "topics must be >= 1"),
        ({"name": "w", "testDurationMinutes": 0}, "testDurationMinutes must be > 0"),
        ({"name": "w", "txnbench": {"txn_fractoin": 0.5}}, "unknown txnbench fields txn_fractoin"),
        ({"name": "w", "txnbench": {"abort_ratio": 3}}, "fractions must be in [0, 1]"),
        ({"topics": 1}, "name must be a non-empty string"),
    ],
)
def test_bad_workloads_are_refused_naming_the_file(data: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as info:
        omb_profile(data, "w.yaml")
    assert message in str(info.value) and str(info.value).startswith("w.yaml: ")


def test_unreadable_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_omb_workload(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping of OMB workload fields, got list"):
        load_omb_workload(bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_omb_workload(tmp_path / "absent.yaml")


def test_the_duration_bounds_the_trace_when_it_ends_first(tmp_path: Path) -> None:
    # 0.01 min at 1000 msg/s: about 600 publishes, far below the row bound
    w = omb_profile({"name": "short", "producerRate": 1000, "testDurationMinutes": 0.01}, "s.yaml")
    out = tmp_path / "s.parquet"
    rows = generate(w.profile, 100_000, 1, out, duration_s=w.duration_s)
    publishes = [e for e in read_events(out) if e.op == "publish"]
    assert rows < 2_000 and 450 < len(publishes) < 750
    assert max(e.ts_us for e in publishes) <= 600_000
    assert trace_metadata(out)["duration_s"] == "0.6"
    # without a duration the same profile runs to the row bound
    assert generate(w.profile, 3_000, 1, tmp_path / "n.parquet") >= 3_000


def test_generate_then_replay_an_omb_workload_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "omb.parquet"
    code, out, err = run(capsys, "generate", "--omb-workload", str(SHIPPED), "--events", "3000", "--out", str(trace))
    assert code == 0, err
    rows = validate(trace)
    assert f"wrote {rows} events" in out and rows >= 3000
    assert "ended by the bound of 3000 rows" in out and "ignored OMB fields" in out
    assert len({e.topic for e in read_events(trace) if e.topic}) == 16
    code, out, err = run(capsys, "replay", "--trace", str(trace), "--engine", "both", "--out", str(tmp_path / "res"),
                         "--no-progress")
    assert code == 0, err
    assert pq.read_table(tmp_path / "res" / "deliveries.parquet").num_rows > 0
    code, _, err = run(capsys, "generate", "--omb-workload", str(SHIPPED), "--profile", "small", "--out", str(trace))
    assert code == 2 and "give one of --profile or --omb-workload" in err
