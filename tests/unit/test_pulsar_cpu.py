"""Who used the cores over a broker run's txn phase (bench.pulsar.cpu)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.pulsar.cpu import JIT_THREADS, SWEEP_THREAD, CpuSampler, await_sweep_idle, broker_pid, thread_id, txn_phase


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


def _named(name: str, spin_s: float, after_s: float = 0.0) -> subprocess.Popen[bytes]:
    """A process whose one thread is named ``name`` (as a JVM names its threads) ``after_s`` seconds
    after it started, then spins for ``spin_s`` seconds, then idles."""
    code = (f"import time\ntime.sleep({after_s})\nopen('/proc/self/comm', 'w').write({name!r})\n"
            f"end = time.monotonic() + {spin_s}\nwhile time.monotonic() < end: pass\ntime.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while not after_s and thread_id(str(child.pid), name) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # named once it has started
    return child


def test_the_brokers_sweep_thread_is_found_by_its_name_and_its_cores_are_counted() -> None:
    child = _named(SWEEP_THREAD, 600)
    try:
        assert thread_id(str(child.pid), SWEEP_THREAD) == str(child.pid)  # the main thread's id is the pid
        assert thread_id(str(child.pid), "pulsar-io-4-1") is None
        with CpuSampler(str(child.pid)) as cpu:
            time.sleep(0.6)
    finally:
        child.kill()
        child.wait()
    got = cpu.over(cpu.samples[0][0], cpu.samples[-1][0])
    assert got is not None and 0.5 < got["sweep_cores"] <= got["broker_cores"] + 0.05
    # a process without that thread: no sweep figure
    with CpuSampler(str(os.getpid())) as mine:
        time.sleep(0.1)
    assert mine.over(mine.samples[0][0], mine.samples[-1][0])["sweep_cores"] is None  # type: ignore[index]


def test_a_run_waits_for_a_busy_sweep_thread_and_not_for_an_idle_one() -> None:
    # one spinner at a time: on a loaded 2-core machine (the suite runs in two workers) a spinner
    # sharing the cores with another can read as idle for a window while it still has time to spin
    busy = _named(SWEEP_THREAD, 1.2)
    spin_ends = time.monotonic() + 1.2
    idle = _named(SWEEP_THREAD, 0)
    children = [busy, idle]
    try:
        waited = await_sweep_idle(str(busy.pid))
        assert waited is not None and waited > 0.2  # it spun about another second
        time.sleep(max(0.0, spin_ends + 0.1 - time.monotonic()))  # its spin is over, whatever the load
        assert await_sweep_idle(str(busy.pid)) == 0.0  # now idle: no wait
        assert await_sweep_idle(str(idle.pid)) == 0.0
        stuck = _named(SWEEP_THREAD, 600)
        children.append(stuck)
        gave_up = await_sweep_idle(str(stuck.pid), limit_s=0.5)  # still busy at the limit: the run goes ahead
        assert gave_up is not None and gave_up >= 0.5
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert await_sweep_idle(None) is None  # no broker pid
    assert await_sweep_idle(str(os.getpid())) is None  # no sweep thread


def test_the_brokers_jit_compiler_threads_are_counted_also_when_started_later() -> None:
    """HotSpot starts and stops compiler threads as its queue needs: one named after the sampling
    began is found at the next look, and its cores counted from there."""
    now = _named(JIT_THREADS[1], 600)
    later = _named(JIT_THREADS[0], 600, after_s=0.3)
    try:
        with CpuSampler(str(now.pid)) as busy, CpuSampler(str(later.pid)) as starts:
            time.sleep(1.6)
    finally:
        for child in (now, later):
            child.kill()
            child.wait()
    got = busy.over(busy.samples[0][0], busy.samples[-1][0])
    assert got is not None and 0.4 < got["jit_cores"] <= got["broker_cores"] + 0.05
    # the second was named 0.3 s in: counted from the look after it, for most of the 1.6 s
    late = starts.over(starts.samples[0][0], starts.samples[-1][0])
    assert late is not None and starts.samples[0][5] == 0.0 and 0.2 < late["jit_cores"] <= late["broker_cores"] + 0.05
    # a process with no compiler thread: none of its cores; without a broker pid: no JIT figure
    with CpuSampler(str(os.getpid())) as mine, CpuSampler(None) as none:
        time.sleep(0.1)
    assert mine.over(mine.samples[0][0], mine.samples[-1][0])["jit_cores"] == 0.0  # type: ignore[index]
    assert none.over(none.samples[0][0], none.samples[-1][0])["jit_cores"] is None  # type: ignore[index]
