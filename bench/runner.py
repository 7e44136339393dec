"""Replay a trace through one or more engine configurations into one result directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from bench.config import RunConfig
from bench.replay import Replayer, RunResult
from bench.results import result_dir
from bench.trace import read_events, trace_metadata, validate

Progress = Callable[[str, int, int], None]  # (label, done, total)


def replay_trace(trace: str | Path, configs: list[RunConfig], out: str | Path,
                 progress: Progress | None = None, extra_manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validate ``trace`` whole, then replay it once per config; write one result directory.
    Returns the manifest."""
    rows = validate(trace)  # a bad trace is refused before anything is written
    meta = trace_metadata(trace)
    manifest: dict[str, Any] = {
        "trace": {"path": str(trace), "rows": rows, **meta},
        "seed": meta.get("seed"),
        "runs": {},
        **(extra_manifest or {}),
    }
    counts: dict[str, dict[str, int]] = {}
    latency: dict[str, Any] = {}
    recovery: list[dict[str, Any]] = []
    txns: dict[str, list[Any]] = {}
    with result_dir(out) as writer:
        for cfg in configs:
            replayer = Replayer(cfg, delivery_sink=writer.deliveries)
            tick = (lambda n, label=cfg.label: progress(label, n, rows)) if progress else None
            result: RunResult = replayer.run(read_events(trace), progress=tick)
            if progress:
                progress(cfg.label, rows, rows)
            writer.deliveries(result.deliveries)
            counts[cfg.label] = result.counts
            latency[cfg.label] = result.latency
            recovery.extend(result.recovery)
            for k, v in result.txns.items():
                txns.setdefault(k, []).extend(v)
            manifest["runs"][cfg.label] = {
                "config": cfg.as_dict(),
                "events": result.events,
                "wall_seconds": round(result.wall_seconds, 3),
                "events_per_second": round(result.events / result.wall_seconds) if result.wall_seconds else None,
                "virtual_end_us": result.virtual_end_us,
                "time_mode": cfg.time_mode,
            }
        manifest["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        writer.finish(txns=txns, counts=counts, latency=latency, recovery=recovery, manifest=manifest)
    return manifest
