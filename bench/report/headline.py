"""The report's headline: "what this run shows", one sentence per question, generated from the
classified rows of a result set (:func:`bench.report.report.engine_rows`) and the scenarios' findings.

Each sentence names the winning engine (labels come from the data, never from a fixed list),
by how much, and with what confidence: virtual-time figures are exact (the replay is
deterministic, one run is the answer); wall-time figures are one sample, or the median of
several repeats with their spread, and a difference inside the noise band is called a tie.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from bench.report.kept import Kept, held_line

# (question, row id, lower is better); the row ids are summary.json's (counts/latency keys)
QUESTIONS: tuple[tuple[str, str, bool], ...] = (
    ("Dispatch latency, txn messages (p50)", "dispatch_txn_us.p50", True),
    ("Commit-to-visible (p50)", "commit_to_visible_us.p50", True),
    ("End-txn latency (p50)", "end_txn_us.p50", True),
    ("Publish latency in a txn (p50)", "publish_txn_us.p50", True),
    ("Transactional writes per txn entry (write amplification)", "derived.write_amplification", True),
    ("Polling waste: empty dispatcher reads", "dispatch.empty_reads", True),
    ("Recovery after a broker crash (modelled time)", "derived.recovery_us", True),
)
CLEAR_WIN = 1.10  # below this a real (beyond-noise) difference is reported as "about even"
SCENARIO_CHARS = 260  # a scenario's findings in the headline are cut here (the full text is in its section)
TAIL = {"dispatch_txn_us.p50": "dispatch_txn_us.p99", "commit_to_visible_us.p50": "commit_to_visible_us.p99",
        "end_txn_us.p50": "end_txn_us.p99", "publish_txn_us.p50": "publish_txn_us.p99"}


@dataclass(frozen=True)
class Finding:
    question: str
    text: str  # the answer, one sentence
    winner: str | None  # engine label, or None for a tie / nothing to compare
    ratio: float | None  # runner-up / winner (lower is better) or winner / runner-up; >= 1
    metric: str | None  # row id, None for a scenario finding
    confidence: str


def fmt_value(v: float, unit: str) -> str:
    if unit == "µs":
        return f"{v / 1000:,.2f} ms" if abs(v) >= 1000 else f"{v:,.0f} µs"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.3g} {unit}".strip()
    return f"{int(v):,} {unit}".strip()


def confidence_of(deterministic: bool, noise: float, repeats: int = 1) -> str:
    if deterministic:
        return "exact (virtual time, deterministic)"
    if repeats > 1:
        return f"wall time, median of {repeats} repeats"
    return f"wall time, one sample (differences under {noise:.0%} are noise)"


def answer(question: str, row: Any, lower_better: bool, noise: float, tail: Any = None) -> Finding:
    """One question's answer from one classified row (values per engine label)."""
    vals = {lab: v for lab, v in row.values.items() if v is not None}
    conf = confidence_of(row.deterministic, noise)
    spread = getattr(row, "spread", None)
    if spread and not row.deterministic:
        conf = "wall time, medians over repeats, spread " + ", ".join(
            f"{lab} {fmt_value(lo, row.unit)}–{fmt_value(hi, row.unit)}" for lab, (lo, hi) in spread.items())
        ranked_ = sorted(vals.items(), key=lambda kv: kv[1], reverse=not lower_better)
        (b0, _), (b1, _) = ranked_[0], ranked_[1]
        lo0, hi0 = spread[b0]
        lo1, hi1 = spread[b1]
        if lo0 <= hi1 and lo1 <= hi0:  # the repeats overlap: no winner to call
            listing = " vs ".join(f"{lab} {fmt_value(v, row.unit)}" for lab, v in ranked_)
            return Finding(question, f"tie — the repeats overlap (medians {listing}).", None, None, row.id, conf)
    if len(vals) < 2:
        only = ", ".join(f"{lab} {fmt_value(v, row.unit)}" for lab, v in vals.items()) or "no values"
        return Finding(question, f"{only}: nothing to compare it with.", None, None, row.id, conf)
    ranked = sorted(vals.items(), key=lambda kv: kv[1], reverse=not lower_better)
    (best, bv), (second, sv) = ranked[0], ranked[1]
    listing = " vs ".join(f"{lab} {fmt_value(v, row.unit)}" for lab, v in ranked)
    if bv == sv:
        same = "identical" if all(v == bv for _, v in ranked) else f"{best} and {second} identical"
        return Finding(question, f"tie — {same} ({listing}).", None, 1.0, row.id, conf)
    lo, hi = sorted((bv, sv))
    ratio = hi / lo if lo else None
    if ratio is not None and ratio - 1 <= noise:
        return Finding(question, f"tie within {noise:.0%} noise ({listing}).", None, ratio, row.id, conf)
    how = f"{ratio:.2f}× {'lower' if lower_better else 'higher'}" if ratio is not None else "zero against a non-zero value"
    if ratio is not None and ratio < CLEAR_WIN:
        text = f"about even, {best} {how} ({listing})"
    else:
        text = f"**{best}** wins, {how} ({listing})"
    if tail is not None and len(tail.values) > 1 and None not in tail.values.values():
        tv = sorted(tail.values.items(), key=lambda kv: kv[1])
        tail_best = "tie" if tv[0][1] == tv[-1][1] else f"{tv[0][0]} lower"
        text += f"; at p99 {tail_best} (" + " vs ".join(f"{lab} {fmt_value(v, tail.unit)}" for lab, v in tv) + ")"
    return Finding(question, text + ".", best, ratio, row.id, conf)


