"""Replay a trace through one or more engine configurations into one result directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from bench.config import RunConfig
from bench.replay import Replayer, RunResult
from bench.output import check_out, shown_path
from bench.results import ResultWriter, result_dir
from bench.trace import read_events, trace_metadata, validate

Progress = Callable[[str, int, int], None]  # (label, done, total)


def replay_trace(trace: str | Path, configs: list[RunConfig], out: str | Path,
                 progress: Progress | None = None, extra_manifest: dict[str, Any] | None = None, *,
                 force: bool = False, shown: dict[str, str] | None = None) -> dict[str, Any]:
    """Validate ``trace`` whole, then replay it once per config; write one result directory
    (:func:`bench.results.result_dir`: an existing non-empty ``out`` only with ``force``).
    ``shown`` maps a staging directory to the path the results will have (for the manifest).
    Returns the manifest."""
    check_out(out, force=force)
    rows = validate(trace)  # a bad trace is refused before anything is written
    meta = trace_metadata(trace)
    manifest: dict[str, Any] = {
        "trace": {"path": shown_path(trace, shown), "rows": rows, **meta},
        "seed": meta.get("seed"),
        "runs": {},
        **(extra_manifest or {}),
    }
    with result_dir(out, force=force, protect=[Path(trace)]) as writer:
        results: list[tuple[RunConfig, RunResult]] = []
        for cfg in configs:
            replayer = Replayer(cfg, delivery_sink=writer.deliveries, txn_sink=writer.txns)
            tick = (lambda n, label=cfg.label: progress(label, n, rows)) if progress else None
            results.append((cfg, replayer.run(read_events(trace, validated=True), progress=tick)))
            if progress:
                progress(cfg.label, rows, rows)
        finish_results(writer, results, manifest)
    return manifest


def finish_results(writer: ResultWriter, results: list[tuple[RunConfig, RunResult]], manifest: dict[str, Any],
                   extra_run: Callable[[RunResult], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write the rest of a result directory from finished runs (their last deliveries, counts,
    latency, recovery, txns) and one manifest entry per run; ``extra_run`` adds fields to it."""
    counts: dict[str, dict[str, int]] = {}
    latency: dict[str, Any] = {}
    recovery: list[dict[str, Any]] = []
    for cfg, result in results:
        writer.deliveries(result.deliveries)
        counts[result.label] = result.counts
        latency[result.label] = result.latency
        recovery.extend(result.recovery)
        writer.txns(result.txns)
        manifest["runs"][result.label] = {
            "config": cfg.as_dict(),
            "events": result.events,
            "wall_seconds": round(result.wall_seconds, 3),
            "events_per_second": round(result.events / result.wall_seconds) if result.wall_seconds else None,
            "peak_rss_mb": result.peak_rss_mb,  # the process's peak so far (runs go one after another)
            "virtual_end_us": result.virtual_end_us,
            "time_mode": cfg.time_mode,
            # did the run end quiescent? (bench.replay.Replayer.in_flight; the CLI exits 1 if not)
            "drain": {"ran_ms": result.drained_us // 1000, "in_flight": result.in_flight,
                      "quiescent": not any(result.in_flight.values())},
            **(extra_run(result) if extra_run else {}),
        }
    manifest["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    writer.finish(counts=counts, latency=latency, recovery=recovery, manifest=manifest)
    return manifest


def not_quiescent(manifest: dict[str, Any]) -> list[str]:
    """One line per run that ended with messages undelivered or committed txns not visible."""
    lines = []
    for label, run in manifest.get("runs", {}).items():
        drain = run.get("drain") or {}
        if drain and not drain.get("quiescent", True):
            f = drain.get("in_flight", {})
            lines.append(f"{label}: not quiescent after draining {drain.get('ran_ms')} ms: "
                         f"{f.get('undelivered', 0)} messages undelivered, {f.get('committed_not_visible', 0)} "
                         f"committed txns not visible, {f.get('ending_txns', 0)} txns still ending" + (" (results are incomplete; raise --drain-max-ms)"
                                                           if run.get("time_mode") == "wall" else
                                                           " (the model never delivers them: lost to the consumers)"))
    return lines


def check_trace(trace: str | Path, configs: list[RunConfig],
                report: Callable[[str], None] | None = None) -> Any:
    """Replay ``trace`` through each config with a full history and check it
    (:mod:`bench.checker`); returns the :class:`~bench.checker.CheckSummary`."""
    from bench.checker import CheckSummary, History, check

    validate(trace)
    summary = CheckSummary()
    for cfg in configs:
        history = History()
        Replayer(cfg, history=history).run(read_events(trace, validated=True))
        violations = check(history)
        summary.add(history, violations)
        if report is not None:
            report(f"{cfg.label}: {len(history.deliveries)} deliveries, {len(violations)} violations")
    return summary
