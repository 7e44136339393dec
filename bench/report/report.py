"""Comparison reports: load result sets, classify rows, render Markdown and HTML from the same
rows, add the plots (:mod:`bench.report.plots`) and write ``summary.json``.

Within one result set, engines are compared side by side (the ratio is other/first engine).
Across result sets (an A/B, :mod:`bench.report.abtest`), runs are matched by engine design and the
differing setting is named as the factor; only changes beyond noise are flagged: counts and
virtual-time latencies are deterministic, so the threshold there only ignores rounding (1 %);
wall-clock figures need a wide one (25 %). Sets of different traces are "nothing comparable".
The report opens with a headline (:mod:`bench.report.headline`), each plot sits beside its table, the
HTML embeds its PNGs, and the simulator's diagnostics go to a footer. A model set and a
real-broker set (``--target pulsar://...``) are held side by side as "model vs broker"
(:mod:`bench.report.model_vs_broker`), never as A/B.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from bench.replay import registry
from bench.report.abtest import Comparison, compare
from bench.report.behind_end_txn import section as around_end_txns
from bench.report.headline import (ab_headline, capacity_line, context_line, headline, held_against_broker, mark_saturated,
                                   render_text, saturated_runs, scenario_findings)
from bench.report.headline import render_markdown as render_headline_md
from bench.report.kept import held_json, held_section, kept_for
from bench.replay.measure import METRICS
from bench.report.model_vs_broker import comparison_rows, is_broker
from bench.report.plots import render_figures, result_set_plots
from bench.replay.output import check_out, shown_path, staged_dir
from bench.replay.repeat import load_repeats, median, spread_verdict
from bench.replay.results import load
from bench.report.rows import Row
from bench.scenarios.scenario_results import load_figures, load_sections
from engine.errors import ConfigError

SCHEMA_VERSION = 1  # summary.json; bench/report/schemas/summary.schema.json describes it

DETERMINISTIC_NOISE = 0.01
WALL_NOISE = 0.25

# (section, label, key in counts or a derived name, unit, lower is better); a section name alone
# is where the registered designs' own rows of that section go (EngineSpec.report_rows)
_ROWS: list[tuple[str, str, str, str, bool] | str] = [
    ("Writes", "ledger appends, data", "ledger.appends.data", "entries", True),
    "Writes",
    ("Writes", "cursor state writes", "ledger.cursor_writes", "writes", True),
    ("Writes", "transactional writes per transactional entry", "derived.write_amplification", "ratio", True),
    "End txn",
    ("Polling", "dispatcher reads", "dispatch.reads", "reads", True),
    ("Polling", "empty dispatcher reads", "dispatch.empty_reads", "reads", True),
    ("Polling", "time blocked at maxReadPosition", "dispatch.blocked_us", "µs", True),
    ("Polling", "empty reads per blocked second", "derived.empty_reads_per_blocked_s", "reads/s", True),
    "Notifications",
    "GC",
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
COUNT_ROWS: list[tuple[str, str, str, str, bool]] = [
    row for entry in _ROWS for row in (
        [entry] if isinstance(entry, tuple) else
        [(r.section, r.metric, r.key, r.unit, r.lower_better)
         for spec in registry.ENGINES.values() for r in spec.report_rows if r.section == entry])
]
# rows one design has and another has no notion of: no verdict when a column is zero
DESIGN_SPECIFIC = {r.key for spec in registry.ENGINES.values() for r in spec.report_rows if r.design_specific}
FOOTER_SECTIONS = ("Speed",)  # the simulator's own figures: shown in the report's footer
LATENCY_PCTS = ("p50_us", "p99_us", "p99.9_us", "max_us")


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


def engine_rows(rs: dict[str, Any], diagnostics: bool = True) -> list[Row]:
    """Rows comparing the engines of one result set; verdicts are for the last vs the first.
    ``diagnostics=False`` leaves out the simulator's own figures (replay speed), which say
    nothing about either design."""
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
            rows.append(Row("Latency", f"{name} {pct[:-3]}", "µs", vals, ratio, verdict, deterministic=not wall,
                            id=f"{name}.{pct[:-3]}"))
    crashed = any(values[lab].get("crashes.broker", 0) for lab in labels)
    for section, metric, key, unit, lower in COUNT_ROWS:
        vals = {lab: values[lab].get(key, 0) for lab in labels}
        if all(v == 0 for v in vals.values()) and section != "Outcomes":
            continue  # nothing happened of this kind in this run
        if section == "Recovery" and not crashed:
            continue  # without a crash these are the topics' first loads, not a recovery
        if section in FOOTER_SECTIONS and not diagnostics:
            continue
        wall = key == "derived.events_per_second"
        ratio, verdict = _verdict(vals[labels[0]], vals[labels[-1]], lower, WALL_NOISE if wall else DETERMINISTIC_NOISE) if len(labels) > 1 else (None, "n/a")
        if key in DESIGN_SPECIFIC and 0 in vals.values():
            ratio, verdict = None, "design-specific"  # work one design does and the other has no notion of
        rows.append(Row(section, metric, unit, vals, ratio, verdict, deterministic=not wall, id=key))
    return _with_repeats(rs, rows, labels)


def _with_repeats(rs: dict[str, Any], rows: list[Row], labels: list[str]) -> list[Row]:
    """For a ``replay --repeat N`` set: each row's values become the medians over the repeats,
    with their min..max spread, and the verdict says "same" when the spreads overlap."""
    samples = load_repeats(rs["path"])
    if not samples:
        return rows
    lower = {key: lb for (_, _, key, _, lb) in COUNT_ROWS}
    out = []
    for r in rows:
        got = {lab: samples.get(lab, {}).get(r.id) for lab in labels}
        if any(not v for v in got.values()):
            out.append(r)
            continue
        vals: dict[str, float | None] = {lab: median(v) for lab, v in got.items() if v}
        spread = {lab: [min(v), max(v)] for lab, v in got.items() if v}
        ratio, verdict = r.ratio, r.verdict
        if len(labels) > 1 and r.verdict != "design-specific":
            ratio, verdict = spread_verdict(got[labels[0]] or [], got[labels[-1]] or [], lower.get(r.id, True))
        out.append(Row(r.section, r.metric, r.unit, vals, ratio, verdict, r.deterministic, r.id, spread))
    return out


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


Section = tuple[str, list[str], list[Row], str]


@dataclass(frozen=True)
class Layout:
    """What surrounds the tables: the headline on top, plots beside the section they illustrate
    (by heading), the simulator's diagnostics in a footer, and where the PNGs are (to embed)."""

    headline: tuple[str, ...] = ()  # Markdown lines
    section_plots: tuple[tuple[str, tuple[str, ...]], ...] = ()
    footer: tuple[str, ...] = ()  # Markdown lines
    image_dir: Path | None = None  # HTML embeds the PNGs found here as data: URIs

    def plots_of(self, heading: str) -> tuple[str, ...]:
        return next((p for h, p in self.section_plots if h == heading), ())


