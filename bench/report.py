"""Comparison reports: load result sets, classify rows, render Markdown and HTML from the same
rows, add the plots (:mod:`bench.plots`) and write ``summary.json``.

Within one result set, engines are compared side by side (the ratio is other/first engine).
Across result sets (e.g. two commits), each engine is compared with the baseline set and only
changes beyond noise are flagged: counts and virtual-time latencies are deterministic, so the
threshold there only ignores rounding (1 %); wall-clock figures need a wide one (25 %). Result
sets replayed from different traces or options are marked not comparable. A model set and a
real-broker set (``--target pulsar://...``) are held side by side as "model vs broker"
(:mod:`bench.model_vs_broker`), never as A/B.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from bench.measure import METRICS
from bench.model_vs_broker import comparison_rows, is_broker
from bench.plots import render_figures, result_set_plots
from bench.output import check_out, shown_path, staged_dir
from bench.results import load
from engine.errors import ConfigError

DETERMINISTIC_NOISE = 0.01
WALL_NOISE = 0.25

# (section, label, key in counts or a derived name, unit, lower is better)
COUNT_ROWS: list[tuple[str, str, str, str, bool]] = [
    ("Writes", "ledger appends, data", "ledger.appends.data", "entries", True),
    ("Writes", "commit/abort markers (v4)", "ledger.appends.marker", "entries", True),
    ("Writes", "coordinator log appends (v4)", "tc.log_appends", "entries", True),
    ("Writes", "TB snapshot writes (v4)", "snapshot.writes", "entries", True),
    ("Writes", "pending-ack log appends (v4)", "pending_ack.appends", "entries", True),
    ("Writes", "op records written (v5)", "meta.op_writes", "records", True),
    ("Writes", "header CAS, end-txn (v5)", "derived.header_cas", "CAS", True),
    ("Writes", "metadata records put or deleted (v5)", "meta.writes", "records", True),
    ("Writes", "metadata reads (v5)", "meta.reads", "records", True),
    ("Writes", "metadata index queries (v5)", "meta.index_queries", "queries", True),
    ("Writes", "cursor state writes", "ledger.cursor_writes", "writes", True),
    ("Writes", "transactional writes per transactional entry", "derived.write_amplification", "ratio", True),
    ("End txn", "END_TXN RPCs sent (v4)", "tc.end_txn.rpcs_sent", "RPCs", True),
    ("End txn", "END_TXN RPCs failed (v4)", "tc.end_txn.rpcs_failed", "RPCs", True),
    ("End txn", "END_TXN RPCs timed out (v4)", "tc.end_txn.rpcs_timed_out", "RPCs", True),
    ("End txn", "end-txn retry rounds (v4)", "tc.end_txn.retries", "rounds", True),
    ("End txn", "event records written (v5 events)", "tc.event_writes", "records", True),
    ("Polling", "dispatcher reads", "dispatch.reads", "reads", True),
    ("Polling", "empty dispatcher reads", "dispatch.empty_reads", "reads", True),
    ("Polling", "time blocked at maxReadPosition", "dispatch.blocked_us", "µs", True),
    ("Polling", "empty reads per blocked second", "derived.empty_reads_per_blocked_s", "reads/s", True),
    ("Notifications", "watch events delivered (v5)", "meta.watch_events", "events", True),
    ("GC", "headers collected (v5)", "tc.gc.headers_deleted", "txns", False),
    ("GC", "finished txns still stored at the end, the GC backlog (v5)", "gc.finished_headers_kept", "txns", True),
    ("GC", "op records not collected at the end (v5)", "gc.op_records_outstanding", "records", True),
    ("GC", "op records force-deleted by GC (v5, PIP sweep)", "tc.gc.forced_op_deletes", "records", True),
    ("GC", "txns kept for slow participants (v5, safe sweep)", "tc.gc.waiting_for_participants", "txns", True),
    ("Recovery", "entries replayed at recovery", "derived.recovery_entries", "entries", True),
    ("Recovery", "metadata records read at recovery", "derived.recovery_records", "records", True),
    ("Recovery", "modelled recovery time (max component)", "derived.recovery_us", "µs", True),
    ("Outcomes", "deliveries", "deliveries", "messages", False),
    ("Outcomes", "redeliveries", "dispatch.redelivered", "messages", True),
    ("Outcomes", "txns committed", "txns.committed", "txns", False),
    ("Outcomes", "txns aborted", "txns.aborted", "txns", False),
    ("Outcomes", "txns aborted by timeout", "derived.timeouts", "txns", False),
    ("Outcomes", "committed txns never visible", "txns.committed_not_visible", "txns", True),
    ("Outcomes", "txns unfinished at end", "txns.unfinished", "txns", True),
    ("Outcomes", "client errors", "derived.client_errors", "errors", True),
    ("Speed", "replay speed (wall clock)", "derived.events_per_second", "events/s", False),
]
LATENCY_PCTS = ("p50_us", "p99_us", "p99.9_us", "max_us")


@dataclass
class Row:
    section: str
    metric: str
    unit: str
    values: dict[str, float | None]
    ratio: float | None  # last engine / first engine (within a set) or new / baseline
    verdict: str  # "better", "worse", "same", "n/a", "not comparable"
    deterministic: bool = True


def _derived(counts: dict[str, int], recovery: list[dict[str, Any]], label: str, run: dict[str, Any]) -> dict[str, float]:
    c = counts
    # Writes a design spends on transactions (markers, logs, snapshots, pending-ack logs or
    # metadata records), per transactional data entry.
    txn_writes = (c.get("ledger.appends.marker", 0) + c.get("tc.log_appends", 0) + c.get("snapshot.writes", 0)
                  + c.get("pending_ack.appends", 0) + c.get("meta.writes", 0))
    txn_entries = c.get("tb.appends.data", 0) or c.get("tb.op_writes", 0)
    blocked_s = c.get("dispatch.blocked_us", 0) / 1e6
    mine = [r for r in recovery if r.get("engine") == label]
    return {
        "derived.write_amplification": round(txn_writes / txn_entries, 3) if txn_entries else 0.0,
        "derived.header_cas": sum(c.get(f"tc.header_cas.{r}", 0) for r in ("ok", "conflict", "reject")),
        "derived.timeouts": c.get("tc.txns.timed_out", 0) + c.get("tc.timeouts", 0),
        "derived.empty_reads_per_blocked_s": round(c.get("dispatch.empty_reads", 0) / blocked_s, 1) if blocked_s else 0.0,
        "derived.recovery_entries": sum(r.get("entries_replayed", 0) for r in mine),
        "derived.recovery_records": sum(r.get("records_read", 0) for r in mine),
        "derived.recovery_us": max((r.get("modelled_us", 0) for r in mine), default=0),
        "derived.client_errors": sum(v for k, v in c.items() if k.startswith("client_errors.")),
        "derived.events_per_second": run.get("events_per_second") or 0,
    }


def _verdict(a: float | None, b: float | None, lower_better: bool, noise: float) -> tuple[float | None, str]:
    if a is None or b is None:
        return None, "n/a"
    if a == 0 and b == 0:
        return 1.0, "same"
    if a == 0:
        return math.inf, ("worse" if lower_better else "better")
    ratio = b / a
    if abs(ratio - 1) <= noise:
        return ratio, "same"
    return ratio, ("better" if (ratio < 1) == lower_better else "worse")


def engine_rows(rs: dict[str, Any]) -> list[Row]:
    """Rows comparing the engines of one result set; verdicts are for the last vs the first."""
    labels = list(rs["manifest"].get("runs", {}))
    values: dict[str, dict[str, float]] = {}
    for label in labels:
        counts = dict(rs["counts"].get(label, {}))
        counts.update(_derived(counts, rs["recovery"], label, rs["manifest"]["runs"][label]))
        for name, s in rs["latency"].get(label, {}).items():
            for pct in LATENCY_PCTS:
                counts[f"latency.{name}.{pct}"] = s[pct]
        values[label] = counts
    rows: list[Row] = []
    names = sorted({n for s in rs["latency"].values() for n in s})
    # wall-clock latencies (a real backend, or the real broker) get the wide noise threshold
    wall = any(run.get("time_mode") == "wall" for run in rs["manifest"].get("runs", {}).values())
    noise = WALL_NOISE if wall else DETERMINISTIC_NOISE
    for name in names:
        for pct in LATENCY_PCTS:
            key = f"latency.{name}.{pct}"
            vals = {lab: values[lab].get(key) for lab in labels}
            ratio, verdict = _verdict(vals[labels[0]], vals[labels[-1]], True, noise) if len(labels) > 1 else (None, "n/a")
            rows.append(Row("Latency", f"{name} {pct[:-3]}", "µs", vals, ratio, verdict, deterministic=not wall))
    for section, metric, key, unit, lower in COUNT_ROWS:
        vals = {lab: values[lab].get(key, 0) for lab in labels}
        if all(v == 0 for v in vals.values()) and section != "Outcomes":
            continue  # nothing happened of this kind in this run
        wall = key == "derived.events_per_second"
        ratio, verdict = _verdict(vals[labels[0]], vals[labels[-1]], lower, WALL_NOISE if wall else DETERMINISTIC_NOISE) if len(labels) > 1 else (None, "n/a")
        if metric.endswith(("(v4)", "(v5)", "(v5 events)")) and 0 in vals.values():
            ratio, verdict = None, "design-specific"  # work one design does and the other has no notion of
        rows.append(Row(section, metric, unit, vals, ratio, verdict, deterministic=not wall))
    return rows


def comparable(base: dict[str, Any], other: dict[str, Any]) -> str | None:
    """None if the two sets replayed the same trace with the same options, else why not."""
    tb, to = base["manifest"].get("trace", {}), other["manifest"].get("trace", {})
    for k in ("rows", "profile", "seed", "events"):
        if tb.get(k) != to.get(k):
            return f"different trace ({k}: {tb.get(k)} vs {to.get(k)})"
    for label, run in base["manifest"].get("runs", {}).items():
        orun = other["manifest"].get("runs", {}).get(label)
        if orun is None:
            continue
        a, b = dict(run["config"]), dict(orun["config"])
        if a != b:
            diff = sorted(k for k in a if a.get(k) != b.get(k))
            return f"different options for {label} ({', '.join(diff)})"
    return None


def ab_rows(base: dict[str, Any], other: dict[str, Any]) -> list[Row]:
    """Each engine in ``other`` against the same engine in ``base``."""
    why = comparable(base, other)
    rows: list[Row] = []
    b_rows = {(r.section, r.metric): r for r in engine_rows(base)}
    for r in engine_rows(other):
        br = b_rows.get((r.section, r.metric))
        if br is None:
            continue
        for label, v in r.values.items():
            if label not in br.values:
                continue
            lower = next((lb for (_, m, _, _, lb) in COUNT_ROWS if m == r.metric), True)
            ratio, verdict = _verdict(br.values[label], v, lower, DETERMINISTIC_NOISE if r.deterministic else WALL_NOISE)
            if why:
                verdict = "not comparable"
            rows.append(Row(r.section, f"{label}: {r.metric}", r.unit, {"baseline": br.values[label], "new": v}, ratio, verdict, r.deterministic))
    return rows


def _fmt(v: float | None) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{int(v):,}"


def _ratio(r: float | None) -> str:
    return "–" if r is None else ("∞" if r == math.inf else f"{r:.2f}×")


def _has_ratios(rows: list[Row]) -> bool:
    """A section shows a ratio column only if some row has one (scenario tables compare
    several columns per row, with a verdict and no single ratio)."""
    return any(r.ratio is not None for r in rows)


def render_markdown(title: str, sections: list[tuple[str, list[str], list[Row], str]], plots: list[str]) -> str:
    out = [f"# {title}", ""]
    for heading, labels, rows, note in sections:
        out += [f"## {heading}", ""]
        if note:
            out += [note, ""]
        ratios = _has_ratios(rows)
        out.append("| section | metric | unit | " + " | ".join(labels) + (" | ratio" if ratios else "") + " | verdict |")
        out.append("|" + "---|" * (len(labels) + 4 + ratios))
        for r in rows:
            vals = " | ".join(_fmt(r.values.get(lab)) for lab in labels)
            ratio = f" {_ratio(r.ratio)} |" if ratios else ""
            out.append(f"| {r.section} | {r.metric} | {r.unit} | {vals} |{ratio} {r.verdict} |")
        out.append("")
    if plots:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    out += ["## What the latencies measure", ""] + [f"- `{k}`: {v}" for k, v in METRICS.items()] + [""]
    return "\n".join(out)


def render_html(title: str, sections: list[tuple[str, list[str], list[Row], str]], plots: list[str]) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{e(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "table{border-collapse:collapse;margin-bottom:2em}td,th{border:1px solid #ccc;padding:4px 8px}"
        "td.num{text-align:right}.better{background:#e6f6e6}.worse{background:#fbe3e3}"
        ".notcomparable{background:#eee;color:#777}.differs{background:#fff1cc}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for heading, labels, rows, note in sections:
        parts.append(f"<h2>{e(heading)}</h2>")
        if note:
            parts.append(f"<p>{e(note)}</p>")
        ratios = _has_ratios(rows)
        parts.append("<table><tr><th>section</th><th>metric</th><th>unit</th>" + "".join(f"<th>{e(lab)}</th>" for lab in labels)
                     + ("<th>ratio</th>" if ratios else "") + "<th>verdict</th></tr>")
        for r in rows:
            cls = r.verdict.replace(" ", "")
            parts.append(
                f"<tr class='{cls}'><td>{e(r.section)}</td><td>{e(r.metric)}</td><td>{e(r.unit)}</td>"
                + "".join(f"<td class='num'>{e(_fmt(r.values.get(lab)))}</td>" for lab in labels)
                + (f"<td class='num'>{e(_ratio(r.ratio))}</td>" if ratios else "") + f"<td>{e(r.verdict)}</td></tr>"
            )
        parts.append("</table>")
    for p in plots:
        parts.append(f"<h3>{e(p)}</h3><img src='{e(p)}' alt='{e(p)}'>")
    parts.append("<h2>What the latencies measure</h2><ul>" + "".join(f"<li><code>{e(k)}</code>: {e(v)}</li>" for k, v in METRICS.items()) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def build_report(results: list[str | Path], out: str | Path, title: str = "txnbench comparison", *,
                 force: bool = False, shown: dict[str, str] | None = None) -> Path:
    """Load and check every input first, then write the report into a staging directory that
    becomes ``out`` only when complete (:mod:`bench.output`). ``shown`` maps staging paths to
    the paths they will have, for the text."""
    check_out(out, force=force)
    sets = [load(p) for p in results]
    for rs in sets:
        rs["path"] = shown_path(rs["path"], shown)
    scenario_files = sorted({q for p in results for q in (Path(p) / "scenarios.json", Path(p).parent / "scenarios.json")
                             if q.is_file()})  # `txnbench scenarios` output next to the results
    check_files = sorted({q for p in results for q in (Path(p) / "check.json", Path(p).parent / "check.json")
                          if q.is_file()})  # `txnbench check` output next to the results
    scenario_parts = [_read_part(f, _scenario_part) for f in scenario_files]
    check_parts = [_read_part(f, lambda f: (check_section(f, shown_path(f, shown)), json.loads(f.read_text())))
                   for f in check_files]
    with staged_dir(out, force=force) as outdir:
        _write_report(sets, outdir, title, scenario_parts, check_parts)
    return Path(out) / "report.html"


def _read_part(path: Path, read: Callable[[Path], Any]) -> Any:
    """A scenarios.json or check.json read whole before anything is written; a malformed or
    foreign one is one ConfigError naming it."""
    try:
        return read(path)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a txnbench {path.name} ({type(exc).__name__}: {exc})") from None


def _scenario_part(path: Path) -> tuple[list[Any], list[Any]]:
    from bench.scenarios import load_figures, load_sections

    return load_sections(path), load_figures(path)


def _write_report(sets: list[dict[str, Any]], outdir: Path, title: str, scenario_parts: list[Any],
                  check_parts: list[Any]) -> None:
    sections: list[tuple[str, list[str], list[Row], str]] = []
    summary: dict[str, Any] = {"title": title, "result_sets": [], "comparisons": []}
    for rs in sets:
        labels = list(rs["manifest"].get("runs", {}))
        rows = engine_rows(rs)
        trace = rs["manifest"].get("trace", {})
        note = (f"Result set `{rs['path']}`: trace {trace.get('path')} ({trace.get('rows')} rows, profile "
                f"{trace.get('profile', '?')}, seed {trace.get('seed', '?')}). Ratio and verdict: {labels[-1]} vs {labels[0]}; "
                f"counts and virtual-time latencies are exact, so 'same' means within {DETERMINISTIC_NOISE:.0%}"
                f"{f'; wall-clock latencies within {WALL_NOISE:.0%}' if any(r.get('time_mode') == 'wall' for r in rs['manifest'].get('runs', {}).values()) else ''}.")
        if is_broker(rs):
            target = rs["manifest"].get("target", {})
            note += (f" Runs on the real broker (Pulsar {target.get('version', '?')} at {target.get('service_url', '?')}, "
                     f"{target.get('pacing', '?')} pacing): both designs of one broker, measured by the trace client.")
        sections.append((f"Engines side by side — {Path(rs['path']).name}", labels, rows, note))
        summary["result_sets"].append({"path": rs["path"], "trace": trace, "runs": rs["manifest"].get("runs", {}),
                                       "rows": [asdict(r) for r in rows]})
    for other in sets[1:]:
        if is_broker(other) != is_broker(sets[0]):
            continue  # a model set and a broker set: held side by side below, not A/B
        rows = ab_rows(sets[0], other)
        why = comparable(sets[0], other)
        note = why and f"Not comparable: {why}." or (
            f"Changes beyond noise only: {DETERMINISTIC_NOISE:.0%} for counts and virtual-time latencies, "
            f"{WALL_NOISE:.0%} for wall-clock figures.")
        flagged = [r for r in rows if r.verdict in ("better", "worse", "not comparable")]
        sections.append((f"{Path(other['path']).name} vs baseline {Path(sets[0]['path']).name}", ["baseline", "new"],
                         flagged or rows[:0], note + ("" if flagged else " No change beyond noise.")))
        summary["comparisons"].append({"baseline": sets[0]["path"], "new": other["path"], "comparable": why is None,
                                       "why_not": why, "changes": [asdict(r) for r in flagged]})
    for broker in (b for b in sets if is_broker(b)):
        for model in (m for m in sets if not is_broker(m)):
            for design, rows, note in comparison_rows(model, broker, Row):
                sections.append((f"Model vs broker ({design}) — {Path(model['path']).name} vs {Path(broker['path']).name}",
                                 ["model", "broker"], rows, note))
                summary.setdefault("model_vs_broker", []).append(
                    {"design": design, "model": model["path"], "broker": broker["path"], "rows": [asdict(r) for r in rows]})
    for scenario_sections, _ in scenario_parts:
        sections += scenario_sections
    for section, data in check_parts:
        sections.append(section)
        summary.setdefault("checks", []).append(data)
    plots = result_set_plots(sets[-1], outdir)
    for _, figures in scenario_parts:
        plots += [f for f in render_figures(figures, outdir) if f not in plots]
    (outdir / "report.md").write_text(render_markdown(title, sections, plots))
    (outdir / "report.html").write_text(render_html(title, sections, plots))
    summary["plots"] = plots
    (outdir / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")


def check_section(path: Path, shown: str | None = None) -> tuple[str, list[str], list[Row], str]:
    """The evidence of a ``txnbench check`` run: histories checked, faults injected by kind,
    violations by kind (each must be zero)."""
    j = json.loads(path.read_text())
    if not (isinstance(j, dict) and isinstance(j.get("histories"), int) and isinstance(j.get("deliveries"), int)
            and isinstance(j.get("faults"), dict) and isinstance(j.get("violations"), dict)):
        raise ValueError("expected an object with histories, deliveries, faults and violations")
    rows = [Row("Check", "histories checked", "histories", {"value": j["histories"]}, None, "n/a"),
            Row("Check", "deliveries checked", "messages", {"value": j["deliveries"]}, None, "n/a")]
    rows += [Row("Faults", f"injected: {k}", "faults", {"value": v}, None, "n/a") for k, v in j["faults"].items()]
    rows += [Row("Violations", k, "violations", {"value": v}, None, "ok" if v == 0 else "VIOLATION")
             for k, v in j["violations"].items()]
    rows.append(Row("Outcomes", "commit asked, outcome never heard (ambiguous_outcome: judged under either outcome)",
                    "txns", {"value": j.get("ambiguous_outcome", 0)}, None, "n/a"))  # absent before bench/check
    note = f"From `{shown or path}` (`txnbench check`); every violation count must be zero."
    return (f"Correctness check — {path.parent.name}", ["value"], rows, note)


def _json_default(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return str(v)
