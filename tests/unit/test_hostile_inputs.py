"""Issue 20, bad input: every case the hostile campaign found ends with one line and exit 2,
before work starts, and leaves no ``--out`` behind."""

from __future__ import annotations

import json
import resource
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.cli import main
from bench.trace.trace import MAX_TS_US, LabelSet, TraceWriter, validate
from engine.errors import TraceError


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str, says: str) -> None:
    out = tmp_path / "out"
    code, _, err = run(capsys, *argv, "--out", str(out))
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and says in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def small_trace(path: Path, ts: int = 0, labels: tuple[str, ...] = ("m1",)) -> Path:
    with TraceWriter(path) as w:
        w.add(ts, "subscribe", topic="persistent://a/b/c", subscription="s")
        for i, m in enumerate(labels):
            w.add(ts + i, "publish", topic="persistent://a/b/c", msg=m, size=1)
    return path


# -- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["replay", "--trace", "t", "--drain-ms", "99999999999999"], "--drain-ms"),
    (["replay", "--trace", "t", "--drain-ms", "-1"], "--drain-ms"),
    (["scenarios", "endtxn", "--participants", "0"], "--participants"),
    (["scenarios", "recovery", "--sizes", "-5"], "--sizes"),
    (["scenarios", "polling", "--hold-s", "nan"], "--hold-s"),
    (["scenarios", "polling", "--hold-s", "inf"], "--hold-s"),
    (["scenarios", "endtxn", "--participants", "1000000"], "--participants"),
    (["generate", "--profile", "small", "--events", "10000000000"], "--events"),
    (["compare", "--events", "0"], "--events"),
    (["stream", "run", "--kafka", "kafka://x:1", "--timeout", "nan"], "--timeout"),
])
def test_bad_option_values_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    refused(capsys, tmp_path, *argv, says=says)


def test_demo_messages_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "demo", "--messages", "100000000")
    assert code == 2 and "--messages" in err and err.count("\n") == 1


def test_migrate_with_backends_but_no_topic_refuses_instead_of_running_the_demo(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(capsys, tmp_path, "migrate", "--ledger", "kafka://127.0.0.1:1", "--metadata", "redis://127.0.0.1:1",
            says="--topic is required")


# -- traces ---------------------------------------------------------------------------------------


def test_duplicate_columns_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = pq.read_table(small_trace(tmp_path / "g.parquet"))
    dup = pa.Table.from_arrays([*good.columns, good.column("op")], names=[*good.column_names, "op"])
    pq.write_table(dup, tmp_path / "dup.parquet")
    with pytest.raises(TraceError, match="duplicate columns op"):
        validate(tmp_path / "dup.parquet")
    for verb in ("replay", "check"):
        refused(capsys, tmp_path, verb, "--trace", str(tmp_path / "dup.parquet"), says="duplicate columns op")


@pytest.mark.parametrize("ts", [1_700_000_000_000_000, 2**63 - 1, MAX_TS_US + 1])
def test_timestamps_beyond_the_bound_are_refused_up_front(tmp_path: Path, capsys: pytest.CaptureFixture[str], ts: int) -> None:
    # an epoch-microsecond trace ran v5 for minutes (idle virtual time); 2^63-1 overflowed
    trace = small_trace(tmp_path / "t.parquet", ts=ts)
    refused(capsys, tmp_path, "replay", "--trace", str(trace), "--engine", "v5", says="rebase epoch timestamps")


def test_timestamps_at_the_bound_are_valid(tmp_path: Path) -> None:
    assert validate(small_trace(tmp_path / "t.parquet", ts=MAX_TS_US)) == 2


def test_sparse_labels_take_little_memory(tmp_path: Path) -> None:
    # four rows labelled a999999999..d999999999 took 4 GB (a byte per possible index)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    trace = small_trace(tmp_path / "t.parquet", labels=("a999999999", "b999999999", "c999999999", "d999999999"))
    assert validate(trace) == 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KB: far below 4 GB


def test_label_set_is_exact_for_dense_and_sparse_labels() -> None:
    s = LabelSet()
    labels = [f"m{i}" for i in range(0, 200_000, 7)] + ["m999999999", "x5", "m0", "m12345678"]
    for lab in labels:
        s.add(lab)
    assert all(lab in s for lab in labels)
    assert not any(lab in s for lab in ("m1", "m999999998", "x6", "m12345677", "y0"))


# -- profiles --------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, says", [
    (b"[1, 2]", "JSON object"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"name": "x", "topics": "3"}', "topics must be an integer"),
    (b'{"name": "x", "txn_messages": 5}', "txn_messages must be a list"),
    (b'{"name": "x", "scalable": 1}', "scalable must be true or false"),
    (b'{"name": "x", "rate_per_s": NaN}', "rate_per_s must be a finite number"),
    (b'{"name": "x", "ack_delay_ms": -100}', "ack_delay_ms must be in"),
    (b'{"name": "x", "crash_tc_at_ms": [-1]}', "crash_tc_at_ms"),
    (b'{"name": "x", "topics": 100000000}', "topics x partitions"),
    (b'{"name": "x", "rate_per_s": 0.00001}', "span more than"),
])
@pytest.mark.parametrize("verb", ["generate", "check", "compare"])
def test_bad_profiles_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, says: str,
                                   verb: str) -> None:
    prof = tmp_path / "p.json"
    prof.write_bytes(content)
    extra = ["--events", "100"]
    refused(capsys, tmp_path, verb, "--profile", str(prof), *extra, says=says)


