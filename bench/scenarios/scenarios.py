"""Scripted scenarios that answer the PIP-473 review questions with numbers (issue #8).

Each scenario is one small function that runs the same script on both engines (and on both v5
notification variants or GC modes where they matter) in virtual time on the embedded backends,
and returns a :class:`Scenario`: classified rows (``bench.report.report.Row``), one column per
engine/variant, and the command that reproduces it. :func:`run_scenarios` writes
``scenarios.json`` plus ``report.md`` / ``report.html`` ("Review questions", one table per
question) with ``bench.report.report``'s renderers.

Counts are exact; times are virtual time under the default :class:`~engine.clock.LatencyModel`
(ledger append 1 ms, ledger read 0.1 ms, empty cursor read 20 µs, RPC 0.2 ms, metadata CAS 1 ms,
watch 0.5 ms).

Model of dispatcher CPU (polling question): each read the dispatcher issues costs broker CPU for
its modelled duration — ``cursor.empty_read`` (20 µs) for a read that returns nothing
dispatchable, ``ledger.read`` (100 µs) for one that returns entries. "CPU per blocked second"
is that sum divided by the seconds the dispatcher spent blocked at maxReadPosition; 1,000 ms/s is
one core busy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from bench.replay import registry
from bench.scenarios import throughput as tp
from bench.replay.config import RunConfig
from bench.replay.engines import Setup, build
from bench.scenarios.migrate import MigrationRefused, migrate
from bench.report.plots import Figure, render_figures
from bench.report.report import render_html, render_markdown
from bench.report.rows import Row
from bench.scenarios.scenario_results import SECTION, Scenario, load_figures, load_sections, save, sections_of
from engine.broker import Broker, BrokerConfig
from engine.clock import LatencyModel
from engine.profile import LatencyProfile
from engine.dispatcher import Delivery, DispatchMode
from engine.errors import ConfigError, ForeignTxnId, TxnbenchError
from engine.ids import Design, TxnID
from engine.ports import AckKind, TxnAction, TxnStatus
from engine.scripted import (ScriptedClient, abort_open, crash_after_commit, reader_after_gc, sealed_segment,
                             slow_participant)
from legacy_v4 import v4_engine
from metadata_v5.engine import V5Engine, open_store
from metadata_v5.options import V5Options, Variant

T = "persistent://public/default/t"
S = "topic://public/default/s"
# label -> RunConfig fields, one per registered variant (RunConfig.design says which design each is)
ENGINES = registry.variant_configs()


# -- a scripted run (engine.scripted's client over a RunConfig) ----------------------------------


class Run(ScriptedClient):
    """A broker over a run's durable stores (:class:`engine.scripted.ScriptedClient`)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.setup: Setup = build(cfg)
        self.bcfg = BrokerConfig(dispatch=cfg.dispatch, polling=cfg.polling_policy(), latency=cfg.latency.fresh())
        super().__init__(self.setup.ledgers, self.bcfg, self.setup.engine)

    def close(self) -> None:
        self.broker.crash()
        self.setup.close()


# The latency model every scenario run uses and the profile it came from (run_scenarios'
# ``latency``; None: the built-in constants).
_LATENCY: tuple[LatencyModel, LatencyProfile] | None = None


def _cfg(label: str, **kw: Any) -> RunConfig:
    base: dict[str, Any] = dict(ENGINES.get(label.split(" ")[0], {}))
    options = {**base.get("options", {}), **kw.pop("options", {})}
    base.update(kw, options=options)
    base.setdefault("dispatch", DispatchMode.NOTIFY)
    if _LATENCY is not None:
        base.setdefault("latency", _LATENCY[0])
        base.setdefault("latency_profile", _LATENCY[1])
    return RunConfig(**base)


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def _row(metric: str, unit: str, values: dict[str, float | None], verdict: str = "n/a") -> Row:
    return Row(SECTION, metric, unit, values, None, verdict)


def _verdicts(rows: list[Row], base: str, other: str, lower_better: bool = True) -> None:
    """Verdict of ``other`` vs ``base`` per row (exact counts and virtual times: any difference)."""
    for r in rows:
        a, b = r.values.get(base), r.values.get(other)
        if a is None or b is None:
            continue
        r.ratio = (b / a) if a else (None if b == 0 else float("inf"))
        r.verdict = "same" if a == b else ("better" if (b < a) == lower_better else "worse")


# -- 1. sealed segment mid-txn --------------------------------------------------------------------


def sealed(window_s: int = 30) -> Scenario:
    """A txn writes to a segment, the segment splits, the txn commits."""
    labels = list(ENGINES)
    vals: dict[str, dict[str, float | None]] = {}
    for label in labels:
        r = Run(_cfg(label))
        txn = sealed_segment(r, S, "sub", timeout_ms=window_s * 2_000, pause_us=1_000).txn
        cas0 = r.stats().get("meta.cas", 0)
        t0 = r.end(txn)
        r.run(window_s * 1_000_000)
        st = r.stats()
        resolved = r.outcomes.get(txn) is TxnStatus.COMMITTED
        vis = r.delivered_at(S, "sub", "x")
        vals[label] = {
            "resolved": 1 if resolved else 0,
            "resolve_ms": _ms(r.outcome_us[txn] - t0) if resolved else None,
            "visible_ms": _ms(vis - t0) if vis is not None else None,
            "visible": sum(1 for m in ("x", "after", "child") if m in r.msgs(S, "sub")),
            "rpcs": st.get("tc.end_txn.rpcs_sent", 0), "rpcs_failed": st.get("tc.end_txn.rpcs_failed", 0),
            "retries": st.get("tc.end_txn.retries", 0), "markers": st.get("ledger.appends.marker", 0),
            "cas": st.get("meta.cas", 0) - cas0,
        }
        r.close()
    spec = [("txn committed within the window", "0/1", "resolved"), ("end-txn answered after", "ms", "resolve_ms"),
            ("commit to visible (the txn's entry)", "ms", "visible_ms"),
            ("entries visible of x, after, child", "entries", "visible"), ("END_TXN RPCs sent", "RPCs", "rpcs"),
            ("END_TXN RPCs failed", "RPCs", "rpcs_failed"), ("end-txn retries", "retries", "retries"),
            ("commit markers written", "entries", "markers"), ("metadata CAS at commit", "CAS", "cas")]
    rows = [_row(m, u, {lab: vals[lab][k] for lab in labels}) for m, u, k in spec]
    v4 = vals["v4"]
    findings = [
        f"v4: {'never resolves' if not v4['resolved'] else 'resolves'} within {window_s} s — {v4['rpcs_failed']:g} END_TXN "
        f"RPCs fail on the sealed segment, {v4['retries']:g} retries, 0 of 3 entries visible (x, after and the child "
        "segment all wait).",
        f"v5: one CAS; the entry is visible {vals['v5-shipped']['visible_ms']} ms (shipped: ownership and header "
        f"reads, CAS, ops scan, event, reconcile read, then the serial apply) / {vals['v5-pip']['visible_ms']} ms "
        f"(PIP: header watch) / {vals['v5-state-events']['visible_ms']} ms (state events) after the commit call.",
    ]
    return Scenario("sealed", "Sealed segment mid-txn: what happens when a txn's segment splits before it commits?",
                    labels, rows, f"txnbench scenarios sealed --window-s {window_s}",
                    f"Notify dispatch, default latencies; window {window_s} s of virtual time after the commit call. "
                    "v4 retries END_TXN every end_txn_retry_interval_ms (1 s) forever (Pulsar's default).", findings)