def headline(rows: Sequence[Any], crashed: bool, noise: float) -> list[Finding]:
    """The per-question answers for one result set's rows; a question whose row is missing is
    said to have no data (recovery without a crash says so)."""
    by_id = {r.id: r for r in rows}
    out = []
    for question, rid, lower in QUESTIONS:
        row = by_id.get(rid)
        if rid == "derived.recovery_us" and not crashed:
            out.append(Finding(question, "no broker crash in this trace — see the recovery scenarios below.",
                               None, None, rid, "n/a"))
        elif row is None:
            out.append(Finding(question, "not measured in this run (no such events).", None, None, rid, "n/a"))
        else:
            out.append(answer(question, row, lower, noise, by_id.get(TAIL.get(rid, ""))))
    return out


def ab_headline(changes: Sequence[Any], crashed: bool, noise: float, names: tuple[str, str]) -> list[Finding]:
    """The per-question answers when each set holds one engine (``replay --engine v5`` twice, one
    setting changed): the question's row of the A/B (values ``baseline``/``new``), each side named by
    its run label, or by label and set when both sets use one label (``names``: the baseline's and
    the new set's directory names)."""
    by_id: dict[str, Any] = {}
    for c in changes:
        by_id.setdefault(c.row.id, c)
    rows = []
    for rid, change in by_id.items():
        base, new = change.pair.split(" → ") if " → " in change.pair else (change.pair, change.pair)
        label = ({"baseline": base, "new": new} if base != new  # the labels already carry the setting
                 else {"baseline": f"{base} ({names[0]})", "new": f"{new} ({names[1]})"})
        r = change.row
        rows.append(_Relabelled(rid, r.unit, r.deterministic, {label[k]: v for k, v in r.values.items()}))
    return headline(rows, crashed, noise)


@dataclass(frozen=True)
class _Relabelled:
    """An A/B row as :func:`answer` reads an engine row: one value per (run, set)."""
    id: str
    unit: str
    deterministic: bool
    values: dict[str, float | None]
    spread: None = None


def scenario_findings(scenarios: Sequence[dict[str, Any]]) -> list[Finding]:
    """One finding per scenario of a ``scenarios.json``: its question and the findings its code
    derived from its rows (virtual time: exact)."""
    return [Finding(s["question"], " · ".join(s.get("findings", [])) or "no finding recorded.", None, None, None,
                    "exact (virtual time, deterministic)") for s in scenarios]


