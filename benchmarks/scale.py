"""The main job's performance figures, measured side by side in one run (a command, not a test)::

    .venv/bin/python -m benchmarks.scale --out txnbench-out/scale            # about 20 minutes
    .venv/bin/python -m benchmarks.scale --out txnbench-out/scale --quick    # 200k/2M only

It generates OMB-shaped traces (``omb-1-topic-16-partitions-1kb``, cached in ``--traces``) and
runs each step as its own ``txnbench`` process, so every peak RSS belongs to that step alone:

1. in-process virtual-time replay speed per engine (one core), on the small trace;
2. peak RSS of in-process replays of the small and the middle trace (bounded memory);
3. Spark ``local[1]`` against ``local[2]`` on the middle trace (scaling);
4. Spark ``local[2]`` on the big trace (10M events by default), with per-task peak RSS.

Writes ``scale.json`` and ``scale.md`` (each figure with the command that produced it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROFILE = "omb-1-topic-16-partitions-1kb"
ENGINES = {"v4": ["--engine", "v4"], "v5-watch": ["--engine", "v5"],
           "v5-events": ["--engine", "v5", "--v5-variant", "events"]}


def _txnbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def _run(cmd: list[str]) -> float:
    print("$", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - started, 1)


def _trace(traces: Path, events: int) -> Path:
    path = traces / f"{PROFILE}-{events}.parquet"
    if not path.is_file():
        _run(_txnbench("generate", "--profile", PROFILE, "--events", str(events), "--seed", "1", "--out", str(path)))
    return path


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="txnbench-out/scale")
    p.add_argument("--traces", default="txnbench-out/traces")
    p.add_argument("--small", type=int, default=200_000)
    p.add_argument("--middle", type=int, default=2_000_000)
    p.add_argument("--big", type=int, default=10_000_000)
    p.add_argument("--quick", action="store_true", help="skip the big Spark run")
    args = p.parse_args(argv)
    out, traces = Path(args.out), Path(args.traces)
    out.mkdir(parents=True, exist_ok=True)
    traces.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    small, middle = _trace(traces, args.small), _trace(traces, args.middle)
    figures: dict[str, Any] = {"profile": PROFILE, "cpus": os.cpu_count(), "speed": {}, "memory": {}, "spark": {}}
    commands: dict[str, str] = {}

    for label, opts in ENGINES.items():  # 1. speed
        res = out / f"speed-{label}"
        cmd = _txnbench("replay", "--trace", str(small), "--out", str(res), "--no-progress", *opts)
        _run(cmd)
        run = _manifest(res)["runs"][label]
        figures["speed"][label] = {"events": run["events"], "wall_seconds": run["wall_seconds"],
                                   "events_per_second": run["events_per_second"]}
        commands[f"speed {label}"] = " ".join(["txnbench", *cmd[3:]])

    for trace, events in ((small, args.small), (middle, args.middle)):  # 2. memory
        for label in ("v4", "v5-watch"):
            res = out / f"memory-{label}-{events}"
            cmd = _txnbench("replay", "--trace", str(trace), "--out", str(res), "--no-progress", *ENGINES[label])
            _run(cmd)
            figures["memory"].setdefault(label, {})[str(events)] = _manifest(res)["runs"][label]["peak_rss_mb"]
            commands[f"memory {label} {events}"] = " ".join(["txnbench", *cmd[3:]])

    runs = [("local[1]", middle, args.middle), ("local[2]", middle, args.middle)]
    if not args.quick:
        runs.append(("local[2]", _trace(traces, args.big), args.big))
    for master, trace, events in runs:  # 3. and 4. Spark
        res = out / f"spark-{master.strip('local[]')}-{events}"
        cmd = _txnbench("replay", "--trace", str(trace), "--engine", "both", "--out", str(res), "--no-progress",
                        "--spark", master)
        wall = _run(cmd)
        s = _manifest(res)["spark"]
        figures["spark"][f"{master} {events}"] = {
            "events": events, "command_seconds": wall, "spark_seconds": s["wall_seconds"], "shards": s["shards"],
            "task_peak_rss_mb": s["task_peak_rss_mb"], "driver_peak_rss_mb": s["driver_peak_rss_mb"]}
        commands[f"spark {master} {events}"] = " ".join(["txnbench", *cmd[3:]])
    one, two = figures["spark"][f"local[1] {args.middle}"], figures["spark"][f"local[2] {args.middle}"]
    figures["spark"]["scaling_2_vs_1"] = round(one["command_seconds"] / two["command_seconds"], 2)
    figures["commands"] = commands
    (out / "scale.json").write_text(json.dumps(figures, indent=2) + "\n")
    (out / "scale.md").write_text(_markdown(figures))
    print((out / "scale.md").read_text())
    return 0


def _markdown(f: dict[str, Any]) -> str:
    lines = [f"# txnbench scale figures ({f['profile']}, {f['cpus']} CPUs)", "",
             "| engine | events | wall s | events/s (one core) |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | {v['events']:,} | {v['wall_seconds']} | {v['events_per_second']:,} |" for k, v in f["speed"].items()]
    sizes = sorted({int(n) for v in f["memory"].values() for n in v})
    lines += ["", "| engine | " + " | ".join(f"peak RSS MB at {n:,} events" for n in sizes) + " |",
              "| --- |" + " --- |" * len(sizes)]
    lines += [f"| {k} | " + " | ".join(str(v.get(str(n), "–")) for n in sizes) + " |" for k, v in f["memory"].items()]
    lines += ["", "| Spark run | command s | Spark s | shards | task peak RSS MB | driver peak RSS MB |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {k} | {v['command_seconds']} | {v['spark_seconds']} | {v['shards']} | {v['task_peak_rss_mb']} | "
              f"{v['driver_peak_rss_mb']} |" for k, v in f["spark"].items() if isinstance(v, dict)]
    lines += ["", f"Scaling, local[2] against local[1] on the same trace: **{f['spark']['scaling_2_vs_1']}x**.", "",
              "Commands:", ""] + [f"- {k}: `{v}`" for k, v in f["commands"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