def test_every_shipped_profile_still_loads() -> None:
    from bench.trace.workloads import list_profiles, load_profile

    assert all(load_profile(name).name for name in list_profiles())


# -- result files given to report -----------------------------------------------------------------


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("res")
    trace = d / "t.parquet"
    assert main(["generate", "--profile", "small", "--events", "300", "--out", str(trace)]) == 0
    assert main(["replay", "--trace", str(trace), "--engine", "both", "--drain-ms", "1000", "--no-progress",
                 "--out", str(d / "r")]) == 0
    return d / "r"


@pytest.mark.parametrize("name, content, says", [
    ("manifest.json", "[1, 2]", "expected a JSON object"),
    ("manifest.json", '{"runs": {}}', "no runs"),
    ("manifest.json", '{"runs": {"v4": 3}}', "not an object"),
    ("latency.json", '{"v4": {"end_txn_us": {"count": "x"}}}', "not a latency summary"),
    ("latency.json", '{"v4": {"end_txn_us": {"count": 1, "p50_us": 1, "p99_us": 1, "p99.9_us": 1, "max_us": 1, '
                     '"hdr": "garbage"}}}', "not a latency summary"),
    ("latency.json", '[]', "expected a JSON object"),
    ("counts.json", '{"v4": {"x": "1"}}', "an object of numbers"),
    ("recovery.json", '{"a": 1}', "expected a JSON array"),
    ("counts.json", "\u00ff not json", "not valid JSON"),
    ("../scenarios.json", '{"scenarios": [{"rows": 1}]}', "not a txnbench scenarios.json"),
    ("../check.json", '{"histories": "many"}', "not a txnbench check.json"),
    ("check.json", '[]', "not a txnbench check.json"),
])
def test_malformed_result_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], results: Path,
                                             name: str, content: str, says: str) -> None:
    copy = tmp_path / "sets" / "r"
    shutil.copytree(results, copy)
    (copy / name).write_text(content)
    refused(capsys, tmp_path, "report", "--results", str(copy), says=says)


def test_report_on_good_results_still_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str], results: Path) -> None:
    code, _, err = run(capsys, "report", "--results", str(results), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["result_sets"]



@pytest.mark.parametrize("column", ["msg", "txn", "subscription"])
def test_huge_labels_are_refused_by_row(tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str) -> None:
    from bench.trace.trace import MAX_LABEL

    rows = [dict(ts=0, op="subscribe", topic="persistent://a/b/c", subscription="s"),
            dict(ts=1, op="new_txn", txn="t", timeout_ms=1000),
            dict(ts=2, op="publish", topic="persistent://a/b/c", msg="m", size=1, txn="t"),
            dict(ts=3, op="ack", topic="persistent://a/b/c", msg="m", subscription="s", txn="t")]
    rows[{"msg": 2, "txn": 1, "subscription": 0}[column]][column] = "x" * (MAX_LABEL + 1)
    with TraceWriter(tmp_path / "t.parquet") as w:
        for r in rows:
            w.add(r.pop("ts"), r.pop("op"), **r)
    with pytest.raises(TraceError, match=f"{column} is 1,025 characters long"):
        validate(tmp_path / "t.parquet")
    refused(capsys, tmp_path, "check", "--trace", str(tmp_path / "t.parquet"), says="characters long")