def held_against_broker(found: Kept) -> str | None:
    """How far the model held against a real broker with the profile a set ran: the validation
    objects kept beside the profile (:func:`bench.report.kept.kept_for`). One is quoted with its
    tally and each missed goal with its error; several by the rows met over all of them and every
    figure met on at most half the traces (:func:`bench.report.kept.held_line`). None when there
    is none (a broker's set, a profile kept without validations)."""
    if len(found) == 1:
        name, v = found[0]
        missed = [_missed(c) for c in v.get("checks", []) if c.get("verdict") == "missed"]
        tally = str(v.get("tally", "?")).replace("meet them", "meet the goals")
        return (f"**Held against a real broker** with this profile (`validation/{name}`): {tally}"
                + (f"; missed: {', '.join(missed)} — read those figures as the model's, not the broker's."
                   if missed else "."))
    return held_line(found) if found else None


def _capacity_waits(rs: dict[str, Any]) -> list[tuple[str, str, float, bool]]:
    """(run, resource, mean wait for a slot per request, saturated) from the ``capacity.*``
    counts; saturated: the mean wait exceeds the mean service (the trace offered more than the
    resource serves)."""
    out = []
    for label in rs["manifest"].get("runs", {}):
        c = rs["counts"].get(label, {})
        for res in sorted({k.split(".")[1] for k in c if k.startswith("capacity.") and k.endswith(".requests")}):
            n = c.get(f"capacity.{res}.requests", 0)
            if n:
                wait, busy = c.get(f"capacity.{res}.queued_us", 0) / n, c.get(f"capacity.{res}.busy_us", 0) / n
                out.append((label, res, wait, wait > busy))
    return out


def saturated_runs(rs: dict[str, Any]) -> list[str]:
    """The runs of a set with a saturated resource (:func:`capacity_line`), in run order."""
    return list(dict.fromkeys(label for label, _, _, hot in _capacity_waits(rs) if hot))


def mark_saturated(findings: Sequence[Finding], saturated: Sequence[str]) -> list[Finding]:
    """The latency answers (``TAIL``'s questions) of a set some of whose runs saturated: a
    saturated run's queue, and with it its latencies, grows with the trace's length, so the
    ratio is this run's, not the design's; the answer says so."""
    if not saturated:
        return list(findings)
    note = (f" Saturated ({', '.join(saturated)}): latencies that grow with the trace's length, a ratio for this "
            "run only (see Capacity).")
    return [dataclasses.replace(f, text=f.text + note) if f.metric in TAIL else f for f in findings]


def capacity_line(rs: dict[str, Any]) -> str | None:
    """Whether the model's runs stayed within the capacity their latency profile gives (its
    ``resources``): per run and resource, the mean wait of a request for a slot (``capacity.*``
    counts). A wait longer than the mean service means the trace offered more than the resource
    serves: the run's latencies are those of a saturated broker. None without resources."""
    runs = rs["manifest"].get("runs", {})
    described = next((r.get("config", {}).get("latency_profile", {}).get("resources") for r in runs.values()
                      if (r.get("config", {}).get("latency_profile") or {}).get("resources")), None)
    if not described:
        return None
    per_run: dict[str, list[str]] = {}
    saturated = []
    for label, res, wait, hot in _capacity_waits(rs):
        name, _, thread = res.partition("@")  # engine/capacity.py: metadata per broker thread
        res = f"{name} ({thread} thread)" if thread else name
        per_run.setdefault(label, []).append(f"{res} {fmt_value(wait, 'µs')}")
        if hot:
            saturated.append(f"{label}'s {res}")
    parts = [f"{label} " + ", ".join(waits) for label, waits in per_run.items()]
    resources = "; ".join(f"{r} {d}" for r, d in sorted(described.items()))
    verdict = (f" — {', '.join(saturated)} saturated (a request waited longer than it is served): this trace offers "
               "more than the profile's broker serves, so those latencies are a saturated broker's"
               if saturated else " — every resource below saturation")
    return (f"**Capacity** (the profile's resources: {resources}): mean wait for a slot per request: "
            + "; ".join(parts) + verdict + ".")


