"""The main job's performance figures, measured side by side in one run (a command, not a test)::

    .venv/bin/python -m benchmarks.scale --out txnbench-out/scale            # about 25 minutes
    .venv/bin/python -m benchmarks.scale --out txnbench-out/scale --quick    # about 5 minutes

It generates OMB-shaped traces (``omb-1-topic-16-partitions-1kb``, cached in ``--traces``) and
runs each step as its own ``txnbench`` process, so every peak RSS belongs to that step alone:

1. in-process virtual-time replay speed per engine (one core) on the small trace, ``--repeats``
   times each (median, min and max: this machine's timings vary by several percent);
2. peak RSS of in-process replays against trace length (small, middle, big, and twice big for
   the bounded ones): v4, v5 with PIP-473's retention (900 s of finished headers stay in the
   store: at this profile's ~110k events per virtual second that is 100M events before GC
   deletes any, so its memory grows over any trace here) and v5 with a 10 s retention (the same
   code once GC keeps up);
3. Spark ``local[1]`` against ``local[2]`` on the big trace (scaling: the fixed costs, JVM start
   and first job, weigh least there), with each run's phases and per-shard replay times;
4. which makes the ``local[2]`` run the 10M-event replay of both engines.

``--quick`` uses 200k/1M/2M (and 4M) events and skips nothing else. Writes ``scale.json`` and ``scale.md``,
each figure with the command that produced it, and the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.replay import registry

PROFILE = "omb-1-topic-16-partitions-1kb"
ENGINES = {v.label: registry.cli_args(name, v) for name, v in registry.variants()}
SHORT_RETENTION = ["--v5-option", "retention_ms=10000", "--v5-option", "gc_sweep_ms=5000"]
# label -> (options, whether it should be flat: then it also runs on a trace twice the big one)
MEMORY = {"v4": (ENGINES["v4"], True), "v5-shipped": (ENGINES["v5-shipped"], False),
          "v5-shipped retention 10 s": (ENGINES["v5-shipped"] + SHORT_RETENTION, True)}


def _txnbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def _shown(cmd: list[str]) -> str:
    return " ".join(["txnbench", *cmd[3:]])


def _run(cmd: list[str]) -> float:
    print("$", _shown(cmd), file=sys.stderr, flush=True)
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


def _machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="txnbench-out/scale")
    p.add_argument("--traces", default="txnbench-out/traces")
    p.add_argument("--small", type=int, default=200_000)
    p.add_argument("--middle", type=int, default=2_000_000)
    p.add_argument("--big", type=int, default=10_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="200k / 1M / 2M events")
    args = p.parse_args(argv)
    if args.quick:
        args.middle, args.big = 1_000_000, 2_000_000
    out, traces = Path(args.out), Path(args.traces)
    out.mkdir(parents=True, exist_ok=True)
    traces.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sizes = (args.small, args.middle, args.big)
    trace = {n: _trace(traces, n) for n in (*sizes, 2 * args.big)}
    figures: dict[str, Any] = {"profile": PROFILE, "machine": _machine(), "speed": {}, "memory": {}, "spark": {}}
    commands: dict[str, str] = {}

    for label, opts in ENGINES.items():  # 1. speed
        rates = []
        for i in range(args.repeats):
            res = out / f"speed-{label}"
            cmd = _txnbench("replay", "--trace", str(trace[args.small]), "--out", str(res), "--no-progress", "--force", *opts)
            _run(cmd)
            rates.append(_manifest(res)["runs"][label]["events_per_second"])
        figures["speed"][label] = {"events": args.small, "median": int(statistics.median(rates)),
                                   "min": min(rates), "max": max(rates), "runs": rates}
        commands[f"speed {label}"] = _shown(cmd)

    for label, (opts, flat) in MEMORY.items():  # 2. memory against trace length
        for n in (*sizes, 2 * args.big) if flat else sizes:
            res = out / f"memory-{label.replace(' ', '-')}-{n}"
            cmd = _txnbench("replay", "--trace", str(trace[n]), "--out", str(res), "--no-progress", "--force", *opts)
            _run(cmd)
            run = next(iter(_manifest(res)["runs"].values()))
            figures["memory"].setdefault(label, {})[str(n)] = run["peak_rss_mb"]
            commands[f"memory {label} {n}"] = _shown(cmd)

    for master in ("local[1]", "local[2]"):  # 3. and 4. Spark, both engines
        res = out / f"spark-{master.strip('local[]')}-{args.big}"
        cmd = _txnbench("replay", "--trace", str(trace[args.big]), "--engine", "both", "--out", str(res),
                        "--no-progress", "--force", "--spark", master)
        wall = _run(cmd)
        s = _manifest(res)["spark"]
        figures["spark"][master] = {
            "events": args.big, "command_seconds": wall, "spark_seconds": s["wall_seconds"], "shards": s["shards"],
            "phases_seconds": s["phases_seconds"], "shard_replay_seconds": s["shard_replay_seconds"],
            "task_peak_rss_mb": s["task_peak_rss_mb"], "driver_peak_rss_mb": s["driver_peak_rss_mb"]}
        commands[f"spark {master} {args.big}"] = _shown(cmd)
    one, two = figures["spark"]["local[1]"], figures["spark"]["local[2]"]
    figures["spark_scaling_2_vs_1"] = round(one["command_seconds"] / two["command_seconds"], 2)
    figures["commands"] = commands
    (out / "scale.json").write_text(json.dumps(figures, indent=2) + "\n")
    (out / "scale.md").write_text(_markdown(figures))
    print((out / "scale.md").read_text())
    return 0


def _markdown(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [f"# txnbench scale figures ({f['profile']})", "",
             f"Machine: {m['cpus']} CPUs ({m['cpu'] or 'unknown model'}), Python {m['python']}, {m['platform']}.", "",
             "In-process virtual-time replay, one core:", "",
             "| engine | events | events/s (median) | min | max |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {k} | {v['events']:,} | {v['median']:,} | {v['min']:,} | {v['max']:,} |" for k, v in f["speed"].items()]
    sizes = sorted({int(n) for v in f["memory"].values() for n in v})
    lines += ["", "Peak RSS of an in-process replay against trace length:", "",
              "| engine | " + " | ".join(f"MB at {n:,} events" for n in sizes) + " |",
              "| --- |" + " --- |" * len(sizes)]
    lines += [f"| {k} | " + " | ".join(str(v.get(str(n), "–")) for n in sizes) + " |" for k, v in f["memory"].items()]
    lines += ["", "Spark replay of both engines (v4 and v5-shipped):", "",
              "| master | events | command s | Spark s | shards | replay phase s | shard replay s (v4 / v5) "
              "| task peak RSS MB | driver peak RSS MB |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k, v in f["spark"].items():
        shards = v["shard_replay_seconds"]
        per = " / ".join(", ".join(str(x) for x in shards.get(e, [])) for e in ("v4", "v5-shipped"))
        lines.append(f"| {k} | {v['events']:,} | {v['command_seconds']} | {v['spark_seconds']} | {v['shards']} | "
                     f"{v['phases_seconds'].get('replay')} | {per} | {v['task_peak_rss_mb']} | {v['driver_peak_rss_mb']} |")
    lines += ["", f"Scaling, local[2] against local[1] on the same trace: **{f['spark_scaling_2_vs_1']}x**.", "",
              "Commands:", ""] + [f"- {k}: `{v}`" for k, v in f["commands"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