def _md_table(labels: list[str], rows: list[Row]) -> list[str]:
    ratios = _has_ratios(rows)
    out = ["| section | metric | unit | " + " | ".join(labels) + (" | ratio" if ratios else "") + " | verdict |",
           "|" + "---|" * (len(labels) + 4 + ratios)]
    for r in rows:
        vals = " | ".join(_fmt(r.values.get(lab)) for lab in labels)
        ratio = f" {_ratio(r.ratio)} |" if ratios else ""
        out.append(f"| {r.section} | {r.metric} | {r.unit} | {vals} |{ratio} {r.verdict} |")
    return out


def render_markdown(title: str, sections: list[Section], plots: list[str], layout: Layout = Layout(),
                    github: bool = False) -> str:
    """Markdown: headline first, each table followed by its plots, the rest after. ``github``:
    a PR comment — every table inside ``<details>``, no image links (they would be relative)."""
    out = [f"# {title}", ""] + list(layout.headline)
    placed: set[str] = set()
    for heading, labels, rows, note in sections:
        body = ([note, ""] if note else []) + _md_table(labels, rows) + [""]
        mine = [p for p in layout.plots_of(heading) if p in plots]
        placed.update(mine)
        if github:
            out += ["<details>", f"<summary>{html.escape(heading)}</summary>", ""] + body + ["</details>", ""]
        else:
            out += [f"## {heading}", ""] + body + [f"![{p}]({p})" for p in mine] + ([""] if mine else [])
    rest = [p for p in plots if p not in placed]
    if rest and not github:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in rest] + [""]
    if github and plots:
        out += [f"Plots ({len(plots)}) are in report.html (self-contained) next to this file.", ""]
    glossary = [f"- `{k}`: {v}" for k, v in METRICS.items()]
    if github:
        out += ["<details>", "<summary>What the latencies measure</summary>", ""] + glossary + ["", "</details>", ""]
    else:
        out += ["## What the latencies measure", ""] + glossary + [""]
    out += list(layout.footer)
    return "\n".join(out)


