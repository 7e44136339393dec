"""Issue 20: ``scripts/redis.sh stop`` and ``scripts/kafka.sh stop`` kill only the service they
started, not whatever process now has the pid file's PID."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


SERVICES = [("redis.sh", "redis.pid", {"url": "redis://127.0.0.1:1\n"}),
            ("kafka.sh", "kafka.pid", {"port": "1\n", "server.properties": ""})]


def _stop(home: Path, script: str, pidfile: str, extra: dict[str, str], pid: int) -> subprocess.CompletedProcess[str]:
    """``script stop home`` with ``pid`` in its pid file (and the files it reads beside it)."""
    (home / pidfile).write_text(f"{pid}\n")
    for name, text in extra.items():
        (home / name).write_text(text)
    return subprocess.run([str(SCRIPTS / script), "stop", str(home)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("script, pidfile, extra", SERVICES)
def test_stop_refuses_a_pid_that_is_not_its_service(tmp_path: Path, script: str, pidfile: str, extra: dict[str, str]) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        done = _stop(tmp_path, script, pidfile, extra, bystander.pid)
        assert done.returncode != 0 and "not stopping pid" in done.stderr, done.stderr
        assert bystander.poll() is None  # still running
        assert not (tmp_path / pidfile).exists()  # the stale pid file is gone
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("script, pidfile, extra", SERVICES)
def test_stop_of_a_service_that_is_exiting_succeeds(tmp_path: Path, script: str, pidfile: str,
                                                    extra: dict[str, str]) -> None:
    """A SIGKILLed JVM tears its threads down for a while and then shows as "[java] <defunct>", no
    longer the command line stop checks: a process that exits within 2 s is taken as stopped (a
    restart then starts the service), and nothing is killed."""
    exiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        done = _stop(tmp_path, script, pidfile, extra, exiting.pid)
        assert done.returncode == 0, done.stderr
        assert exiting.wait(timeout=5) == 0  # it ended by itself: not killed
        assert not (tmp_path / pidfile).exists()
    finally:
        exiting.kill()
        exiting.wait()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_redis_stop_still_stops_its_own_server(tmp_path: Path) -> None:
    url = subprocess.run([str(SCRIPTS / "redis.sh"), "start", str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    pid = int((tmp_path / "redis.pid").read_text())
    assert url.startswith("redis://127.0.0.1:")
    subprocess.run([str(SCRIPTS / "redis.sh"), "stop", str(tmp_path)], check=True, timeout=60)
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_a_free_port_is_below_the_kernels_ephemeral_range() -> None:
    """The services' ports are picked below the ephemeral range, where no socket bound to port 0
    (the standalone's own bookie took a picked web port once) can take them before the service
    binds; each is free when picked."""
    import socket

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    out = subprocess.run(["bash", "-c", f"source {SCRIPTS / 'lib' / 'service.sh'}; for i in $(seq 20); do free_port; done"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert len(out) == 20
    for port in map(int, out):
        assert 1024 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
