"""Who used the cores over a broker run's txn phase (bench.pulsar.cpu)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.pulsar.cpu import CpuSampler, broker_pid, txn_phase


def test_a_spinning_process_counts_as_about_one_busy_core() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        with CpuSampler(str(child.pid)) as cpu:
            time.sleep(0.6)
    finally:
        child.kill()
        child.wait()
    lo, hi = cpu.samples[0][0], cpu.samples[-1][0]
    got = cpu.over(lo, hi)
    assert got is not None and got["cores"] >= 1 and 400 < got["span_ms"] < 2000
    # one spinning process: most of a core (ticks of 10 ms, a loaded machine: not exactly 1), and
    # the machine was at least that busy
    assert 0.5 < got["broker_cores"] <= 1.05
    assert got["machine_busy_cores"] >= got["broker_cores"] - 0.1
    assert cpu.over(hi + 1, hi + 1000) is None  # no samples inside: nothing to say


def test_without_a_broker_pid_only_the_machine_is_read(tmp_path: Path) -> None:
    with CpuSampler(None) as cpu:
        time.sleep(0.1)
    got = cpu.over(cpu.samples[0][0], cpu.samples[-1][0])
    assert got is not None and got["broker_cores"] is None and got["machine_busy_cores"] >= 0
    assert broker_pid(None) is None and broker_pid(tmp_path) is None  # no pulsar.pid there
    (tmp_path / "pulsar.pid").write_text("999999999\n")  # not a running process
    assert broker_pid(tmp_path) is None
    (tmp_path / "pulsar.pid").write_text(f"{os.getpid()}\n")
    assert broker_pid(tmp_path) == str(os.getpid())


def test_the_txn_phase_runs_from_the_first_new_txn_to_the_last_end() -> None:
    events = [{"ev": "ready", "t0_epoch_ms": 1000},
              {"ev": "op", "op": "publish", "start_us": 0, "end_us": 900},
              {"ev": "op", "op": "new_txn", "start_us": 2000, "end_us": 3000},
              {"ev": "op", "op": "commit", "start_us": 5000, "end_us": 8000},
              {"ev": "op", "op": "abort", "start_us": 6000, "end_us": 7000}]
    assert txn_phase(events) == (1002.0, 1008.0)
    assert txn_phase(events[:2]) is None  # no txn: no phase