def _plot_title(name: str) -> str:
    return name.removesuffix(".png").replace("_", " ")


def _img(name: str, image_dir: Path | None) -> str:
    """An <img> for a plot, embedded as a data: URI when the PNG is at hand (one self-contained file)."""
    src = name
    if image_dir is not None and (image_dir / name).is_file():
        src = "data:image/png;base64," + base64.b64encode((image_dir / name).read_bytes()).decode("ascii")
    return f"<figure><img src='{html.escape(src)}' alt='{html.escape(_plot_title(name))}'></figure>"


def _md_inline_html(line: str) -> str:
    """The little Markdown the headline uses (**bold**, _italic_, `code`) as HTML."""
    import re

    s = html.escape(line)
    s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
    s = re.sub(r"(?<!\w)_\[(.+?)\]_(?!\w)", r"<span class='conf'>[\1]</span>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


def _md_block_html(lines: tuple[str, ...]) -> str:
    out, in_list = [], False
    for line in lines:
        if line.startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_md_inline_html(line[2:])}</li>")
            continue
        if in_list:
            out.append("</ul>")
            in_list = False
        if line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line:
            out.append(f"<p>{_md_inline_html(line)}</p>")
    return "\n".join(out + (["</ul>"] if in_list else []))


def render_html(title: str, sections: list[Section], plots: list[str], layout: Layout = Layout()) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{e(title)}</title><style>body{{font-family:sans-serif;margin:1.2em 2em;max-width:1500px}}"
        "h1{margin:0 0 .3em}.headline{background:#f5f8ff;border:1px solid #c9d6f0;padding:.2em 1em;font-size:15px}"
        ".headline h2{margin:.4em 0}.headline li{margin:.25em 0}.conf{color:#666;font-size:12px}"
        ".pair{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}.plots{display:flex;flex-wrap:wrap;gap:.5em;flex:1;"
        "min-width:460px}figure{margin:0}figure img{width:460px;max-width:100%}"
        "table{border-collapse:collapse;margin-bottom:1.5em;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px}"
        "td.num{text-align:right}.better{background:#e6f6e6}.worse{background:#fbe3e3}"
        ".notcomparable{background:#eee;color:#777}.differs{background:#fff1cc}footer{color:#555;font-size:13px;"
        "border-top:1px solid #ccc;margin-top:2em}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    if layout.headline:
        parts.append(f"<div class='headline'>{_md_block_html(layout.headline)}</div>")
    placed: set[str] = set()
    for heading, labels, rows, note in sections:
        parts.append(f"<h2>{e(heading)}</h2>")
        if note:
            parts.append(f"<p>{_md_inline_html(note)}</p>")
        ratios = _has_ratios(rows)
        table = ["<table><tr><th>section</th><th>metric</th><th>unit</th>" + "".join(f"<th>{e(lab)}</th>" for lab in labels)
                 + ("<th>ratio</th>" if ratios else "") + "<th>verdict</th></tr>"]
        for r in rows:
            cls = r.verdict.replace(" ", "")
            table.append(
                f"<tr class='{cls}'><td>{e(r.section)}</td><td>{e(r.metric)}</td><td>{e(r.unit)}</td>"
                + "".join(f"<td class='num'>{e(_fmt(r.values.get(lab)))}</td>" for lab in labels)
                + (f"<td class='num'>{e(_ratio(r.ratio))}</td>" if ratios else "") + f"<td>{e(r.verdict)}</td></tr>"
            )
        table.append("</table>")
        mine = [p for p in layout.plots_of(heading) if p in plots]
        placed.update(mine)
        parts.append("<div class='pair'><div>" + "\n".join(table) + "</div>"
                     + (("<div class='plots'>" + "".join(_img(p, layout.image_dir) for p in mine) + "</div>") if mine else "")
                     + "</div>")
    rest = [p for p in plots if p not in placed]
    if rest:
        parts.append("<h2>Plots</h2><div class='pair'>" + "".join(_img(p, layout.image_dir) for p in rest) + "</div>")
    parts.append("<h2>What the latencies measure</h2><ul>" + "".join(f"<li><code>{e(k)}</code>: {e(v)}</li>" for k, v in METRICS.items()) + "</ul>")
    if layout.footer:
        parts.append(f"<footer>{_md_block_html(layout.footer)}</footer>")
    parts.append("</body></html>")
    return "\n".join(parts)