# -- 2. dispatcher polling while blocked ----------------------------------------------------------


POLLING_SAMPLES = 25  # points per curve of the empty-reads plot


def polling(hold_s: float = 5.0) -> Scenario:
    """A txn stays open ``hold_s`` seconds while plain messages pile up behind it."""
    modes = [("pulsar", DispatchMode.POLLING), ("shared-backoff", DispatchMode.POLLING),
             ("spin", DispatchMode.POLLING), ("notify", DispatchMode.NOTIFY)]
    labels = [f"{eng} {m}" for eng in ("v4", "v5-shipped", "v5-pip") for m, _ in modes]
    lat = _cfg("v4").latency.latencies_us  # the constants, or the medians of a profile's distributions
    empty_us, read_us = lat["cursor.empty_read"], lat["ledger.read"]
    vals: dict[str, dict[str, float | None]] = {}
    curve: dict[str, list[list[float]]] = {}
    for label in labels:
        eng, preset = label.split(" ")
        mode = DispatchMode.NOTIFY if preset == "notify" else DispatchMode.POLLING
        r = Run(_cfg(eng, dispatch=mode, polling="pulsar" if preset == "notify" else preset))
        r.subscribe(T, "sub")
        txn = r.broker.new_txn(int(hold_s * 1000) + 60_000)
        r.publish(T, "txn-entry", txn=txn)
        for i in range(10):
            r.publish(T, f"plain{i}")
        r.run(1_000)
        before = r.stats()
        curve[label] = [[0.0, 0]]
        for i in range(1, POLLING_SAMPLES + 1):  # the dispatcher is blocked all along: sample its empty reads
            r.run(int(hold_s * 1e6 / POLLING_SAMPLES))
            curve[label].append([round(hold_s * i / POLLING_SAMPLES, 3),
                                 r.stats().get("dispatch.empty_reads", 0) - before.get("dispatch.empty_reads", 0)])
        t0 = r.end(txn)
        r.run(1_000_000)
        st = r.stats()
        d = {k: st.get(k, 0) - before.get(k, 0) for k in ("dispatch.reads", "dispatch.empty_reads", "dispatch.blocked_us")}
        reads, empty, blocked_s = d["dispatch.reads"], d["dispatch.empty_reads"], d["dispatch.blocked_us"] / 1e6
        cpu_ms = (empty * empty_us + (reads - empty) * read_us) / 1000
        vis = r.delivered_at(T, "sub", "txn-entry")
        vals[label] = {"reads": reads, "empty": empty, "blocked_s": round(blocked_s, 3),
                       "empty_per_s": round(empty / blocked_s, 1) if blocked_s else 0.0,
                       "cpu": round(cpu_ms / blocked_s, 2) if blocked_s else 0.0,
                       "visible_ms": _ms(vis - t0) if vis is not None else None}
        r.close()
    spec = [("dispatcher reads while blocked", "reads", "reads"), ("empty reads", "reads", "empty"),
            ("time blocked at maxReadPosition", "s", "blocked_s"), ("empty reads per blocked second", "reads/s", "empty_per_s"),
            ("modelled dispatcher CPU per blocked second", "ms/s", "cpu"),
            ("commit to visible (the txn's entry)", "ms", "visible_ms")]
    rows = [_row(m, u, {lab: vals[lab][k] for lab in labels}) for m, u, k in spec]
    findings = [
        f"{eng}: empty reads/s pulsar {vals[f'{eng} pulsar']['empty_per_s']:g}, shared-backoff "
        f"{vals[f'{eng} shared-backoff']['empty_per_s']:g}, spin {vals[f'{eng} spin']['empty_per_s']:g} "
        f"(CPU {vals[f'{eng} spin']['cpu']:g} ms/s), notify {vals[f'{eng} notify']['empty_per_s']:g}; "
        f"commit-to-visible pulsar {vals[f'{eng} pulsar']['visible_ms']} ms vs notify {vals[f'{eng} notify']['visible_ms']} ms"
        for eng in ("v4", "v5-shipped", "v5-pip")
    ]
    figure: Figure = {
        "file": "empty_reads_vs_blocked_time.png", "title": "Empty dispatcher reads vs time blocked by an open txn",
        "x": "seconds blocked at maxReadPosition", "x_scale": "linear",
        "panels": [{"title": eng, "y": "empty reads so far", "y_scale": "symlog",
                    "lines": {m: curve[f"{eng} {m}"] for m, _ in modes}} for eng in ("v4", "v5-shipped", "v5-pip")]}
    return Scenario("polling", "Dispatcher polling: what does a subscription blocked at maxReadPosition by a long-open txn cost?",
                    labels, rows, f"txnbench scenarios polling --hold-s {hold_s:g}",
                    f"One txn entry then 10 plain entries; the txn stays open {hold_s:g} s. CPU model: "
                    f"empty read = cursor.empty_read ({empty_us} µs), other read = ledger.read ({read_us} µs), "
                    "summed and divided by blocked seconds (1000 ms/s = one core).", findings, figures=[figure])


# -- 3. end-txn cost vs participants --------------------------------------------------------------


