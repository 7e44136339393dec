"""Bad input through the whole CLI (test_trace.py fuzzes the validator alone): every malformed
trace, bad file and unreachable service ends with one clear line naming the row or the option,
exit code 2, and no output left behind; a trace that validates replays and checks clean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from bench.cli import main
from bench.trace.trace import MAX_TS_US
from tests.unit.test_trace import GOOD, T, row_st, write


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err and ": error: " in err, err


# rows near the valid ones: a good prefix, then one mutated row, so errors come late in the trace.
# Its time stays within 100 s of the start, or just past the bound the validator refuses: a replay
# closes one time-series window per virtual second, so a valid row days later costs minutes of CPU
# (test_trace.py fuzzes the validator over the whole range)
mutated = st.tuples(st.integers(0, len(GOOD)), st.builds(
    lambda row, ts: {**row, "ts_us": ts}, row_st, st.one_of(st.integers(-5, 100_000_000), st.just(MAX_TS_US + 1))))


# draws from a fixed seed (a CI run must not meet a new example; widen the search in the campaign),
# plus pinned examples: crashes that cut off an END_TXN (the client fails it after its 30 s
# operation timeout), a txn left open with a 1 s timeout ahead of a plain message (v5 aborts it
# at its next 60 s timeout sweep, TimeoutSweepIntervalSeconds; then the message is delivered)
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated, st.sampled_from(["replay", "check"]))
@example((7, {"op": "crash_broker", "ts_us": 74_220}), "replay")  # crashes that cut off an END_TXN
@example((5, {"op": "crash_tc", "ts_us": 3}), "replay")
@example((3, {"op": "crash_broker", "ts_us": 2}), "check")
@example((4, {"op": "new_txn", "txn": "t0", "ts_us": 2}), "replay")
def test_a_fuzzed_trace_is_replayed_or_refused_by_row(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                                                      cut: tuple[int, dict], verb: str) -> None:  # type: ignore[type-arg]
    n, row = cut
    tmp = tmp_path_factory.mktemp("fz")
    rows = [dict(r) for r in GOOD[:n]] + [row]
    trace = write(tmp / "t.parquet", rows)
    out = tmp / "out"
    # the PIP's v5: this tests the CLI on any validated trace, and crash rows would otherwise hit the
    # shipped design's crash windows (reads the checker flags, D13/D14), which
    # tests/unit/test_v5_shipped.py asserts as findings. The drain outlasts the client's operation
    # timeout (30 s: an END_TXN a crash cut off has failed at the client by then) and the
    # coordinator's timeout sweep (60 s) after a txn's 1 s timeout
    code, _, err = _run(capsys, verb, "--trace", str(trace), "--engine", "v5", "--v5-variant", "pip", "--out", str(out),
                        "--no-progress", "--drain-ms", "91000")
    if code == 2:
        _one_line_error(err)
        m = re.search(r"row (\d+)", err)
        assert m is not None and int(m.group(1)) < len(rows), err
        assert not out.exists()
    else:
        assert code == 0, err
        assert out.exists()


@pytest.mark.parametrize("content", [b"", b"PAR1", b"not parquet at all" * 10, b"PAR1\x00\x00\x00\x00PAR1"])
@pytest.mark.parametrize("verb", ["replay", "check"])
def test_malformed_files_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, verb: str) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(content)
    code, _, err = _run(capsys, verb, "--trace", str(bad), "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 2
    _one_line_error(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, url", [("--metadata", "redis://127.0.0.1:1"), ("--ledger", "kafka://127.0.0.1:1")])
@pytest.mark.parametrize("verb", ["replay", "check"])
def test_unreachable_services_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, url: str, verb: str) -> None:
    trace = write(tmp_path / "t.parquet", GOOD)
    code, _, err = _run(capsys, verb, "--trace", str(trace), "--engine", "v5" if "metadata" in option else "v4",
                        option, url, "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 2
    _one_line_error(err)
    assert "127.0.0.1:1" in err
    assert not (tmp_path / "out").exists()


def test_check_writes_a_clean_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    # the crash once t1's END_TXN has gone out (it waits for m1's send: jvm TraceRunner.end)
    rows = [dict(r) for r in GOOD[:-1]] + [{"ts_us": 50_000, "op": "crash_broker"},
                                           {"ts_us": 50_001, "op": "publish", "topic": T, "msg": "m3", "size": 1}]
    trace = write(tmp_path / "t.parquet", rows)
    code, out, err = _run(capsys, "check", "--trace", str(trace), "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "check.json").read_text())
    assert summary["histories"] == 2 and summary["total_violations"] == 0
    assert summary["faults"] == {"crash_broker": 2}
    assert "violations: 0" in out
    # the crash 2 us after the commit row, its END_TXN still waiting for m1's answer: the shipped
    # v5's buffer restarts at the LAC and dispatches without a gate (PULSAR5_CODE.md D13), so m1
    # goes out before the commit is sent; v4 keeps it back
    trace = write(tmp_path / "u.parquet", GOOD)
    _run(capsys, "check", "--trace", str(trace), "--out", str(tmp_path / "early"), "--no-progress")
    summary = json.loads((tmp_path / "early" / "check.json").read_text())
    assert summary["violations"]["uncommitted_read"] == summary["total_violations"] == 1
    assert summary["examples"] == ["uncommitted_read: m1 (txn t1) on s: delivered before the commit was requested"]
    _run(capsys, "check", "--trace", str(trace), "--engine", "v4", "--out", str(tmp_path / "v4"), "--no-progress")
    assert json.loads((tmp_path / "v4" / "check.json").read_text())["total_violations"] == 0


def test_a_message_behind_a_txn_left_open_is_blocked_not_lost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the fuzzer: the trace ends with t1 open, so m2 (stored after t1's entry) is
    never dispatched; the checker must not call that a lost write."""
    trace = write(tmp_path / "t.parquet", [dict(r) for r in GOOD[:4]])
    code, out, err = _run(capsys, "check", "--trace", str(trace), "--engine", "both", "--out", str(tmp_path / "o"),
                          "--no-progress", "--drain-ms", "2000")
    assert code == 0, out + err
    assert "violations: 0" in out
