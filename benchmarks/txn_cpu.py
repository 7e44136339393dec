"""What a txn's topics and their subscriptions cost a Pulsar broker's CPU: the evidence for where
the cores fit should put v4's per-topic time (``bench/calibrate/rates_fit.py``, issue 17)::

    .venv/bin/python -m benchmarks.txn_cpu --pulsar-dir DIR [--design v4] [--units 150] [--every-ms 20] [--rounds 3] [--warm-up 1]

With the broker of ``scripts/pulsar.sh start DIR`` running, it writes small traces: every 20 ms
(``--every-ms``) a unit, either a txn that publishes one message to each of K topics and commits, or the same K sends
without a txn; on each topic S subscriptions, each with a consumer (the trace client's). It
replays each through the broker at the trace's pace (``txnbench replay --target ... --pacing
trace``, one design) while reading, every 20 ms, each broker thread's CPU time (with
``benchmarks.broker_cpu``'s sampler). It counts the CPU over the run's ops, from the first one
issued to the last answered or the last delivery, with the broker's JIT compiler threads apart.

The configurations (K, S, txn or plain) go in turn, round after round; the first ``--warm-up``
rounds are discarded. It prints each one's median over the rounds, and the marginal costs
they give, each per unit of what it adds:

- a txn's first topic: txns over 1 topic against empty txns;
- each further topic: 8 topics against 1;
- a txn topic's first subscription, and each further one;
- a plain message delivered to a subscription.

The broker's idle work (its timers) is in every configuration alike, so it cancels out of the
differences. The trace client is a JVM started for each run, so its CPU is not counted here.
Run it on a broker warmed up by a few runs, nothing else running. Not part of the tests.

A broker's cost per op falls with its load: at 20 ms apart each op pays its threads' wake-ups
and its own flushes and journal syncs, which a loaded broker shares among the ops that arrive
together. ``--every-ms 4`` (units overlapping) comes closer to the saturated runs the cores'
fit is made from; on one broker it gave a txn's first topic 560 µs against 1,133 at 20 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from bench.pulsar.cpu import txn_phase
from bench.trace.trace import TraceWriter
from benchmarks.broker_cpu import CLIENT, sample
from benchmarks.broker_threads import ROOT, running_broker

UNIT_EVERY_US = 20_000
OPS = ("new_txn", "publish", "commit")


@dataclass(frozen=True)
class Config:
    topics: int
    subscriptions: int
    txn: bool = True

    @property
    def name(self) -> str:
        return f"{'txns' if self.txn else 'plain sends'} over {self.topics} topics, {self.subscriptions} subscriptions each"


CONFIGS = (Config(0, 0), Config(1, 0), Config(8, 0), Config(8, 1), Config(8, 4),
           Config(8, 0, txn=False), Config(8, 4, txn=False))


def write_trace(config: Config, units: int, path: Path, every_us: int = UNIT_EVERY_US) -> Path:
    """``units`` units of ``config``, one every ``every_us`` (a txn's sends 5 ms after it opens,
    100 µs apart, its commit 12 ms after it opens: closer units overlap), after its subscriptions."""
    topic = [f"persistent://public/bench/q{k}-partition-0" for k in range(config.topics)]
    out = TraceWriter(path)
    for k in range(config.topics):
        for s in range(config.subscriptions):
            out.add(0, "subscribe", topic=topic[k], subscription=f"s{s}")
    rows: list[tuple[int, str, dict[str, Any]]] = []
    for j in range(units):
        t0 = 500_000 + j * every_us
        txn = f"t{j}" if config.txn else None
        if txn is not None:
            rows.append((t0, "new_txn", {"txn": txn, "timeout_ms": 60_000}))
        for k in range(config.topics):
            rows.append((t0 + 5_000 + 100 * k, "publish",
                         {"txn": txn, "topic": topic[k], "msg": f"m{j}-{k}", "size": 100, "key": "k"}))
        if txn is not None:
            rows.append((t0 + 12_000, "commit", {"txn": txn}))
    for ts, op, fields in sorted(rows, key=lambda r: r[0]):  # stable: overlapping units interleave in time
        out.add(ts, op, **fields)
    return out.close()


def ops_span(events: Iterable[dict[str, Any]]) -> tuple[float, float]:
    """From the first op issued to the last answered or the last delivery, whichever is later, in
    epoch milliseconds (the trace client's events): units close together leave a backlog that the
    subscriptions are still delivering after the last send is answered."""
    span = txn_phase(events, OPS, OPS, deliveries=True)
    if span is None:
        raise SystemExit("txn_cpu: the run's events hold no ready line or no op")
    return span


def measure(config: Config, units: int, design: str, pid: str, url: str, admin: str,
            every_us: int = UNIT_EVERY_US) -> tuple[float, float]:
    """The broker's CPU seconds over one run's ops: (without its JIT compiler threads, theirs)."""
    series: list[tuple[float, dict[str, float]]] = []
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="txnbench-txn-cpu-") as tmp:
        trace = write_trace(config, units, Path(tmp) / "trace.parquet", every_us)
        sampler = threading.Thread(target=sample, args=(pid, series, stop), daemon=True)
        sampler.start()
        try:
            subprocess.run([str(ROOT / "scripts" / "txnbench"), "replay", "--trace", str(trace), "--engine", design,
                            "--target", url, "--admin-url", admin, "--pacing", "trace", "--out", f"{tmp}/run",
                            "--no-progress", "--force"], check=True, stdout=subprocess.DEVNULL)
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"txn_cpu: the replay of {config.name} through {url} failed (exit {e.returncode})")
        finally:
            stop.set()
            sampler.join()
        lines = Path(f"{tmp}/run/pulsar-events-{design}.jsonl").read_text().splitlines()
    lo, hi = ops_span(json.loads(line) for line in lines)
    inside = [c for t, c in series if lo <= t <= hi]
    if len(inside) < 2:
        raise SystemExit(f"txn_cpu: too few CPU samples over the run of {config.name} ({len(inside)})")
    first, last = inside[0], inside[-1]
    # the broker's threads (the sampler also reads the client's and the machine's)
    used = {n: s - first.get(n, 0.0) for n, s in last.items() if not n.startswith((" ", CLIENT))}
    jit = sum(s for n, s in used.items() if "Compiler" in n)
    return sum(used.values()) - jit, jit


def marginals(ms: dict[Config, float], units: int) -> list[tuple[str, float]]:
    """The costs the configurations' medians give, in µs per unit of what each adds."""
    def per(more: Config, less: Config, count: int) -> float:
        return 1000 * (ms[more] - ms[less]) / count
    out = [("a txn's first topic (per txn)", per(Config(1, 0), Config(0, 0), units)),
           ("each further topic of a txn", per(Config(8, 0), Config(1, 0), units * 7)),
           ("a txn topic's first subscription (per topic and txn)", per(Config(8, 1), Config(8, 0), units * 8)),
           ("each further subscription (per topic and txn)", per(Config(8, 4), Config(8, 1), units * 8 * 3))]
    plain0, plain4 = Config(8, 0, txn=False), Config(8, 4, txn=False)
    out.append(("a plain message delivered to a subscription", per(plain4, plain0, units * 8 * 4)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.txn_cpu", description=__doc__.split("\n")[0])
    ap.add_argument("--pulsar-dir", required=True, type=Path, help="the broker's scripts/pulsar.sh DIR (running)")
    ap.add_argument("--design", choices=("v4", "v5"), default="v4")
    ap.add_argument("--units", type=int, default=150, help="units per run (default 150)")
    ap.add_argument("--every-ms", type=float, default=UNIT_EVERY_US / 1000, help="one unit every this many ms (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds of every configuration (default 3)")
    ap.add_argument("--warm-up", type=int, default=1, help="rounds run first and discarded (default 1)")
    args = ap.parse_args(argv)
    every_us = round(1000 * args.every_ms)
    if args.units < 1 or args.rounds < 1 or args.warm_up < 0 or every_us < 1:
        ap.error("--units and --rounds need at least 1, --warm-up at least 0, --every-ms more than 0")
    pid, url, admin = running_broker(args.pulsar_dir, "txn_cpu")
    runs: dict[Config, list[float]] = {c: [] for c in CONFIGS}
    for r in range(args.warm_up + args.rounds):
        for config in CONFIGS:
            cpu, jit = measure(config, args.units, args.design, pid, url, admin, every_us)
            kept = r >= args.warm_up
            if kept:
                runs[config].append(cpu)
            print(f"round {r + 1}{'' if kept else ' (warm-up)'}: {config.name}: broker {1000 * cpu:.0f} ms "
                  f"(its JIT {1000 * jit:.0f} ms)", flush=True)
    ms = {c: 1000 * statistics.median(v) for c, v in runs.items()}
    print(f"\n{args.design}, {args.units} units, one every {every_us / 1000:g} ms; broker CPU without its JIT, "
          f"median of {args.rounds} rounds:")
    for c in CONFIGS:
        print(f"  {ms[c]:7.0f} ms  {c.name}")
    for what, us in marginals(ms, args.units):
        print(f"  {us:7.0f} µs  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