def endtxn(sizes: tuple[int, ...] = (1, 4, 16, 64, 256)) -> Scenario:
    """A txn writes one entry on each of N partitions and acks one message on each partition's
    subscription (N partitions + N subscriptions), then commits."""
    engines = list(ENGINES)
    vals: dict[str, dict[str, float | None]] = {}
    for n in sizes:
        for eng in engines:
            r = Run(_cfg(eng))
            topics = [f"persistent://public/default/p{i}" for i in range(n)]
            for i, t in enumerate(topics):
                r.subscribe(t, "sub")
                r.publish(t, f"pre{i}")
            r.run(10_000)
            txn = r.broker.new_txn(600_000)
            for i, t in enumerate(topics):
                r.publish(t, f"m{i}", txn=txn)
                r.ack("sub", f"pre{i}", txn=txn)
            r.run(10_000)
            before = r.stats()
            t0 = r.end(txn)
            r.run(5_000_000)
            st = r.stats()
            d = {k: st.get(k, 0) - before.get(k, 0) for k in set(st) | set(before)}
            ledger_writes = d.get("ledger.appends.marker", 0) + d.get("tc.log_appends", 0) + d.get("pending_ack.appends", 0)
            vis = [r.delivered_at(t, "sub", f"m{i}") for i, t in enumerate(topics)]
            answered = r.outcome_us.get(txn)
            vals[f"{eng} N={n}"] = {
                "ledger_writes": ledger_writes, "meta_writes": d.get("meta.writes", 0), "cas": d.get("meta.cas", 0),
                "writes": ledger_writes + d.get("meta.writes", 0), "rpcs": d.get("tc.end_txn.rpcs_sent", 0),
                "events": d.get("tc.event_writes", 0),
                "end_ms": _ms(answered - t0) if answered is not None else None,
                "visible_ms": _ms(max(v for v in vis if v is not None) - t0) if all(v is not None for v in vis) else None,
            }
            r.close()
    # one row per run, one column per measure: engines x sizes as columns made a 20-column table
    spec = [("writes", "writes"), ("ledger writes", "ledger_writes"), ("metadata writes", "meta_writes"),
            ("metadata CAS", "cas"), ("event records", "events"), ("END_TXN RPCs", "rpcs"),
            ("end-txn ms", "end_ms"), ("visible ms", "visible_ms")]
    columns = [c for c, _ in spec]
    rows = [_row(lab, "", {c: vals[lab][k] for c, k in spec}) for lab in (f"{e} N={n}" for e in engines for n in sizes)]
    big = sizes[-1]
    findings = [f"N={big}: v4 {vals[f'v4 N={big}']['rpcs']:g} RPCs, {vals[f'v4 N={big}']['writes']:g} writes, "
                f"{vals[f'v4 N={big}']['end_ms']} ms; v5-shipped {vals[f'v5-shipped N={big}']['cas']:g} CAS, "
                f"{vals[f'v5-shipped N={big}']['events']:g} event records, {vals[f'v5-shipped N={big}']['end_ms']} ms, "
                f"last participant visible after {vals[f'v5-shipped N={big}']['visible_ms']} ms; v5-pip {vals[f'v5-pip N={big}']['cas']:g} CAS, "
                f"{vals[f'v5-pip N={big}']['writes']:g} writes, {vals[f'v5-pip N={big}']['end_ms']} ms; v5-state-events "
                f"{vals[f'v5-state-events N={big}']['events']:g} event records, {vals[f'v5-state-events N={big}']['end_ms']} ms"]

    def lines(key: str) -> dict[str, list[list[float]]]:  # a None (not reached in time) leaves a gap
        return {e: [[n, y] for n in sizes if (y := vals[f"{e} N={n}"][key]) is not None] for e in engines}

    figure: Figure = {
        "file": "endtxn_vs_participants.png", "title": "End-txn cost vs participants (N partitions + N subscriptions)",
        "x": "N", "x_scale": "log2",
        "panels": [{"title": "writes a commit causes", "y": "ledger + metadata writes", "y_scale": "log", "lines": lines("writes")},
                   {"title": "end-txn latency (client answer)", "y": "ms", "lines": lines("end_ms")},
                   {"title": "commit to visible (last participant)", "y": "ms", "lines": lines("visible_ms")}]}
    return Scenario("endtxn", "End-txn cost vs participants: writes, RPCs and latency of a commit over N partitions + N subscriptions",
                    columns, rows, "txnbench scenarios endtxn --participants " + " ".join(map(str, sizes)),
                    "One row per design and N. Writes: everything a commit adds, ledger (markers, txn log, "
                    "pending-ack log) plus metadata (for v5 this includes the participants deleting their op records "
                    "after materialising), measured from the commit call to 5 s later; end-txn ms: until the client's "
                    "answer; visible ms: until the last participant's message is delivered.", findings,
                    figures=[figure])


# -- 4. recovery vs log length --------------------------------------------------------------------