# result-set plot -> the table section it illustrates
PLOT_SECTION = {"cdf_": "Latency", "writes.png": "Writes", "polling.png": "Polling", "recovery.png": "Recovery"}


def _split_by_section(heading: str, labels: list[str], rows: list[Row], note: str) -> list[Section]:
    """One table per row section (Latency, Writes, ...) so that each plot sits beside its table."""
    out: list[Section] = []
    for sec in dict.fromkeys(r.section for r in rows):
        out.append((f"{sec} — {heading}", labels, [r for r in rows if r.section == sec], note if not out else ""))
    return out


def _footer(sets: list[dict[str, Any]]) -> list[str]:
    """The simulator's own figures: how fast the replay ran and how much memory it took. They
    describe this machine and this Python program, not either design."""
    lines = ["## Simulator diagnostics", "",
             "How fast the replay ran on this machine and how much memory it took — not a property of either design.", ""]
    for rs in sets:
        for label, run in rs["manifest"].get("runs", {}).items():
            bits = [f"{k.replace('_', ' ')} {run[k]:,}" for k in ("events", "events_per_second", "wall_seconds", "peak_rss_mb")
                    if isinstance(run.get(k), (int, float))]
            lines.append(f"- `{Path(rs['path']).name}` {label}: " + ", ".join(bits))
    return lines + [""]


@dataclass(frozen=True)
class Report:
    html: Path
    markdown: Path
    github: Path
    summary: dict[str, Any]
    comparisons: tuple[Comparison, ...]
    headline_text: tuple[str, ...]  # for the terminal


def _lower_better() -> dict[str, bool]:
    return {key: lower for (_, _, key, _, lower) in COUNT_ROWS}


def build(results: list[str | Path], out: str | Path, title: str = "txnbench comparison", *,
          force: bool = False, shown: dict[str, str] | None = None) -> Report:
    """Load and check every input first, then classify and render (Markdown, GitHub Markdown,
    HTML, summary.json) into a staging directory that becomes ``out`` only when complete
    (:mod:`bench.replay.output`). ``shown`` maps staging paths to the paths they will have, for the text."""
    check_out(out, force=force)
    sets = [load(p) for p in results]
    for rs in sets:  # "dir": where its tables are now; "path": where they will be, for the text
        rs["dir"], rs["path"] = rs["path"], shown_path(rs["path"], shown)
    scenario_files = sorted({q for p in results for q in (Path(p) / "scenarios.json", Path(p).parent / "scenarios.json")
                             if q.is_file()})  # `txnbench scenarios` output next to the results
    check_files = sorted({q for p in results for q in (Path(p) / "check.json", Path(p).parent / "check.json")
                          if q.is_file()})  # `txnbench check` output next to the results
    scenario_parts = [_read_part(f, _scenario_part) for f in scenario_files]
    check_parts = [_read_part(f, lambda f: (check_section(f, shown_path(f, shown)), json.loads(f.read_text())))
                   for f in check_files]
    with staged_dir(out, force=force) as outdir:
        rep = _write_report(sets, outdir, title, scenario_parts, check_parts)
    final = Path(out)
    return replace(rep, html=final / rep.html.name, markdown=final / rep.markdown.name, github=final / rep.github.name)


