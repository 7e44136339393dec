"""Virtual-time replay speed of an earlier revision against the working tree, one run (issue 17)::

    .venv/bin/python -m benchmarks.before_after                       # 356828a vs HEAD, 100k events
    .venv/bin/python -m benchmarks.before_after --events 20000 --repeats 5 --json out.json
    .venv/bin/python -m benchmarks.before_after --rev 726ecab --traces small

What it measures: the replay loop of ``txnbench replay`` ("N events in X s", the events
replayed through one engine, without generating, checking or writing results) for v4 and v5, on
traces generated once by the working tree from the named profiles with seed 1. The baseline is
``--rev`` extracted with ``git archive`` into a temporary directory and run from there with the
same interpreter (``python -m bench replay``: the directory's packages shadow the installed ones).

The default baseline, ``356828a``, is the last commit before billing at the ports: its engines
computed modelled times with formulas, from the constants that ``--latency-profile constants``
now holds, so the working tree runs with that profile and both sides model the same times. The
goal (issue 17): billing costs at most 10 % of replay speed, i.e. ``speed`` (working tree events/s
over the baseline's) at least 0.90 per engine and trace. What else changed between the two
revisions (features added since) is in the ratio too, so it bounds billing's cost from above.

Runs are interleaved (baseline, working tree, baseline, ...) so that both sides see the same
machine; the table gives medians and min..max of ``--repeats`` runs. Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP = re.compile(r"^(?P<label>[\w.-]+): (?P<events>\d+) events in (?P<s>[\d.]+) s", re.M)
GOAL = 0.90


def extract(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (``git archive``) under ``into``."""
    archive = into / "rev.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=out, check=True)
    tree = into / "tree"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def loop_seconds(cwd: Path, args: list[str]) -> float:
    """Seconds of the replay loop, from the run's "N events in X s" line (one engine per run)."""
    proc = subprocess.run([sys.executable, "-m", "bench", "replay", *args, "--force", "--no-progress"],
                          cwd=cwd, capture_output=True, text=True)
    found = LOOP.findall(proc.stdout + proc.stderr)
    if proc.returncode not in (0, 1) or len(found) != 1:  # 1: a run that ends with txns in flight warns
        raise SystemExit(f"before_after: `bench replay {' '.join(args)}` in {cwd} failed "
                         f"(exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return float(found[0][2])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.before_after", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rev", default="356828a", help="baseline revision")
    ap.add_argument("--traces", nargs="+", default=["small", "omb-1-topic-16-partitions-1kb"],
                    help="workload profiles the traces are generated from (datasets/profiles/)")
    ap.add_argument("--events", type=int, default=100_000, help="rows per trace")
    ap.add_argument("--engines", nargs="+", default=["v4", "v5"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="before-after-") as tmp:
        work = Path(tmp)
        base = extract(a.rev, work)
        traces = {}
        for name in a.traces:
            traces[name] = work / f"{name}.parquet"
            subprocess.run([sys.executable, "-m", "bench", "generate", "--profile", name, "--events", str(a.events),
                            "--seed", "1", "--out", str(traces[name])], cwd=ROOT, check=True, capture_output=True)
        times: dict[tuple[str, str, str], list[float]] = {}
        for i in range(a.repeats):
            for name, trace in traces.items():
                for engine in a.engines:
                    common = ["--trace", str(trace), "--engine", engine]
                    times.setdefault((name, engine, "base"), []).append(
                        loop_seconds(base, [*common, "--out", str(work / "out-base")]))
                    times.setdefault((name, engine, "head"), []).append(
                        loop_seconds(ROOT, [*common, "--out", str(work / "out-head"), "--latency-profile", "constants"]))
            print(f"repeat {i + 1}/{a.repeats} done", file=sys.stderr)
    rows = []
    print(f"replay loop, {a.events:,} events per trace; {a.rev} vs working tree (--latency-profile constants); "
          f"median of {a.repeats} (min..max); speed = base time / head time (goal >= {GOAL:.2f})")
    print(f"{'trace':34} {'engine':6} {'base s':>18} {'head s':>18} {'speed':>6}")
    for name in a.traces:
        for engine in a.engines:
            b, h = times[(name, engine, "base")], times[(name, engine, "head")]
            speed = statistics.median(b) / statistics.median(h)
            rows.append({"trace": name, "engine": engine, "events": a.events, "base_s": b, "head_s": h,
                         "speed": round(speed, 3), "meets_goal": speed >= GOAL})
            span = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"
            print(f"{name:34} {engine:6} {span(b):>18} {span(h):>18} {speed:6.3f}")
    if a.json:
        a.json.write_text(json.dumps({"rev": a.rev, "repeats": a.repeats, "goal": GOAL, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
