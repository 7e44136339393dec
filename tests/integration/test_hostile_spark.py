"""Issue 20, Spark: crashes are counted once, the driver listens on loopback only, an
unreachable master is refused in bounded time, and Ctrl-C is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.replay.config import RunConfig
from bench.replay.runner import replay_trace
from bench.scale.spark import spark_replay
from bench.trace.workloads import Profile, generate
from engine.errors import BackendUnavailable
from tests.terminal import popen_with_ctrl_c

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
CRASHY = Profile(name="crashy", topics=4, txn_groups=4, rate_per_s=2_000, crash_broker_at_ms=(300,),
                 crash_tc_at_ms=(600,))


def test_crashes_and_events_are_counted_once_under_spark(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    rows = generate(CRASHY, 3_000, 5, trace)
    configs = [RunConfig(engine="v4", drain_ms=2_000)]
    local = replay_trace(trace, configs, tmp_path / "local")
    spark = spark_replay(trace, configs, tmp_path / "spark", master="local[2]", shards=2)
    counts = {p: json.loads((tmp_path / p / "counts.json").read_text())["v4"] for p in ("local", "spark")}
    for key in ("crashes.broker", "crashes.tc", "events.crash_broker", "events.crash_tc"):
        assert counts["spark"][key] == counts["local"][key] == 1, key
    assert spark["runs"]["v4"]["events"] == local["runs"]["v4"]["events"] == rows


def test_an_unreachable_master_is_refused_quickly(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(CRASHY, 100, 5, trace)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="not reachable"):
        spark_replay(trace, [RunConfig(engine="v4")], tmp_path / "out", master="spark://127.0.0.1:1")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "out").exists()


def _listening_ports(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets ``pid``'s JVM child listens on, from /proc/net/tcp."""
    inodes = set()
    for proc in [pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]:
        for fd in Path(f"/proc/{proc}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                addr, port = f[1].split(":")
                out.add((addr, int(port, 16)))
    return out


def test_the_driver_listens_on_loopback_only_and_ctrl_c_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(CRASHY, 400_000, 5, trace)
    proc = popen_with_ctrl_c([sys.executable, "-m", "bench", "replay", "--trace", str(trace), "--engine", "v4",
                              "--spark", "local[2]", "--no-progress", "--out", str(tmp_path / "out")],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        listening: set[tuple[str, int]] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            listening = _listening_ports(proc.pid)
            if len(listening) >= 2:  # the driver's RPC and block manager ports
                break
            time.sleep(0.5)
        assert listening, "no listening socket found"
        loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
        assert all(addr in loopback for addr, _ in listening), listening
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C at a terminal does: the whole process group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # the JVM's own start-up notice (every Spark 4 run prints it) is not ours to remove
    text = "".join(line for line in err.decode().splitlines(True) if not line.startswith("WARNING: Using incubator modules"))
    assert proc.returncode == 130, text
    assert text.strip().count("\n") == 0 and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_py4j_s_own_logs_of_a_failed_or_interrupted_call_are_dropped() -> None:
    """The root logger's filter for a Spark run: py4j's stack traces of a call that Ctrl-C cut or
    that failed on its connection go (the CLI says one line; a failed call raises all the same),
    every other record stays."""
    import logging

    from bench.scale.spark import _drop_py4j_interrupt

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("root", logging.ERROR, __file__, 1, msg, None, None)

    assert not _drop_py4j_interrupt(record("KeyboardInterrupt while sending command."))
    assert not _drop_py4j_interrupt(record("Exception while sending command."))
    assert _drop_py4j_interrupt(record("txnbench replay: interrupted"))
    assert _drop_py4j_interrupt(record("Exception while receiving a result"))