def _read_part(path: Path, read: Callable[[Path], Any]) -> Any:
    """A scenarios.json or check.json read whole before anything is written; a malformed or
    foreign one is one ConfigError naming it."""
    try:
        return read(path)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a txnbench {path.name} ({type(exc).__name__}: {exc})") from None


def _scenario_part(path: Path) -> tuple[list[Any], list[dict[str, Any]]]:
    """(table sections, the scenarios' data with their findings and figures) of a scenarios.json."""
    load_figures(path)  # a malformed figure is refused here, before anything is written
    return load_sections(path), json.loads(path.read_text())["scenarios"]


def _write_report(sets: list[dict[str, Any]], outdir: Path, title: str, scenario_parts: list[Any],
                  check_parts: list[Any]) -> Report:
    sections: list[Section] = []
    section_plots: list[tuple[str, tuple[str, ...]]] = []
    summary: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "title": title, "headline": [], "result_sets": [],
                               "comparisons": []}
    main = next((rs for rs in sets if not is_broker(rs)), sets[0])
    for rs in sets:
        labels = list(rs["manifest"].get("runs", {}))
        rows = engine_rows(rs, diagnostics=False)
        trace = rs["manifest"].get("trace", {})
        wall = any(r.get("time_mode") == "wall" for r in rs["manifest"].get("runs", {}).values())
        note = (f"Result set `{rs['path']}`: trace {trace.get('path')} ({trace.get('rows')} rows, profile "
                f"{trace.get('profile', '?')}, seed {trace.get('seed', '?')}). Ratio and verdict: {labels[-1]} vs {labels[0]}; "
                f"counts and virtual-time latencies are exact, so 'same' means within {DETERMINISTIC_NOISE:.0%}"
                f"{f'; wall-clock latencies within {WALL_NOISE:.0%}' if wall else ''}.")
        designs = [f"{lab}: {run.get('config', {}).get('design')}" for lab, run in rs["manifest"].get("runs", {}).items()
                   if run.get("config", {}).get("design")]
        if designs:  # which design each column is: the released one, or a model of another
            note += " Columns — " + "; ".join(designs) + "."
        if is_broker(rs):
            target = rs["manifest"].get("target", {})
            note += (f" Runs on the real broker (Pulsar {target.get('version', '?')} at {target.get('service_url', '?')}, "
                     f"{target.get('pacing', '?')} pacing): both designs of one broker, measured by the trace client.")
        split = _split_by_section(f"engines side by side, {Path(rs['path']).name}", labels, rows, note)
        sections += split
        if rs is sets[-1]:
            plots_here = result_set_plots(rs, outdir)
            for heading, *_ in split:
                sec = heading.split(" — ")[0]
                mine = tuple(p for p in plots_here if any(p.startswith(k) and v == sec for k, v in PLOT_SECTION.items()))
                if mine:
                    section_plots.append((heading, mine))
        summary["result_sets"].append({"path": rs["path"], "trace": trace, "runs": rs["manifest"].get("runs", {}),
                                       "rows": [_row_json(r) for r in engine_rows(rs)]})
    main_rows = engine_rows(main, diagnostics=False)
    crashed = any(main["counts"].get(lab, {}).get("crashes.broker", 0) for lab in main["manifest"].get("runs", {}))
    wall = any(r.get("time_mode") == "wall" for r in main["manifest"].get("runs", {}).values())
    findings = headline(main_rows, crashed, WALL_NOISE if wall else DETERMINISTIC_NOISE)
    comparisons: list[Comparison] = []
    extra: list[str] = []
    for other in sets[1:]:
        if is_broker(other) != is_broker(sets[0]):
            continue  # a model set and a broker set: held side by side below, not A/B
        comp = compare(sets[0], other, Row, engine_rows, _verdict, _lower_better(), (DETERMINISTIC_NOISE, WALL_NOISE))
        comparisons.append(comp)
        name = f"{Path(other['path']).name} vs baseline {Path(sets[0]['path']).name}"
        extra.append(f"**A/B {name}**: {comp.summary_line()}")
        note = comp.summary_line() + (f" Pairs (by design and position): {', '.join(p.name for p in comp.pairs)}."
                                      if comp.pairs else "") + (f" Unmatched: {', '.join(comp.unmatched)}." if comp.unmatched else "")
        if not comp.why_not:
            note += (f" Changes beyond noise only: {DETERMINISTIC_NOISE:.0%} for counts and virtual-time latencies, "
                     f"{WALL_NOISE:.0%} for wall-clock figures.")
        sections.append((name, ["baseline", "new"], [c.row for c in comp.changes], note))
        summary["comparisons"].append({
            "baseline": comp.baseline, "new": comp.new, "comparable": comp.why_not is None, "why_not": comp.why_not,
            "factor": list(comp.factor), "pairs": [{"design": p.design, "baseline": p.baseline, "new": p.new} for p in comp.pairs],
            "unmatched": list(comp.unmatched), "rows_compared": len(comp.rows), "verdict": comp.summary_line(),
            "changes": [{**_row_json(c.row), "pair": c.pair} for c in comp.changes]})
    one_engine = len(main["manifest"].get("runs", {})) == 1
    ab = next((c for c in comparisons if c.why_not is None), None)
    if one_engine and ab is not None:  # nothing to rank within the set: answer each question by the A/B
        findings = ab_headline(ab.rows, crashed, WALL_NOISE if wall else DETERMINISTIC_NOISE,
                               (Path(ab.baseline).name, Path(ab.new).name))
    paced = [b for b in sets if is_broker(b) and not _asap(b)]
    models = [m for m in sets if not is_broker(m)]
    paced_models = [m for m in models if not _asap(m)] or models
    for broker in (b for b in sets if is_broker(b) and (b in paced or not paced)):  # asap sets: saturation only
        for model in paced_models:
            for design, rows, note in comparison_rows(model, broker, Row):
                sections.append((f"Model vs broker ({design}) — {Path(model['path']).name} vs {Path(broker['path']).name}",
                                 ["model", "broker"], rows, note))
                summary.setdefault("model_vs_broker", []).append(
                    {"design": design, "model": model["path"], "broker": broker["path"], "rows": [_row_json(r) for r in rows]})
                differs = [r.metric for r in rows if r.verdict == "differs"]
                agree = sum(r.verdict == "equal" for r in rows)
                extra.append(f"**Model vs broker ({design})** — factor: model → Pulsar "
                             f"{broker['manifest'].get('target', {}).get('version', '?')} broker: {agree} rows equal, "
                             f"{len(differs)} differ" + (f" ({', '.join(differs[:4])}{', …' if len(differs) > 4 else ''})." if differs else "."))
    kept = kept_for(main)
    held = held_against_broker(kept)
    if held is not None:
        extra.append(held)
    if len(kept) > 1:  # one kept trace is quoted whole in the headline
        sections.append(held_section(kept, Row))
        summary["held_against_broker"] = held_json(kept)
    capacity = capacity_line(main)
    if capacity is not None:
        extra.append(capacity)
        findings = mark_saturated(findings, saturated_runs(main))
    validation = validation_section(sets)
    if validation is not None:
        v, vsection = validation
        sections.append(vsection)
        around = around_end_txns(v.request_kinds(), Row)
        if around is not None:
            sections.append(around)
        summary["validation"] = v.to_json()
        missed = v.missed()
        extra.append(f"**Model vs broker, against the goals**: {v.tally()}" + (f"; missed: {', '.join(f'{c.design} {c.metric}' for c in missed[:4])}"
                                    f"{', …' if len(missed) > 4 else ''}." if missed else "."))
    scenario_plots: list[str] = []
    for scenario_sections, data in scenario_parts:
        findings += scenario_findings(data)
        for section, scenario in zip(scenario_sections, data):
            sections.append(section)
            files = render_figures(scenario.get("figures", []), outdir)
            scenario_plots += [f for f in files if f not in scenario_plots]
            section_plots.append((section[0], tuple(files)))
    for section, j in check_parts:
        sections.append(section)
        summary.setdefault("checks", []).append(j)
        total = sum(j.get("violations", {}).values())
        extra.append(f"**Correctness check**: {j.get('histories')} histories, {total} violations"
                     + (" (both designs deliver what Pulsar promises on this trace)." if total == 0 else " — see the table."))
    plots = [p for _, ps in section_plots for p in ps if p not in scenario_plots] + scenario_plots
    context = context_line(main)
    layout = Layout(tuple(render_headline_md(context, findings, extra)), tuple(section_plots), tuple(_footer(sets)), outdir)
    (outdir / "report.md").write_text(render_markdown(title, sections, plots, layout))
    github = _fit_comment(render_markdown(title, sections, plots, layout, github=True))
    (outdir / "report.github.md").write_text(github)
    (outdir / "report.html").write_text(render_html(title, sections, plots, layout))
    summary["headline"] = [{"question": f.question, "answer": f.text.replace("**", ""), "winner": f.winner,
                            "ratio": _num(f.ratio), "metric": f.metric, "confidence": f.confidence} for f in findings]
    summary["plots"] = plots
    (outdir / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    return Report(outdir / "report.html", outdir / "report.md", outdir / "report.github.md", summary, tuple(comparisons),
                  tuple(render_text(context, findings, extra)))


def _asap(rs: dict[str, Any]) -> bool:
    """A set run as fast as possible: the broker's (``--pacing asap``) or the model's (every run)."""
    if rs["manifest"].get("target", {}).get("pacing") == "asap":
        return True
    runs = rs["manifest"].get("runs", {}).values()
    return bool(runs) and all(run.get("config", {}).get("pacing") == "asap" for run in runs)


def validation_section(sets: list[dict[str, Any]]) -> tuple[Any, Section] | None:
    """The "model vs broker" section (:mod:`bench.report.validate`): the first model set against the
    first broker set run at the trace's timestamps and, for saturation, the model's asap sets (one,
    or one per design) against every broker set run asap (each design's median rate)."""
    from bench.report.validate import section, validate_sets

    model = next((rs for rs in sets if not is_broker(rs) and not _asap(rs)), None)
    model_asap = [rs for rs in sets if not is_broker(rs) and _asap(rs)]  # one, or one per design
    asap = [rs for rs in sets if is_broker(rs) and _asap(rs)]
    broker = next((rs for rs in sets if is_broker(rs) and not _asap(rs)), asap[0] if asap else None)  # only asap: it is both
    model = model or (model_asap[0] if model_asap else None)
    if model is None or broker is None:
        return None
    v = validate_sets(model, broker, asap or None, model_saturation=model_asap or None)
    return v, section(v, Row)


GITHUB_COMMENT_LIMIT = 65_536  # characters GitHub accepts in one comment


def _fit_comment(text: str) -> str:
    if len(text) <= GITHUB_COMMENT_LIMIT:
        return text
    cut = text[: GITHUB_COMMENT_LIMIT - 200]
    cut = cut[: cut.rfind("\n<details>")] if "\n<details>" in cut else cut
    return cut + "\n\n_(cut to fit a GitHub comment: the full tables are in report.md / report.html)_\n"


def _num(v: float | None) -> float | None:
    """JSON numbers only: an infinite ratio (from zero) becomes null; the verdict says which way."""
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def _row_json(r: Row) -> dict[str, Any]:
    d = asdict(r)
    d["ratio"] = _num(r.ratio)
    d["values"] = {k: _num(v) for k, v in r.values.items()}
    return d


def build_report(results: list[str | Path], out: str | Path, title: str = "txnbench comparison", *,
                 force: bool = False, shown: dict[str, str] | None = None) -> Path:
    return build(results, out, title, force=force, shown=shown).html


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