def _missed(check: dict[str, Any]) -> str:
    name = check["metric"] if check["metric"].startswith(check["design"]) else f"{check['design']} {check['metric']}"
    return f"{name} ({check['error']:+.0%})" if check.get("error") is not None and check["section"] == "Latency" else name


def context_line(rs: dict[str, Any]) -> str:
    """Under which model, profile and time mode the set ran (from its manifest)."""
    m = rs["manifest"]
    trace = m.get("trace", {})
    runs = m.get("runs", {})
    cfgs = [r.get("config", {}) for r in runs.values()]
    modes = sorted({str(r.get("time_mode", c.get("time_mode", "?"))) for r, c in zip(runs.values(), cfgs)})
    backends = sorted({f"ledger {c.get('ledger_url', '?')}, metadata {c.get('metadata_url', '?')}" for c in cfgs})
    dispatch = sorted({f"{c.get('dispatch', '?')} dispatch" + (f" ({c['polling']} policy)" if c.get("dispatch") == "polling" and c.get("polling") else "")
                       for c in cfgs})
    where = (f"real broker Pulsar {m.get('target', {}).get('version', '?')}" if m.get("target", {}).get("kind") == "pulsar"
             else "model; " + "; ".join(backends))
    engines = ", ".join(f"{label} ({c['design']})" if c.get("design") else label for label, c in zip(runs, cfgs))
    if m.get("target", {}).get("kind") != "pulsar":  # the model's latencies: which profile they came from
        names = sorted({str((c.get("latency_profile") or {}).get("name", "constants")) for c in cfgs})
        where += f"; latency profile {', '.join(names)}"
    return (f"Engines {engines} — {where}; trace profile {trace.get('profile', '?')}, {trace.get('rows', '?')} events, "
            f"seed {trace.get('seed', '?')}; {', '.join(modes)} time; {', '.join(dispatch)}.")


def _short(question: str) -> str:
    """"Sealed segment mid-txn: what happens ...?" -> "Sealed segment mid-txn"."""
    return question.split(":")[0] if ":" in question else question


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rsplit(" ", 1)[0] + " …"


def _lines(context: str, findings: Sequence[Finding], extra: Sequence[str]) -> tuple[str, list[str], list[str]]:
    confs = {f.confidence for f in findings if f.confidence != "n/a"}
    shared = len(confs) == 1
    if shared:
        context += f" Confidence: {next(iter(confs))} for every figure below."
    runs, scen = [], []
    for f in findings:
        conf = "" if shared or f.confidence == "n/a" else f" _[{f.confidence}]_"
        if f.metric is None:  # a scenario's finding
            scen.append(f"- **{_short(f.question)}**: {_cut(f.text, SCENARIO_CHARS)}{conf}")
        else:
            runs.append(f"- **{f.question}**: {f.text}{conf}")
    return context, runs + [f"- {e}" for e in extra], scen


def render_markdown(context: str, findings: Sequence[Finding], extra: Sequence[str] = ()) -> list[str]:
    context, runs, scen = _lines(context, findings, extra)
    out = ["## What this run shows", "", context, ""] + runs + [""]
    if scen:
        out += ["Review-question scenarios (each reproduced by its command in its section below):", ""] + scen + [""]
    return out


def render_text(context: str, findings: Sequence[Finding], extra: Sequence[str] = ()) -> list[str]:
    """Plain lines for the terminal (no Markdown emphasis)."""
    context, runs, scen = _lines(context, findings, extra)
    plain = lambda s: "  " + s.replace("**", "").replace("_[", "[").replace("]_", "]")
    return (["What this run shows:", "  " + context] + [plain(x) for x in runs]
            + (["  Review-question scenarios:"] + ["  " + plain(x) for x in scen] if scen else []))
