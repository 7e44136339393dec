from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.cli import main
from bench.replay.output import MARKER
from bench.replay.results import DELIVERY_SCHEMA, FILES, TXN_SCHEMA


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "trace.parquet"
    code, out, _ = run(capsys, "generate", "--profile", "nontxn", "--events", "400", "--seed", "3", "--out", str(path))
    assert code == 0 and "wrote" in out
    return path


def test_replay_writes_the_result_contract_and_report_renders_it(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    code, out, err = run(capsys, "replay", "--trace", str(trace), "--engine", "none", "--out", str(res), "--no-progress")
    assert code == 0, err
    assert sorted(p.name for p in res.iterdir()) == sorted([*FILES, MARKER])  # MARKER: what txnbench wrote there
    assert pq.read_schema(res / "deliveries.parquet").remove_metadata() == DELIVERY_SCHEMA
    assert pq.read_schema(res / "txns.parquet").remove_metadata() == TXN_SCHEMA
    manifest = json.loads((res / "manifest.json").read_text())
    assert manifest["seed"] == "3" and manifest["runs"]["none"]["config"]["dispatch"] == "polling"
    counts = json.loads((res / "counts.json").read_text())["none"]
    assert counts["deliveries"] == pq.read_metadata(res / "deliveries.parquet").num_rows > 0
    latency = json.loads((res / "latency.json").read_text())["none"]
    assert latency["dispatch_nontxn_us"]["count"] > 0

    rep = tmp_path / "rep"
    code, out, err = run(capsys, "report", "--results", str(res), str(res), "--out", str(rep))
    assert code == 0, err
    names = {p.name for p in rep.iterdir()}
    assert {"report.html", "report.md", "summary.json", "cdf_dispatch_nontxn.png"} <= names
    summary = json.loads((rep / "summary.json").read_text())
    assert summary["comparisons"][0]["comparable"] and summary["comparisons"][0]["changes"] == []
    assert "dispatch_nontxn_us p99" in (rep / "report.md").read_text()


def test_results_differing_in_one_option_are_compared_with_that_option_as_the_factor(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for mode in ("polling", "notify"):
        assert run(capsys, "replay", "--trace", str(trace), "--engine", "none", "--dispatch", mode,
                   "--out", str(tmp_path / mode), "--no-progress")[0] == 0
    assert run(capsys, "report", "--results", str(tmp_path / "polling"), str(tmp_path / "notify"), "--out", str(tmp_path / "rep"))[0] == 0
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    (comp,) = summary["comparisons"]
    assert comp["comparable"] is True and comp["rows_compared"] > 0
    assert comp["factor"] == ["dispatch: polling → notify"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "--trace", "{tmp}/absent.parquet", "--engine", "none", "--out", "{tmp}/out"], "no such trace file"),
        (["replay", "--trace", "{trace}", "--engine", "none", "--ledger", "bogus://x", "--out", "{tmp}/out"], "unknown ledger URL 'bogus://x'"),
        (["report", "--results", "{tmp}", "--out", "{tmp}/out"], "not a txnbench result directory"),
        (["generate", "--profile", "nope", "--events", "10", "--out", "{tmp}/out/t.parquet"], "unknown profile 'nope'"),
        (["replay", "--trace", "{trace}", "--engine", "v5", "--v5-option", "retention_ms=soon", "--out", "{tmp}/out"],
         "--v5-option retention_ms='soon': expected an integer"),
        (["replay", "--trace", "{trace}", "--engine", "v5", "--v5-option", "retention_ms=-1", "--out", "{tmp}/out"],
         "retention_ms must be >= 0"),
        (["replay", "--trace", "{trace}", "--engine", "v4", "--v4-option", "bogus=1", "--out", "{tmp}/out"],
         "unknown v4 option(s) bogus"),
        (["replay", "--trace", "{trace}", "--engine", "v5", "--v5-option", "variant=events", "--out", "{tmp}/out"],
         "use --v5-variant"),
        (["replay", "--trace", "{trace}", "--engine", "v4", "--v4-option", "snapshot_max_txn_count", "--out", "{tmp}/out"],
         "expected KEY=VALUE"),
    ],
)
def test_user_errors_are_one_line_exit_2_and_write_nothing(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], message: str) -> None:
    argv = [a.format(tmp=tmp_path, trace=trace) for a in args]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_malformed_trace_leaves_no_result_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.trace.trace import TraceWriter

    bad = tmp_path / "bad.parquet"
    with TraceWriter(bad) as w:
        w.add(0, "subscribe", topic="persistent://a/b/c", subscription="s")
        w.add(5, "publish", topic="persistent://a/b/c", msg="m", size=1)
        w.add(3, "publish", topic="persistent://a/b/c", msg="n", size=1)
    code, _, err = run(capsys, "replay", "--trace", str(bad), "--engine", "none", "--out", str(tmp_path / "out"))
    assert code == 2 and "row 2: ts_us goes backwards" in err
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["bad.parquet"]


def test_demo_prints_deliveries_and_counters(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--messages", "6", "--dispatch", "notify")
    assert code == 0
    assert "split topic://public/demo/events" in out
    assert "received 6 messages" in out and "dispatch.entries_dispatched      12" in out


def test_engine_options_reach_the_engine_and_the_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.parquet"
    assert run(capsys, "generate", "--profile", "small", "--events", "2000", "--seed", "1", "--out", str(trace))[0] == 0
    snapshots = {}
    for every in ("1000", "5"):
        res = tmp_path / f"res-{every}"
        code, _, err = run(capsys, "replay", "--trace", str(trace), "--engine", "both", "--out", str(res), "--no-progress",
                           "--v4-option", f"snapshot_max_txn_count={every}", "--v5-option", "retention_ms=1000")
        assert code == 0, err
        manifest = json.loads((res / "manifest.json").read_text())
        assert manifest["runs"]["v4"]["config"]["options"] == {"snapshot_max_txn_count": int(every)}
        # the variant and GC mode are v5 options too (RunConfig.options), the defaults unless given
        assert manifest["runs"]["v5-shipped"]["config"]["options"] == {"variant": "shipped", "gc": "repair",
                                                                      "retention_ms": 1000}
        snapshots[every] = json.loads((res / "counts.json").read_text())["v4"].get("tb.snapshot_writes.by_count", 0)
    assert snapshots["5"] > snapshots["1000"]


def test_spark_alone_means_every_local_core() -> None:
    from bench.cli import build_parser

    parse = build_parser().parse_args
    base = ["replay", "--trace", "t.parquet", "--engine", "v4", "--out", "o"]
    assert parse([*base, "--spark"]).spark == "local[*]"
    assert parse([*base, "--spark", "local[2]"]).spark == "local[2]"
    assert parse(base).spark is None
