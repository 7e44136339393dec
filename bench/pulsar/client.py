"""Starts the JVM trace client (``jvm/PROTOCOL.md``), feeds it, and hands its events over.

The class path comes from ``scripts/pulsar.sh client-cp`` (which compiles the program when its
sources changed). On a ``crash`` event the broker is restarted with ``scripts/pulsar.sh restart
DIR`` (its data kept) and the program told to resume. Exit 2 (a refused row) and 3 (a fatal
error) become one-line errors; the program's stderr goes to a log file whose last lines the
error quotes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.errors import BackendUnavailable, ConfigError, TraceError
from bench.pulsar.target import PulsarTarget

ROOT = Path(__file__).resolve().parents[2]
PULSAR_SH = ROOT / "scripts" / "pulsar.sh"
MAIN_CLASS = "txnbench.client.TraceClient"
# The trace client's JVM. It shares the machine's cores with the broker it measures, so its JIT
# is kept to C1: with C2 a fresh client compiled for 4.0-5.8 s of CPU over a paced run of 25-40 s
# (its warm-up included), with C1 for 1.1-1.5 s. On one broker, runs alternated, the broker's
# new-txn p99 on omb-slow-2000 was 18.6-60.9 ms (v5) and 11.6-22.4 (v4) with C2, 11.5-11.8 and
# 6.8 with C1 (2026-11-27; datasets/validation/README.md, "The trace client's own JIT").
JVM_OPTIONS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# Pulsar client warnings in the program's log that tell of trouble its events do not name, by the
# run's count key. An out-of-order receipt (a producer's later send acknowledged first): the client
# closes its connection on it (ProducerImpl.ackReceived), failing every op in flight there with
# ConnectException; seen 8-20 ms after a topic's TopicTransactionBuffer flushed the txn publishes
# it held during its first snapshot (2026-11-27, datasets/validation/README.md)
LOG_WARNINGS = {"Got ack for msg with unexpected sequence id": "client_warnings.out_of_order_receipt"}


def log_warnings(log: Path, namespaces: Iterable[str]) -> dict[str, int]:
    """Per :data:`LOG_WARNINGS` count key, the program log's warnings of that kind on a topic of
    ``namespaces`` (the measured rows'; a warm-up's run in a namespace of their own); keys
    without one are left out, as is a log that is missing."""
    marks = [f"://{ns}/" for ns in namespaces]
    out: dict[str, int] = {}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        for text, key in LOG_WARNINGS.items():
            if text in line and any(m in line for m in marks):
                out[key] = out.get(key, 0) + 1
    return out


def _script(*args: str, timeout: float = 600) -> str:
    if not PULSAR_SH.is_file():
        raise ConfigError(f"{PULSAR_SH} is missing: the Pulsar target needs the project's scripts/pulsar.sh")
    try:
        done = subprocess.run([str(PULSAR_SH), *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"scripts/pulsar.sh {' '.join(args)} took more than {timeout:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        raise BackendUnavailable(f"scripts/pulsar.sh {' '.join(args)} failed: {last}")
    return done.stdout


def class_path() -> str:
    out = _script("client-cp").strip().splitlines()
    if not out:
        raise ConfigError("scripts/pulsar.sh client-cp printed no class path")
    return out[-1]


def restart_broker(directory: Path) -> None:
    _script("restart", str(directory))


def fresh_broker(directory: Path | None) -> None:
    """Stop the broker ``scripts/pulsar.sh`` started from ``directory``, wipe its data and start it
    again on the same ports (every topic, ledger and metadata record of earlier runs gone)."""
    _script("fresh", str(require_broker_dir(directory)))


def require_broker_dir(directory: Path | None) -> Path:
    """``--fresh-broker``'s DIR, or the one refusal (``validate`` and ``calibrate`` alike)."""
    if directory is None:
        raise ConfigError("--fresh-broker needs the broker's scripts/pulsar.sh DIR (--pulsar-dir or "
                          "$TXNBENCH_PULSAR_DIR): only a broker that script started is restarted with its data wiped")
    return directory


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def run_client(target: PulsarTarget, design: str, rows: Path, workdir: Path,
               on_event: Callable[[dict[str, Any]], None], *, source: str,
               java: str = "java", extra_args: tuple[str, ...] = (), warm_up_rows: Path | None = None,
               on_warmed: Callable[[], None] = lambda: None) -> int:
    """Run the rows in ``rows`` through the broker; call ``on_event`` with each event in the order
    read. With ``warm_up_rows`` the program first runs those unreported, then ``on_warmed`` is
    called before it is told to go on (jvm/PROTOCOL.md, "Warm-up"). Returns the program's exit
    code (0) or raises: a refused row is a TraceError naming ``source`` and the row, a fatal error
    BackendUnavailable."""
    cmd = [java, *JVM_OPTIONS, "-cp", class_path(), MAIN_CLASS,
           "--service-url", target.service_url, "--admin-url", target.admin_url, "--design", design,
           "--rows", str(rows), "--pacing", target.pacing, "--drain-ms", str(target.drain_ms),
           "--quiet-ms", str(target.quiet_ms),
           *(("--warm-up-rows", str(warm_up_rows)) if warm_up_rows is not None else ()), *extra_args]
    log = workdir / f"client-{design}.log"
    refused: dict[str, Any] | None = None
    fatal: str | None = None
    with log.open("w") as err, (workdir / f"events-{design}.jsonl").open("w") as kept:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for line in proc.stdout:
                line = line.strip()
                if not line:
                    continue
                kept.write(line + "\n")  # the raw events, kept beside the result
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    fatal = f"the trace client wrote a line that is not JSON: {line[:200]!r}"
                    break
                kind = ev.get("ev")
                if kind == "refused":
                    refused = ev
                    continue
                if kind == "error":
                    fatal = str(ev.get("message"))
                    continue
                if kind == "warmed":  # the warm-up's rows are done: the measured ones wait for "go"
                    on_warmed()
                    proc.stdin.write(json.dumps({"cmd": "go"}) + "\n")
                    proc.stdin.flush()
                    continue
                on_event(ev)
                if kind == "crash":
                    if target.pulsar_dir is None:  # rows.refusal refuses such traces first
                        fatal = "crash_broker with no broker directory to restart"
                        break
                    restart_broker(target.pulsar_dir)
                    proc.stdin.write(json.dumps({"cmd": "resume"}) + "\n")
                    proc.stdin.flush()
        except BaseException:  # a failed restart, an interrupt: leave no client running
            proc.kill()
            raise
        finally:
            if fatal is not None and proc.poll() is None:
                proc.kill()
            try:
                proc.stdin.close()
            except OSError:
                pass
            code = proc.wait()
    if refused is not None or code == 2:
        row = refused.get("row") if refused else None
        reason = refused.get("reason") if refused else _tail(log) or "refused"
        raise TraceError(f"the Pulsar trace client refused it: {reason}", row=row, source=source)
    if fatal is not None or code != 0:
        why = fatal or _tail(log) or f"exit code {code}"
        raise BackendUnavailable(f"Pulsar trace client ({design}) against {target.service_url} failed: {why}")
    return code
