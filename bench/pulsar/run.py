"""One trace through the real broker, per design, into the result contract of a model run."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from bench.replay.measure import peak_rss_mb
from bench.pulsar.client import log_warnings, run_client
from bench.pulsar.cpu import CpuSampler, await_sweep_idle, broker_pid, txn_phase
from bench.pulsar.fold import EventFold
from bench.pulsar.metrics import Snapshot
from bench.pulsar.rows import MappedRows, new_run_id, write_rows
from bench.pulsar.series import broker_series
from bench.pulsar.target import DESIGNS, PulsarTarget, probe
from bench.replay.replay import RunResult
from bench.replay.results import result_dir
from bench.trace.trace import read_events, trace_metadata, validate
from engine.errors import BackendUnavailable, ConfigError

TARGET = "pulsar"


@dataclass(frozen=True)
class PulsarRunConfig:
    """A broker run's settings, in the place of :class:`bench.replay.config.RunConfig` in the manifest."""

    engine: str  # the design: v4 or v5
    service_url: str
    admin_url: str
    pacing: str
    drain_ms: int
    quiet_ms: int
    target: str = TARGET
    time_mode: str = "wall"

    @property
    def label(self) -> str:
        return self.engine

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


@dataclass
class BrokerRun:
    cfg: PulsarRunConfig
    result: RunResult
    extra: dict[str, Any]
    history: Any = None


def prepare(trace: str | Path, designs: list[str], target: PulsarTarget, scratch: Path) -> dict[str, MappedRows]:
    """Map the trace for each design into ``scratch``; refuses (TraceError) before anything runs."""
    for d in designs:
        if d not in DESIGNS:
            raise ConfigError(f"--engine {d!r}: the Pulsar target runs the v4 and v5 designs")
    run_id = new_run_id()
    return {d: write_rows(read_events(trace, validated=True), scratch / f"rows-{d}.jsonl", design=d, run_id=run_id,
                          restartable=target.restartable, source=str(trace)) for d in designs}


def run_design(trace: str | Path, mapped: MappedRows, target: PulsarTarget, scratch: Path,
               broker: dict[str, Any], *, history: bool = False) -> BrokerRun:
    design = mapped.design
    rows = []
    ended = set()
    for e in read_events(trace, validated=True):
        rows.append((e.topic, e.key, e.subscription, e.ack_kind))
        if e.op in ("commit", "abort") and e.txn:
            ended.add(e.txn)
    back = {v: k for k, v in mapped.topics.items()}
    span = mapped.last_ts_us - mapped.first_ts_us if target.pacing == "trace" else 0
    fold = EventFold(design, rows, back, trace_span_us=span, history=history, ended=frozenset(ended))
    warm = warm_up_rows(trace, mapped, target, scratch)
    snap: list[Snapshot] = [] if warm is not None else [Snapshot(target)]  # after the warm-up, if any
    pid = broker_pid(target.pulsar_dir)
    # the broker's v5 sweeps can hold a core for a minute (bench.pulsar.cpu): not into this run
    sweep_wait_s = await_sweep_idle(pid)
    started = time.perf_counter()
    with CpuSampler(pid) as cpu:
        run_client(target, design, mapped.path, scratch, fold.feed, source=str(trace), warm_up_rows=warm,
                   on_warmed=lambda: snap.append(Snapshot(target)))
    wall = time.perf_counter() - started
    if not snap:  # a client that ended without its warmed event failed, and run_client said so
        raise BackendUnavailable(f"Pulsar trace client ({design}) ended its warm-up without reporting it")
    before = snap[0]
    folded = fold.finish()
    counts = dict(folded.counts)
    counts.update({"events." + op: n for op, n in mapped.ops.items()})
    for k, v in before.counts(sorted(mapped.namespaces)).items():
        counts[k] = counts.get(k, 0) + v
    counts.update(log_warnings(scratch / f"client-{design}.log", mapped.namespaces))
    cfg = PulsarRunConfig(engine=design, service_url=target.service_url, admin_url=target.admin_url,
                          pacing=target.pacing, drain_ms=target.drain_ms, quiet_ms=target.quiet_ms)
    result = RunResult(label=design, deliveries=folded.deliveries, txns=folded.txns, counts=dict(sorted(counts.items())),
                       latency=folded.latency, recovery=[], wall_seconds=wall, events=mapped.rows,
                       virtual_end_us=int(folded.done.get("t_us") or 0), peak_rss_mb=peak_rss_mb(),
                       series=broker_series(fold))
    extra = {
        "target": TARGET,
        "pulsar": {"version": broker["version"], "config": broker["config"], "service_url": target.service_url,
                   "admin_url": target.admin_url, "client": folded.client, **mapped.manifest()},
        "pacing": target.pacing,
        "rates": folded.rates,
        "max_lag_us": folded.done.get("max_lag_us"),
        "drain": {k: folded.done.get(k) for k in ("t_us", "drain_ms")},
        "cpu": _phase_cpu(cpu, scratch / f"events-{design}.jsonl"),
        "sweep_wait_s": sweep_wait_s,
    }
    return BrokerRun(cfg, result, extra, folded.history)


