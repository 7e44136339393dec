"""benchmarks.gap_cores: who held the cores in each gap, from a perf script of the scheduler's
events, on a hand-made recording whose every interval is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gap_cores

OFFSET_S = 0.5  # epoch - the recording's clock
T0_MS = 1000.0  # the client's t0, epoch ms: the recording's clock reads T0 - OFFSET there
BASE_US = T0_MS * 1000 - OFFSET_S * 1e6  # 500,000 µs


def _switch(cpu: int, t_us: float, prev: int, state: str, nxt: int) -> str:
    return (f"{prev} [{cpu:03d}] {t_us / 1e6:.6f}: sched:sched_switch: prev_comm=x prev_pid={prev} prev_prio=120 "
            f"prev_state={state} ==> next_comm=y next_pid={nxt} next_prio=120")


def _wakeup(cpu: int, t_us: float, waker: int, woken: int) -> str:
    return f"{waker} [{cpu:03d}] {t_us / 1e6:.6f}: sched:sched_wakeup: comm=y pid={woken} prio=120 target_cpu={cpu:03d}"


def _sync(tid: int, t_us: float, enter: bool) -> str:
    which = "enter" if enter else "exit"
    return f"{tid} [000] {t_us / 1e6:.6f}: syscalls:sys_{which}_fdatasync: fd: 0x00000001"


IO, IO2, EVENT, WORKER, JIT, JOURNAL, CLIENT = 10, 11, 20, 21, 30, 40, 99
NAMES = {IO: "pulsar-io-24-1", IO2: "pulsar-io-24-2", EVENT: "metadata-store-", WORKER: "metadata-store-",
         JIT: "C2 CompilerThre", JOURNAL: "BookieJournal-3"}


def _recording() -> list[str]:
    b = BASE_US
    return [
        # CPU 0: idle, the JIT, the IO thread (woken 1 ms before it gets the core), idle, the journal
        _switch(0, b + 8_000, JOURNAL, "S", 0),
        _switch(0, b + 9_000, 0, "R", JIT),
        _wakeup(1, b + 10_000, EVENT, IO),
        _switch(0, b + 11_000, JIT, "S", IO),
        _sync(IO, b + 11_500, True), _sync(IO, b + 11_650, False),
        _switch(0, b + 12_000, IO, "S", 0),
        _switch(0, b + 15_000, 0, "R", JOURNAL),
        # CPU 1: idle, the event thread, the client, idle
        _switch(1, b + 9_200, 0, "R", EVENT),
        _sync(EVENT, b + 9_300, True), _sync(EVENT, b + 9_400, False),
        _switch(1, b + 13_000, EVENT, "S", CLIENT),
        _switch(1, b + 13_500, CLIENT, "S", 0),
        _switch(1, b + 16_000, 0, "R", CLIENT),
    ]


def _events() -> list[dict]:
    return [{"ev": "ready", "t0_epoch_ms": T0_MS},
            {"ev": "op", "op": "commit", "ok": True, "start_us": 0, "end_us": 10_000},
            {"ev": "op", "op": "new_txn", "ok": True, "start_us": 2_000, "end_us": 14_000},
            {"ev": "op", "op": "new_txn", "ok": True, "start_us": 11_000, "end_us": 12_000}]  # after it: no gap


def test_each_kind_of_thread_gets_its_time_on_the_cores_within_the_gaps_window() -> None:
    sched = gap_cores.parse(_recording())
    t0, spans = gap_cores.gaps(_events())
    assert (t0, spans) == (T0_MS, [(10_000, 14_000)])
    io, event = gap_cores.thread_of(NAMES, sched, gap_cores.IO), gap_cores.thread_of(NAMES, sched, gap_cores.EVENT)
    assert (io, event) == (IO, EVENT)  # the threads of those names that synced
    lo, hi = BASE_US + 10_000 - 300, BASE_US + 14_000 - 200  # 9,700 .. 13,800 after the base
    got = gap_cores.breakdown(sched, NAMES, io, event, lo, hi)
    assert got["window"] == pytest.approx(4_100)
    assert got["jit"] == pytest.approx(11_000 - 9_700)
    assert got["io_run"] == pytest.approx(12_000 - 11_000)
    assert got["io_runnable"] == pytest.approx(11_000 - 10_000)
    assert got["event"] == pytest.approx(13_000 - 9_700)
    assert got["other_processes"] == pytest.approx(13_500 - 13_000)
    # both CPUs idle at once from 13,500: each CPU's idle task counts
    assert got["idle"] == pytest.approx((13_800 - 12_000) + (13_800 - 13_500))
    assert "broker_rest" not in got  # the journal ran only outside the window


def test_the_cli_prints_one_row_per_gap_and_refuses_a_run_without_its_t0(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    perf, events, threads = tmp_path / "perf.txt", tmp_path / "events.jsonl", tmp_path / "threads"
    perf.write_text("\n".join(_recording()) + "\n")
    events.write_text("".join(json.dumps(e) + "\n" for e in _events()))
    threads.write_text("".join(f"{t} {n}\n" for t, n in NAMES.items()))
    args = ["--perf-script", str(perf), "--events", str(events), "--threads", str(threads),
            "--clock-offset", str(OFFSET_S)]
    assert gap_cores.main(args) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| 4.00")]
    assert rows == ["| 4.00 | 1.30 | 3.30 | 0.50 | 0.00 | 1.00 | 1.00 | 2.10 of 8.20 |"]
    events.write_text(json.dumps(_events()[1]) + "\n")
    assert gap_cores.main(args) == 2
    assert "no 'ready' event" in capsys.readouterr().err
