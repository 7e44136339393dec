"""Replay a trace through one or more engine configurations into one result directory."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer, RunResult
from bench.replay.output import check_out, shown_path
from bench.replay.results import ResultWriter, result_dir
from bench.replay.openmetrics import LiveServer, live_source
from bench.trace.trace import read_events, trace_metadata, validate
from bench.replay.walltime import refuse_mixed

Progress = Callable[[str, int, int], None]  # (label, done, total)


def replay_trace(trace: str | Path, configs: list[RunConfig], out: str | Path,
                 progress: Progress | None = None, extra_manifest: dict[str, Any] | None = None, *,
                 force: bool = False, shown: dict[str, str] | None = None, prometheus_port: int | None = None,
                 allow_mixed: bool = False, announce: Callable[[str], None] | None = None,
                 publish_spans: bool = False) -> dict[str, Any]:
    """Validate ``trace`` whole, then replay it once per config; write one result directory
    (:func:`bench.replay.results.result_dir`: an existing non-empty ``out`` only with ``force``).
    ``shown`` maps a staging directory to the path the results will have (for the manifest).
    Mixed backends in wall time are refused unless ``allow_mixed`` (:mod:`bench.replay.walltime`);
    ``prometheus_port`` serves the running replays' metrics (:mod:`bench.replay.openmetrics`; its URL
    goes to ``announce``). ``publish_spans``: each publish's issue and answer go to
    ``publishes.parquet`` too (:data:`bench.replay.results.PUBLISH_SCHEMA`). Returns the manifest."""
    check_out(out, force=force)
    mixed = refuse_mixed(configs, allow_mixed)
    rows = validate(trace)  # a bad trace is refused before anything is written
    meta = trace_metadata(trace)
    manifest: dict[str, Any] = {
        "trace": {"path": shown_path(trace, shown), "rows": rows, **meta},
        "seed": meta.get("seed"),
        "runs": {},
        **(extra_manifest or {}),
    }
    if mixed is not None:
        manifest["mixed_backends"] = mixed  # allowed with --allow-mixed: the report's reader is told
    server = LiveServer(prometheus_port) if prometheus_port is not None else None
    if server is not None and announce is not None:
        announce(f"serving metrics on http://127.0.0.1:{server.port}/metrics")
    with result_dir(out, force=force, protect=[Path(trace)]) as writer, _closing(server):
        results: list[tuple[RunConfig, RunResult]] = []
        for cfg in configs:
            replayer = Replayer(cfg, delivery_sink=writer.deliveries, txn_sink=writer.txns,
                                publish_sink=writer.publishes if publish_spans else None)
            if server is not None:
                server.add(live_source(replayer, cfg.engine))
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
            # did the run end quiescent? (bench.replay.replay.Replayer.in_flight; the CLI exits 1 if not)
            "drain": {"ran_ms": result.drained_us // 1000, "in_flight": result.in_flight,
                      "quiescent": not any(result.in_flight.values())},
            **({"rates": result.rates, "max_lag_us": result.rates["max_lag_us"]} if result.rates else {}),
            **(extra_run(result) if extra_run else {}),
        }
    write_metrics(writer.dir, manifest["runs"], counts, latency,
                  {r.label: r.engine_metrics for _, r in results}, [r.series for _, r in results])
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
                         f"committed txns not visible, {f.get('ending_txns', 0)} txns still ending"
                         + (f", {f['unsent']} rows not sent yet" if f.get("unsent") else "") + (" (results are incomplete; raise --drain-max-ms)"
                                                           if run.get("time_mode") == "wall" else
                                                           " (the model never delivers them: lost to the consumers)"))
    return lines


def write_metrics(directory: Path, runs: dict[str, Any], counts: dict[str, dict[str, int]], latency: dict[str, Any],
                  engine_metrics: dict[str, list[Any]], series: list[list[dict[str, Any]]]) -> None:
    """``metrics.txt`` (OpenMetrics) and ``timeseries.parquet`` of a result directory."""
    from bench.replay import openmetrics, timeseries

    families = openmetrics.result_families(runs, counts, latency, engine_metrics)
    (directory / openmetrics.FILE).write_bytes(openmetrics.render(families))
    timeseries.write(directory / timeseries.FILE, [row for rows in series for row in rows])


@contextmanager
def _closing(server: LiveServer | None) -> Iterator[None]:
    try:
        yield
    finally:
        if server is not None:
            server.close()


def check_trace(trace: str | Path, configs: list[RunConfig],
                report: Callable[[str], None] | None = None) -> Any:
    """Replay ``trace`` through each config with a full history and check it
    (:mod:`bench.check`); returns the :class:`~bench.check.CheckSummary`."""
    from bench.check import CheckSummary, History, check

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
