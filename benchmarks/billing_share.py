"""Billing's share of a virtual-time replay, measured directly (issue 17: billing costs at most 10 %)::

    .venv/bin/python -m benchmarks.billing_share                    # small and omb, 100k events each
    .venv/bin/python -m benchmarks.billing_share --events 20000 --traces small

``benchmarks.before_after`` bounds billing's cost from above (its baseline predates billing and
every feature since); this one profiles the working tree's replay loop (cProfile, one run per
engine and trace, ``--latency-profile constants``: no resources, the free bill path) and sums the
own time of the meter's code (``engine/metering.py``, ``metadata_v5/metered.py``) and of the
latency model's draws (``engine/clock.py``: ``of``, ``at``) over the run's total own time. The
profiler slows every call alike, so the share is what counts. Not part of the tests.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
from pathlib import Path

GOAL = 0.10
BILLING_FILES = ("engine/metering.py", "metadata_v5/metered.py")
DRAWS = ("of", "at")  # engine/clock.py: one latency drawn per billed call


def share(trace: Path, engine: str) -> tuple[float, float]:
    """(billing's own seconds, the run's own seconds) under cProfile."""
    from bench.replay.config import RunConfig
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from engine.profile import LatencyProfile

    prof = LatencyProfile.constants()
    events = list(read_events(trace))
    cfg = RunConfig(engine=engine, latency=prof.to_latency_model(1), latency_profile=prof)
    profiler = cProfile.Profile()
    profiler.enable()
    Replayer(cfg).run(iter(events))
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    billing = sum(v[2] for (f, _, fn), v in stats.items()
                  if f.endswith(BILLING_FILES) or (f.endswith("engine/clock.py") and fn in DRAWS))
    return billing, total


def main(argv: list[str] | None = None) -> int:
    from bench.trace.workloads import generate, load_profile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--traces", nargs="+", default=["small", "omb-1-topic-16-partitions-1kb"])
    args = ap.parse_args(argv)
    print(f"billing's own time over the replay's, cProfile, {args.events:,} events per trace (goal <= {GOAL:.0%})")
    with tempfile.TemporaryDirectory(prefix="txnbench-billing-") as tmp:
        for name in args.traces:
            trace = Path(tmp) / f"{name}.parquet"
            generate(load_profile(name), args.events, 1, trace)
            for engine in ("v4", "v5"):
                billing, total = share(trace, engine)
                print(f"{name:<34} {engine}  {billing:6.3f} s of {total:6.3f} s  {billing / total:6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