def warm_up_rows(trace: str | Path, mapped: MappedRows, target: PulsarTarget, scratch: Path) -> Path | None:
    """With ``target.client_warm_up``, the trace's rows again in a namespace of their own (a new
    run id: none of the measured run's topics, subscriptions or system topics, whose counts are
    per namespace), for the client to run first; None without it, or for a trace that restarts the
    broker (its crash rows are the measured run's)."""
    if not target.client_warm_up or any(op.startswith("crash_") for op in mapped.ops):
        return None
    path = scratch / f"warm-up-{mapped.design}.jsonl"
    write_rows(read_events(trace, validated=True), path, design=mapped.design, run_id=new_run_id(),
               restartable=False, source=str(trace))
    return path


def _phase_cpu(cpu: CpuSampler, events: Path) -> dict[str, Any] | None:
    """The cores the machine and the broker used over the run's txn phase (bench.pulsar.cpu)."""
    with events.open() as f:
        phase = txn_phase(json.loads(line) for line in f if line.strip())
    return cpu.over(*phase) if phase is not None else None


def pulsar_replay(trace: str | Path, designs: list[str], target: PulsarTarget, out: str | Path,
                  progress: Callable[[str], None] | None = None, histories: dict[str, Any] | None = None, *,
                  force: bool = False, extra_manifest: dict[str, Any] | None = None,
                  shown: dict[str, str] | None = None) -> dict[str, Any]:
    """Validate the trace, map and refuse rows, check the broker answers, then run each design
    and write one result directory (nothing is written if any of that fails). Returns the
    manifest (with ``extra_manifest`` merged in); ``histories``, if given, receives each design's
    checker History. ``shown``: a staging directory the trace is in, and the path it will have."""
    from bench.replay.output import shown_path
    from bench.replay.runner import finish_results

    rows = validate(trace)
    meta = trace_metadata(trace)
    scratch = Path(tempfile.mkdtemp(prefix="txnbench-pulsar-"))
    try:
        mapped = prepare(trace, designs, target, scratch)  # rows the broker cannot run: refused first
        broker = probe(target)
        manifest: dict[str, Any] = {
            "trace": {"path": shown_path(trace, shown), "rows": rows, **meta}, "seed": meta.get("seed"), "runs": {},
            "target": {"kind": TARGET, "service_url": target.service_url, "admin_url": target.admin_url,
                       "version": broker["version"], "pacing": target.pacing},
            **(extra_manifest or {}),
        }
        with result_dir(out, force=force, protect=[Path(trace)]) as writer:
            runs = []
            for d in designs:
                if progress:
                    progress(f"{d}: {mapped[d].rows} rows through {target.service_url} ({target.pacing} pacing)")
                runs.append(run_design(trace, mapped[d], target, scratch, broker, history=histories is not None))
                if histories is not None:
                    histories[d] = runs[-1].history
                # the client's own events, as read: the evidence behind every number of the run
                shutil.copyfile(scratch / f"events-{d}.jsonl", writer.dir / f"pulsar-events-{d}.jsonl")
                # and its JVM's log: the Pulsar client's warnings (why it closed a connection, for one)
                shutil.copyfile(scratch / f"client-{d}.log", writer.dir / f"pulsar-client-{d}.log")
            extras = {r.cfg.label: r.extra for r in runs}
            finish_results(writer, [(r.cfg, r.result) for r in runs], manifest,  # type: ignore[misc]
                           extra_run=lambda res: extras[res.label])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def pulsar_check(trace: str | Path, designs: list[str], target: PulsarTarget,
                 report: Callable[[str], None] | None = None) -> Any:
    """Run the trace through the broker with a history per design and check each with
    :func:`bench.check.check`; returns the :class:`~bench.check.CheckSummary`."""
    from bench.check import CheckSummary, check

    validate(trace)
    summary = CheckSummary()
    scratch = Path(tempfile.mkdtemp(prefix="txnbench-pulsar-"))
    try:
        mapped = prepare(trace, designs, target, scratch)
        broker = probe(target)
        for d in designs:
            run = run_design(trace, mapped[d], target, scratch, broker, history=True)
            violations = check(run.history)
            summary.add(run.history, violations)
            if report is not None:
                report(f"pulsar {d}: {len(run.history.deliveries)} deliveries, {len(violations)} violations")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summary