def _recovery_run(eng: str, n: int, open_txns: int) -> dict[str, float | None]:
    """``n`` entries on one topic: one txn per 10 entries writes 5 of them and acks one earlier
    message of the subscription; 1 txn in 10 aborts. Then ``open_txns`` txns each write one entry
    and ack one unacked message, and stay open: the broker crashes and the subscription
    reconnects. Recovery figures per component kind (tb, pending-ack, tc) and in all."""
    started = time.perf_counter()
    r = Run(_cfg(eng))
    r.subscribe(T, "sub")
    k = 0
    while k < n:
        txn = r.broker.new_txn(600_000)
        for j in range(5):
            r.publish(T, f"m{k}", txn=txn)
            k += 1
        for j in range(5):
            r.publish(T, f"m{k}")
            k += 1
        r.ack("sub", f"m{k - 1}", txn=txn)
        r.end(txn, TxnAction.ABORT if (k // 10) % 10 == 9 else TxnAction.COMMIT)
        r.run(2_000)
    for j in range(open_txns):  # still open at the crash
        txn = r.broker.new_txn(600_000)
        r.publish(T, f"open{j}", txn=txn)
        r.ack("sub", f"m{10 * j + 5}", txn=txn)  # a plain message nobody acked (the txns above ack m<10i+9>)
    r.run(1_000_000)
    r.crash()
    r.broker.coordinator()
    r.run(600_000_000 if eng == "v4" else 5_000_000)
    rec: dict[str, dict[str, int]] = {}
    for st in r.broker.recovery_stats():
        agg = rec.setdefault(registry.kind_of(st.component), {"entries": 0, "records": 0, "us": 0})
        agg["entries"] += st.entries_replayed
        agg["records"] += st.records_read
        agg["us"] = max(agg["us"], st.modelled_us)
    r.close()
    return {"entries": sum(a["entries"] for a in rec.values()), "records": sum(a["records"] for a in rec.values()),
            "us": _ms(max((a["us"] for a in rec.values()), default=0)),
            "components": len(rec), "wall": round(time.perf_counter() - started, 2),
            **{f"{c}.entries": a["entries"] for c, a in rec.items()},
            **{f"{c}.records": a["records"] for c, a in rec.items()},
            **{f"{c}.ms": _ms(a["us"]) for c, a in rec.items()}}


def _recovery_rows(vals: dict[str, dict[str, float | None]], labels: list[str]) -> list[Row]:
    comps = sorted({k.rsplit(".", 1)[0] for v in vals.values() for k in v if "." in k})
    spec = [("entries replayed (all components)", "entries", "entries"), ("metadata records read (all)", "records", "records"),
            ("modelled recovery time (slowest component)", "ms", "us")]
    for c in comps:
        spec += [(f"{c}: entries replayed", "entries", f"{c}.entries"), (f"{c}: records read", "records", f"{c}.records"),
                 (f"{c}: modelled time", "ms", f"{c}.ms")]
    spec.append(("wall time of this run (build + recovery)", "s", "wall"))
    return [_row(m, u, {lab: vals[lab].get(k) for lab in labels}) for m, u, k in spec]


def _recovery_figure(file: str, title: str, x: str, points: dict[str, list[tuple[int, dict[str, float | None]]]]) -> Figure:
    """Read cost and modelled time against the swept quantity, one line per engine."""
    def lines(key: str) -> dict[str, list[list[float]]]:
        return {eng: [[x_, (v["entries"] or 0) + (v["records"] or 0) if key == "read" else v[key] or 0.0]
                      for x_, v in pts] for eng, pts in points.items()}

    return {"file": file, "title": title, "x": x, "x_scale": "log",
            "panels": [{"title": "entries replayed + records read", "y": "entries + records", "y_scale": "log",
                        "lines": lines("read")},
                       {"title": "modelled recovery time (slowest component)", "y": "ms", "lines": lines("us")}]}


RECOVERY_NOTE = ("Components: tb (transaction buffer), pending-ack store, tc (coordinator). Modelled time is the "
                 "virtual time the component stays unready (v4: ceil(entries/100) reads + log replay; v5: index "
                 "queries, then the headers of the txns found, read at once as master does: one meta.read plus "
                 "meta.pipelined per further header).")


def recovery(sizes: tuple[int, ...] = (1_000, 10_000, 100_000)) -> Scenario:
    """Recovery against the log's length, with one txn open at the crash (:func:`_recovery_run`).
    The shipped v5 is not in this sweep: its build commits 500 txns/s on one segment, more than
    the shipped buffer's serial tail applies (≈400/s, PULSAR5_CODE.md D3), so its backlog of op
    records, and every cleanup scan over it, grows with n (the model's wall time with n²). Its
    recovery is measured by ``recovery-open`` and ``restart``."""
    engines = ["v4", "v5-pip"]
    labels = [f"{e} n={n:,}" for n in sizes for e in engines]
    vals = {f"{e} n={n:,}": _recovery_run(e, n, 1) for n in sizes for e in engines}
    rows = _recovery_rows(vals, labels)
    lo, hi = sizes[0], sizes[-1]
    findings = [f"v4 replays {vals[f'v4 n={lo:,}']['entries']:g} → {vals[f'v4 n={hi:,}']['entries']:g} entries "
                f"({vals[f'v4 n={lo:,}']['us']} → {vals[f'v4 n={hi:,}']['us']} ms modelled) from n={lo:,} to n={hi:,}; "
                f"v5 reads {vals[f'v5-pip n={lo:,}']['records']:g} → {vals[f'v5-pip n={hi:,}']['records']:g} records "
                f"({vals[f'v5-pip n={lo:,}']['us']} → {vals[f'v5-pip n={hi:,}']['us']} ms), replays 0 entries. "
                f"Wall time per run at n={hi:,}: v4 {vals[f'v4 n={hi:,}']['wall']} s, v5 {vals[f'v5-pip n={hi:,}']['wall']} s "
                "(building the log dominates and grows faster than n here, so 10^6 and 10^7 sit behind --large)."]
    figure = _recovery_figure("recovery_vs_log_length.png", "Recovery vs log length (one txn open at the crash)",
                              "entries in the topic's log", {e: [(n, vals[f"{e} n={n:,}"]) for n in sizes] for e in engines})
    return Scenario("recovery", "Recovery vs log length: what does a broker restart cost as the topic grows?",
                    labels, rows, "txnbench scenarios recovery --sizes " + " ".join(map(str, sizes)),
                    RECOVERY_NOTE + " v5 is the PIP's design here (see recovery-open for the shipped one: at "
                    "this build's 500 txns/s on one segment its serial apply falls behind, D3). "
                    "One txn (one entry, one ack) is open at the crash. Sizes 10^6 and 10^7 are "
                    "behind --large: building the log dominates the wall time (last row: ≈0.5 s at 10^4, ≈15 s at "
                    "10^5 per engine on a 2-core machine, faster than linear), so expect tens of minutes per engine "
                    "at 10^6 and hours at 10^7.", findings, figures=[figure])


def recovery_open(open_txns: tuple[int, ...] = (1, 10, 100, 1_000), n: int = 10_000) -> Scenario:
    """Recovery against the txns open at the crash (each wrote one entry and acked one message),
    on a log of ``n`` entries (:func:`_recovery_run`)."""
    if 10 * max(open_txns) > n:
        raise ConfigError(f"recovery-open: {max(open_txns)} open txns need a log of at least {10 * max(open_txns)} entries")
    engines = ["v4", "v5-shipped", "v5-pip"]
    labels = [f"{e} open={k:,}" for k in open_txns for e in engines]
    vals = {f"{e} open={k:,}": _recovery_run(e, n, k) for k in open_txns for e in engines}
    rows = _recovery_rows(vals, labels)
    lo, hi = open_txns[0], open_txns[-1]
    findings = [f"{e}: {vals[f'{e} open={lo:,}']['entries']:g} → {vals[f'{e} open={hi:,}']['entries']:g} entries replayed, "
                f"{vals[f'{e} open={lo:,}']['records']:g} → {vals[f'{e} open={hi:,}']['records']:g} records read, "
                f"{vals[f'{e} open={lo:,}']['us']} → {vals[f'{e} open={hi:,}']['us']} ms modelled, "
                f"from {lo:,} to {hi:,} open txns" for e in engines]
    figure = _recovery_figure("recovery_vs_open_txns.png", f"Recovery vs txns open at the crash (log of {n:,} entries)",
                              "txns open at the crash", {e: [(k, vals[f"{e} open={k:,}"]) for k in open_txns] for e in engines})
    return Scenario("recovery-open", "Recovery vs open txns: what does a broker restart cost with many txns in flight?",
                    labels, rows, f"txnbench scenarios recovery-open --open-txns {' '.join(map(str, open_txns))} "
                    f"--open-log {n}", RECOVERY_NOTE + f" The log holds {n:,} entries of finished txns and plain "
                    "messages; each open txn wrote one entry and acked one message.", findings, figures=[figure])


# -- 5. GC vs a slow participant, GC vs retention ----------------------------------------------------


def _gc_cfg(label: str) -> RunConfig:
    """``<variant label>[ gc=<mode>]``: a design with a header GC gets retention_ms=1000,
    gc_sweep_ms=500 and that GC mode (else its default); one without (v4) its defaults."""
    eng, _, gc = label.partition(" gc=")
    cfg = _cfg(eng)
    if not hasattr(registry.spec(cfg.engine).options_class, "gc"):
        return cfg
    return _cfg(eng, options={"retention_ms": 1_000, "gc_sweep_ms": 500, **({"gc": gc} if gc else {})})


def _slow_participant(label: str) -> dict[str, float | None]:
    """A txn acks m0 and commits; the subscriber's broker dies before the outcome reaches it and
    the subscriber stays away past the retention window while the coordinator's GC runs."""
    r = Run(_gc_cfg(label))
    slow_participant(r, T, "sub", timeout_ms=600_000, away_us=5_000_000, back_us=1_000_000)
    st = r.stats()
    msgs = r.msgs(T, "sub")[2:]
    r.close()
    return {"redelivered": 1 if "m0" in msgs else 0, "forced": st.get("tc.gc.forced_op_deletes", 0),
            "waiting": st.get("tc.gc.waiting_for_participants", 0)}


def _reader_after_gc(label: str) -> dict[str, float | None]:
    r = Run(_gc_cfg(label))
    deleted = reader_after_gc(r, T, "new-reader", timeout_ms=600_000).get("tc.gc.headers_deleted", 0)
    got = r.msgs(T, "new-reader")
    st = r.stats()
    r.close()
    return {"c1": 1 if "c1" in got else 0, "a1": 1 if "a1" in got else 0, "plain": 1 if "plain" in got else 0,
            "headers_deleted": deleted + st.get("tc.gc.headers_deleted", 0)}



def _shipped_reader(a1_seen: float | None) -> str:
    """The shipped GC's new-reader finding: D13's window opens only when the reader's first read
    comes before the restarted buffer has loaded its aborted records (the store's latency decides)."""
    if a1_seen:
        return (f"shipped shows aborted a1 ({a1_seen:g}): its restarted buffer dispatches from the LAC before its "
                "aborted records are loaded (D13).")
    return ("shipped shows exactly c1 + plain too (a1 seen: 0): its restarted buffer dispatches from the LAC before "
            "its aborted records are loaded (D13), but here they were loaded before the reader's first read.")

def gc() -> Scenario:
    labels = ["v4", "v5-shipped gc=repair", "v5-pip gc=force", "v5-pip gc=wait"]
    slow = {lab: _slow_participant(lab) for lab in labels}
    reader = {lab: _reader_after_gc(lab) for lab in labels}
    rows = [
        _row("slow participant: committed ack lost (m0 redelivered)", "0/1", {lab: slow[lab]["redelivered"] for lab in labels}),
        _row("slow participant: op records force-deleted by GC", "records", {lab: slow[lab]["forced"] for lab in labels}),
        _row("slow participant: GC sweeps that waited for a participant", "sweeps", {lab: slow[lab]["waiting"] for lab in labels}),
        _row("new reader after GC sees committed c1", "0/1", {lab: reader[lab]["c1"] for lab in labels}),
        _row("new reader after GC sees aborted a1", "0/1", {lab: reader[lab]["a1"] for lab in labels}),
        _row("new reader after GC sees plain", "0/1", {lab: reader[lab]["plain"] for lab in labels}),
        _row("headers collected by GC", "headers", {lab: reader[lab]["headers_deleted"] for lab in labels}),
    ]
    findings = [
        f"PIP GC (force): the slow participant's committed ack is lost ({slow['v5-pip gc=force']['forced']:g} op record "
        f"force-deleted, m0 redelivered); the waiting GC keeps it (0 lost); v4 keeps it (END_TXN retried until the "
        f"subscription is back); shipped (repair) redelivers m0: {slow['v5-shipped gc=repair']['redelivered']:g} "
        "(its pending-ack recovery restores txn ids only, so the commit it applies afterwards acks nothing).",
        f"New reader after GC: PIP GC hides committed c1 (c1 seen: {reader['v5-pip gc=force']['c1']:g}); "
        f"the waiting GC shows exactly c1 + plain (a1 seen: {reader['v5-pip gc=wait']['a1']:g}); v4 the same from its "
        f"markers; {_shipped_reader(reader['v5-shipped gc=repair']['a1'])}",
    ]
    return Scenario("gc", "GC vs a slow participant and GC vs data retention: 5.0.1's repair, the PIP's sweep, a waiting one",
                    labels, rows, "txnbench scenarios gc",
                    "v5 with retention_ms=1000, gc_sweep_ms=500 (master: 900 s / 300 s) to reach GC quickly; the "
                    "subscriber is away 5 s. v4 has no header GC: its outcomes live in markers and its retries.", findings)


# -- 6. txn-id interop -------------------------------------------------------------------------------


def interop() -> Scenario:
    labels = ["v4 coordinator", "v5 coordinator"]
    vals: dict[str, dict[str, float | None]] = {}
    for label, eng, foreign in (("v4 coordinator", "v4", TxnID(Design.V5, 0, 0)),
                                ("v5 coordinator", "v5-shipped", TxnID(Design.V4, 0, 0))):
        r = Run(_cfg(eng))
        r.subscribe(T, "sub")
        r.publish(T, "plain")
        own = r.broker.new_txn(600_000)
        r.publish(T, "own", txn=own)
        r.run(10_000)
        before = r.stats()
        entries = r.broker.managed_ledger(T).entry_count()
        refused = 0
        attempts: list[Callable[[], object]] = [
            lambda: r.broker.end_txn(foreign, TxnAction.COMMIT),
            lambda: r.broker.end_txn(foreign, TxnAction.ABORT),
            lambda: r.publish(T, "foreign", txn=foreign),
            lambda: r.ack("sub", "plain", txn=foreign),
            lambda: r.broker.coordinator().status(foreign),
        ]
        for attempt in attempts:
            try:
                attempt()
            except ForeignTxnId:
                refused += 1
        after = r.stats()
        # billed.* counts the modelled calls (a refused publish still made its request hop), not state
        changed = sum(1 for k in set(before) | set(after)
                      if not k.startswith("billed.") and before.get(k, 0) != after.get(k, 0))
        entries_after = r.broker.managed_ledger(T).entry_count()
        r.end(own)
        r.run(1_000_000)
        vals[label] = {"attempts": len(attempts), "refused": refused, "changed": changed,
                       "entries_before": entries, "entries_after": entries_after,
                       "own_ok": 1 if r.outcomes.get(own) is TxnStatus.COMMITTED else 0}
        r.close()
    spec = [("calls with a foreign txn id (commit, abort, publish, ack, status)", "calls", "attempts"),
            ("refused with ForeignTxnId", "calls", "refused"), ("counters changed by the refused calls", "counters", "changed"),
            ("ledger entries before", "entries", "entries_before"), ("ledger entries after", "entries", "entries_after"),
            ("own txn still commits afterwards", "0/1", "own_ok")]
    rows = [_row(m, u, {lab: vals[lab][k] for lab in labels}) for m, u, k in spec]
    findings = [f"{lab}: {vals[lab]['refused']:g}/{vals[lab]['attempts']:g} foreign-id calls refused with ForeignTxnId, "
                f"{vals[lab]['changed']:g} counters changed, ledger entries {vals[lab]['entries_before']:g} → "
                f"{vals[lab]['entries_after']:g}" for lab in labels]
    return Scenario("interop", "Txn-id interop: is a v4 txn id usable against the v5 coordinator, and vice versa?",
                    labels, rows, "txnbench scenarios interop",
                    "No: ids carry their design; each coordinator refuses a foreign one before any state change.", findings)


# -- 6b. restart windows: where the release is less safe than the PIP --------------------------------


def _restart_windows(label: str) -> dict[str, float | None]:
    """Four scripted windows around a restart (PULSAR5_CODE.md D8, D13, D14):

    * a txn wrote ``x`` and is still open when the broker restarts;
    * a txn's individual ack of ``m0`` is pending when the broker restarts;
    * a txn acked ``m1`` and committed; the broker restarts before the decision reaches the
      subscription;
    * a txn wrote ``y`` and committed; only the coordinator restarts, between its CAS and its
      fan-out (checked 10 s later: does ``y`` reach the subscriber?).
    """
    r = Run(_cfg(label))
    w = crash_after_commit(r, T, "sub", timeout_ms=600_000, plain="p")
    got = r.msgs(T, "sub")
    exposed = 1 if "x" in got else 0
    m0_again = 1 if got.count("m0") > 1 else 0
    m1_again = 1 if got.count("m1") > 1 else 0
    abort_open(r, w)
    late = r.broker.new_txn(600_000)
    r.publish(T, "y", txn=late)
    r.end(late)
    r.broker.restart_coordinator()  # between the CAS and the fan-out
    r.run(10_000_000)
    lost_wakeup = 0 if "y" in r.msgs(T, "sub") else 1
    r.close()
    return {"exposed": exposed, "m0": m0_again, "m1": m1_again, "lost_wakeup": lost_wakeup}


def restart() -> Scenario:
    labels = ["v4", "v5-shipped", "v5-pip"]
    vals = {lab: _restart_windows(lab) for lab in labels}
    spec = [("entry of a txn still open delivered after the restart (uncommitted read)", "0/1", "exposed"),
            ("message under a pending txn ack redelivered after the restart", "0/1", "m0"),
            ("message acked by a committed txn redelivered after the restart (ack lost)", "0/1", "m1"),
            ("committed entry not delivered 10 s after a coordinator restart between CAS and fan-out", "0/1",
             "lost_wakeup")]
    rows = [_row(m, u, {lab: vals[lab][k] for lab in labels}) for m, u, k in spec]
    sh, pip = vals["v5-shipped"], vals["v5-pip"]
    findings = [
        f"v5-shipped (Pulsar 5.0.1): uncommitted read {sh['exposed']:g}, pending ack redelivered {sh['m0']:g}, "
        f"committed ack lost {sh['m1']:g}, committed entry stuck after a coordinator restart {sh['lost_wakeup']:g}: "
        "its buffer starts at the LAC and does not gate dispatch (D13), its pending-ack recovery restores txn ids "
        "only (D14), and its fan-out is a separate step after the CAS (D8).",
        f"v5-pip: {pip['exposed']:g} / {pip['m0']:g} / {pip['m1']:g} / {pip['lost_wakeup']:g} (recovery gates dispatch, "
        "restores pending positions, and the header watch fires from the CAS itself); "
        f"v4: {vals['v4']['exposed']:g} / {vals['v4']['m0']:g} / {vals['v4']['m1']:g} / {vals['v4']['lost_wakeup']:g}.",
    ]
    return Scenario("restart", "Restart windows: does a restart expose open txns, forget pending acks or lose a commit's wake-up?",
                    labels, rows, "txnbench scenarios restart",
                    "Findings, not failures: the shipped design's windows are what 5.0.1's code does (PULSAR5_CODE.md "
                    "D8, D13, D14). Notify dispatch, default latencies; the broker crashes right after the commit call.",
                    findings)


# -- 7. migration v4 -> v5 --------------------------------------------------------------------------


def migration(txns: int = 30) -> Scenario:
    """A topic written under v4 (commits, aborts, a snapshot, a consumer part-way, one txn still
    open) is migrated with :func:`bench.scenarios.migrate.migrate`; readers before and after must match."""

    labels = ["v4 reader (before)", "v5 reader (after migration)", "v4 reader (rollback)"]
    r = Run(_cfg("v4", options={"snapshot_max_txn_count": 10}))
    r.subscribe(T, "sub")
    for i in range(txns):
        txn = r.broker.new_txn(600_000)
        r.publish(T, f"t{i}a", txn=txn)
        r.publish(T, f"p{i}")
        r.publish(T, f"t{i}b", txn=txn)
        r.end(txn, TxnAction.ABORT if i % 3 == 1 else TxnAction.COMMIT)
        r.run(20_000)
    opened = r.broker.new_txn(30_000)
    r.publish(T, "open-a", txn=opened)
    r.publish(T, "p-after")
    r.run(1_000_000)

    def read(broker: Broker, sub: str, us: int = 1_000_000) -> list[str | None]:
        got: list[Delivery] = []
        broker.subscribe(T, sub, got.extend)
        r.run(us)
        return [d.msg for d in got]

    before = read(r.broker, "fresh-before")
    r.broker.crash()
    ledgers = r.setup.ledgers
    fingerprint = {n: (ledgers.open(n).last_confirmed(), ledgers.open(n).entry_count()) for n in ledgers.names("")}
    store = open_store("memory://")
    committing = Run(_cfg("v4"))  # a second topic, with a txn caught COMMITTING: refused
    c = committing.broker.new_txn(600_000)
    committing.publish(T, "x", txn=c)
    committing.end(c)
    committing.broker.crash()
    try:
        migrate(committing.setup.ledgers, [T], open_store("memory://"))
        refused = 0
    except MigrationRefused:
        refused = 1
    result = migrate(ledgers, [T], store.reopen())
    untouched = fingerprint == {n: (ledgers.open(n).last_confirmed(), ledgers.open(n).entry_count()) for n in ledgers.names("")}
    opts = V5Options(variant=Variant.PIP, timeout_sweep_ms=1_000)  # migrated data is the PIP design's (5.0.1 migrates no txn state)
    b5 = Broker(r.sched, ledgers, r.bcfg, lambda ctx: V5Engine(ctx, store.reopen(), opts))
    after = read(b5, "fresh-after", 100_000)
    b5.crash()
    back = Broker(r.sched, ledgers, r.bcfg, v4_engine(snapshot_max_txn_count=10))
    rollback = read(back, "fresh-rollback", 100_000)
    back.crash()
    b5 = Broker(r.sched, ledgers, r.bcfg, lambda ctx: V5Engine(ctx, store.reopen(), opts))
    v5_txn = b5.new_txn(600_000)
    b5.publish(T, "v5-txn", 100, txn=v5_txn)
    b5.end_txn(v5_txn, TxnAction.COMMIT)
    b5.publish(T, "p-v5", 100)
    r.run(40_000_000)  # the migrated open txn times out under v5
    after_timeout = read(b5, "fresh-after-timeout")
    b5.crash()
    back = Broker(r.sched, ledgers, r.bcfg, v4_engine(snapshot_max_txn_count=10))
    late_rollback = read(back, "fresh-late-rollback", 40_000_000)
    back.crash()
    r.setup.close()
    committing.setup.close()
    p = result.plan
    aborted_msgs = {f"t{i}{x}" for i in range(txns) if i % 3 == 1 for x in "ab"}
    rows = [
        _row("entries delivered to a new subscription", "entries", {labels[0]: len(before), labels[1]: len(after), labels[2]: len(rollback)}),
        _row("same sequence as the v4 reader", "0/1", {labels[0]: 1, labels[1]: int(after == before), labels[2]: int(rollback == before)}),
        _row("aborted entries delivered", "entries", {lab: sum(1 for m in got if m in aborted_msgs) for lab, got in zip(labels, (before, after, rollback))}),
        _row("open txn's entries delivered", "entries", {lab: sum(1 for m in got if m == "open-a") for lab, got in zip(labels, (before, after, rollback))}),
        _row("committed txns", "txns", {labels[1]: len(p.committed)}),
        _row("aborted txns", "txns", {labels[1]: len(p.aborted)}),
        _row("open txns (waited on)", "txns", {labels[1]: len(p.open)}),
        _row("v4 entries scanned (data + markers)", "entries", {labels[1]: p.entries_scanned}),
        _row("v5 records written: headers", "records", {labels[1]: result.headers}),
        _row("v5 records written: op records", "records", {labels[1]: result.op_records}),
        _row("v5 records written: abort ranges", "records", {labels[1]: result.abort_ranges}),
        _row("v4 ledgers untouched by the migration", "0/1", {labels[1]: int(untouched)}),
        _row("refused while a txn is COMMITTING", "0/1", {labels[1]: refused}),
        _row("after the open txn times out: its entry skipped, p-after delivered", "0/1",
             {labels[1]: int("open-a" not in after_timeout and "p-after" in after_timeout)}),
        _row("rollback after a v5 txn write: entries delivered past it", "entries",
             {labels[2]: sum(1 for m in late_rollback if m in ("v5-txn", "p-v5"))}),
    ]
    findings = [f"{len(before)} entries delivered before, {len(after)} after migration (identical: {after == before}); "
                f"{len(p.committed)} committed / {len(p.aborted)} aborted / {len(p.open)} open txns -> "
                f"{result.headers} headers, {result.op_records} op records, {result.abort_ranges} abort ranges; "
                f"v4 data untouched: {untouched}; refused while COMMITTING: {bool(refused)}.",
                "Rollback (v4 broker on the same ledgers) delivers the same sequence until the first v5 transactional "
                f"write; after it, v4 delivers {sum(1 for m in late_rollback if m in ('v5-txn', 'p-v5'))} of the 2 "
                "entries written under v5 (the v5 txn's entry has no marker and pins maxReadPosition forever)."]
    return Scenario("migration", "Migration and rollback: can v4 topic data be read under v5, and switched back?",
                    labels, rows, f"txnbench scenarios migration (library: bench/scenarios/migrate.py; txnbench migrate)",
                    "Rollback is possible until the first v5 transactional write or ack on the topic: the v4 data, "
                    "snapshot and coordinator logs are never written by the migration. Migration is refused while a "
                    "txn of the topic is COMMITTING/ABORTING or an open txn holds pending acks on it.", findings)


# -- throughput vs offered rate (finite capacity) ---------------------------------------------------


def throughput(rates: tuple[int, ...] = tp.RATES, txns: int = tp.TXNS) -> Scenario:
    """Offered txn rate against achieved rate and commit-to-visible, per design, with the shared
    resources of :data:`bench.scenarios.throughput.RESOURCES` (see :mod:`bench.scenarios.throughput`)."""
    rates = tuple(sorted(rates))
    latency = _LATENCY[0] if _LATENCY is not None else None
    profile = _LATENCY[1] if _LATENCY is not None else None
    measured = latency is not None and bool(latency.resources)
    history = tp.calibrated_history(profile.provenance) if measured and profile is not None else 0
    vals = tp.run(rates, txns, latency=latency, history=history)
    resources = dict(latency.resources) if measured and latency is not None else tp.RESOURCES
    where = (f"the latency profile's ({profile.name if profile is not None else 'given'}: fitted to a standalone "
             "broker's saturated rates by calibrate --pulsar)" if measured else
             "illustrative, not measured (the latency profile has none)")
    labels = ["offered txn/s", "committed", "achieved txn/s", "commit-to-visible p50 ms", "p99 ms"]
    rows = [_row(f"{d} {r}/s", "", {"offered txn/s": float(r), "committed": v["committed"], "achieved txn/s": v["achieved"],
                                     "commit-to-visible p50 ms": v["p50"], "p99 ms": v["p99"]})
            for d in vals for r, v in vals[d].items()]
    peak = {d: max((v["achieved"] or 0.0) for v in vals[d].values()) for d in vals}
    older = (f", {peak[tp.aged(history)]:g} txn/s on a store that has run {history:,} txns, as the median run the "
             f"profile was calibrated on had (v5/v4 {peak[tp.aged(history)] / peak['v4']:.2f})" if history else "")
    findings = [f"highest achieved rate: v4 {peak['v4']:g} txn/s, v5-shipped {peak['v5-shipped']:g} txn/s "
                f"(v5/v4 {peak['v5-shipped'] / peak['v4']:.2f}){older}; a broker warmed by 6,000 v4 txns measured "
                "0.053-0.056 on the small and omb mixes, its v5 having run 2,000-2,700 txns before, which slows it "
                "on the standalone's RocksDB store (0.32 on many-participants, whose v4 runs lost consumers), and "
                "0.19-0.56 in earlier sets whose runs were too short to measure v4: datasets/validation/README.md; "
                f"at {rates[-1]}/s offered, commit-to-visible p50 v4 {vals['v4'][rates[-1]]['p50']} ms, "
                f"v5-shipped {vals['v5-shipped'][rates[-1]]['p50']} ms"]
    return Scenario("throughput", "Throughput at saturation: how many txns per second does each design commit "
                    "and make visible as the offered rate rises?", labels, rows,
                    "txnbench scenarios throughput",
                    f"{txns} txns per point of {tp.SHAPE.txn_messages[0]} messages each over {tp.SHAPE.partitions} "
                    "partitions (1-2 per txn, 4 open at once), replayed open loop in virtual time"
                    + (", v5 on the store a standalone runs (RocksDB: index scans and sequence keys emulated, as "
                       "validate runs it)" if measured else "")
                    + ". Achieved: committed "
                    "txns per second from the first new_txn to the last commit answered (as validate counts the "
                    "broker's). Resources, "
                    f"{where}: {tp.describe_resources(resources)}: each queues work beyond its concurrency "
                    "(engine/capacity.py). Other latencies: "
                    + (f"the profile's ({profile.name})." if latency is not None and profile is not None
                       else "the default constants."), findings, figures=[tp.figure(vals, rates)])  # type: ignore[list-item]


# -- running and writing ------------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "sealed": sealed, "polling": polling, "endtxn": endtxn, "recovery": recovery, "recovery-open": recovery_open,
    "gc": gc, "interop": interop, "restart": restart, "migration": migration, "throughput": throughput,
}
LARGE_SIZES = (1_000_000, 10_000_000)


def run_scenarios(names: list[str] | None = None, out: str | Path | None = None, *, large: bool = False,
                  params: dict[str, dict[str, Any]] | None = None,
                  progress: Callable[[str], None] | None = None,
                  latency: tuple[LatencyModel, LatencyProfile] | None = None) -> list[Scenario]:
    """Run the named scenarios (all by default); write ``scenarios.json`` and a report to ``out``.
    ``latency``: the model and profile every run uses (default: the built-in constants)."""
    global _LATENCY
    previous, _LATENCY = _LATENCY, latency
    try:
        return _run_scenarios(names, out, large=large, params=params, progress=progress)
    finally:
        _LATENCY = previous


def _run_scenarios(names: list[str] | None, out: str | Path | None, *, large: bool,
                   params: dict[str, dict[str, Any]] | None,
                   progress: Callable[[str], None] | None) -> list[Scenario]:
    names = names or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ConfigError(f"unknown scenario(s) {', '.join(unknown)}; expected some of {', '.join(SCENARIOS)}")
    params = dict(params or {})
    if large:
        sizes = params.setdefault("recovery", {}).get("sizes", (1_000, 10_000, 100_000))
        params["recovery"]["sizes"] = tuple(sizes) + LARGE_SIZES
    done: list[Scenario] = []
    for name in names:
        started = time.perf_counter()
        sc = SCENARIOS[name](**params.get(name, {}))
        sc.wall_seconds = round(time.perf_counter() - started, 2)
        done.append(sc)
        if progress:
            progress(f"{name}: {sc.wall_seconds} s — " + " | ".join(sc.findings))
    if out is not None:
        write(done, out)
    return done


def write(scenarios: list[Scenario], out: str | Path) -> Path:
    """``scenarios.json`` and a report (Markdown, HTML, plots) of its own in ``out``."""
    outdir = Path(out)
    save(scenarios, outdir / "scenarios.json")
    sections = sections_of(scenarios)
    plots = render_figures([f for s in scenarios for f in s.figures], outdir)
    title = "txnbench: PIP-473 review questions"
    (outdir / "report.md").write_text(render_markdown(title, sections, plots))
    (outdir / "report.html").write_text(render_html(title, sections, plots))
    return outdir / "report.html"


__all__ = ["Run", "Scenario", "SCENARIOS", "run_scenarios", "save", "write", "load_figures", "load_sections", "TxnbenchError"]
