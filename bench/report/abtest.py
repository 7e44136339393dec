"""A/B of two result sets of the same trace that differ in a setting (dispatch mode, polling
policy, v5 variant, GC mode, latency profile, backend...).

Runs are matched by engine *design* (``config.engine``) and position among the runs of that
design, not by label, because the label often carries the very setting that differs
(``v5-shipped`` vs ``v5-state-events``). The settings that differ between matched runs are named as the
factor. When nothing can be matched (another trace, no design in common) the comparison says
"nothing comparable" and why — never "no change".

``--fail-on METRIC:THRESHOLD`` (as pytest-benchmark's ``--benchmark-compare-fail``): METRIC is a
summary row id (``end_txn_us.p50``, ``ledger.appends.marker``...), THRESHOLD ``10%`` (relative to
the baseline) or a number (absolute, in the row's unit); a change in the worse direction beyond
both the threshold and the noise band is a regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from bench.replay.repeat import spread_verdict
from engine.errors import ConfigError

IGNORED = ("label", "design")  # derived from the config fields (the factor is named by those)


@dataclass(frozen=True)
class Pair:
    design: str
    baseline: str  # label in the baseline set
    new: str  # label in the new set

    @property
    def name(self) -> str:
        return self.baseline if self.baseline == self.new else f"{self.baseline} → {self.new}"


@dataclass(frozen=True)
class Change:
    pair: str
    row: Any  # bench.report.report.Row with values {"baseline": ..., "new": ...}


@dataclass(frozen=True)
class Comparison:
    baseline: str
    new: str
    why_not: str | None  # set when nothing was compared
    factor: tuple[str, ...]  # "dispatch: polling → notify", one per differing setting
    pairs: tuple[Pair, ...]
    rows: tuple[Change, ...]  # every row compared
    unmatched: tuple[str, ...]  # runs present on one side only

    @property
    def changes(self) -> tuple[Change, ...]:
        return tuple(c for c in self.rows if c.row.verdict in ("better", "worse"))

    def summary_line(self) -> str:
        if self.why_not:
            return f"Nothing comparable: {self.why_not}."
        factor = "; ".join(self.factor) if self.factor else "no setting differs (a rerun)"
        worse = [c for c in self.changes if c.row.verdict == "worse"]
        better = [c for c in self.changes if c.row.verdict == "better"]
        if not self.changes:
            return f"Factor: {factor}. No change beyond noise in {len(self.rows)} rows compared."
        top = sorted(worse or better, key=lambda c: -_magnitude(c.row.ratio))[:3]
        shown = ", ".join(f"{c.pair} {c.row.id} {_ratio_text(c.row.ratio)}" for c in top)
        return (f"Factor: {factor}. {len(worse)} rows worse, {len(better)} better of {len(self.rows)} compared; "
                f"largest {'regressions' if worse else 'improvements'}: {shown}.")


def _magnitude(r: float | None) -> float:
    if r is None:
        return 0.0
    if r == math.inf or r == 0:
        return math.inf
    return max(r, 1 / r)


def _ratio_text(r: float | None) -> str:
    return "–" if r is None else ("∞" if r == math.inf else f"{r:.2f}×")


def _flat(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def settings(rs: dict[str, Any], label: str) -> dict[str, Any]:
    """A run's settings, flattened (``latency.meta.cas``), plus where it ran."""
    run = rs["manifest"]["runs"][label]
    # the latency profile's identity is checked apart (profile_difference); its seed and
    # overrides stay settings
    out = {k: v for k, v in _flat(dict(run.get("config", {}))).items() if k not in IGNORED
           and not (k.startswith("latency_profile.") and k.split(".")[1] not in ("seed", "overrides"))}
    out["time_mode"] = run.get("time_mode", out.get("time_mode"))
    target = rs["manifest"].get("target", {})
    out["target"] = f"pulsar broker {target.get('version', '?')}" if target.get("kind") == "pulsar" else "model"
    return out


def pair_runs(base: dict[str, Any], other: dict[str, Any]) -> tuple[list[Pair], list[str]]:
    """Runs matched by design and position; the labels left over on either side."""
    def by_design(rs: dict[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for label, run in rs["manifest"].get("runs", {}).items():
            out.setdefault(str(run.get("config", {}).get("engine", label)), []).append(label)
        return out

    a, b = by_design(base), by_design(other)
    pairs, unmatched = [], []
    for design in list(a) + [d for d in b if d not in a]:
        la, lb = a.get(design, []), b.get(design, [])
        pairs += [Pair(design, x, y) for x, y in zip(la, lb)]
        unmatched += [f"baseline {x}" for x in la[len(lb):]] + [f"new {y}" for y in lb[len(la):]]
    return pairs, unmatched


def factor_of(base: dict[str, Any], other: dict[str, Any], pairs: Sequence[Pair]) -> tuple[str, ...]:
    diffs: dict[str, set[str]] = {}
    for p in pairs:
        sa, sb = settings(base, p.baseline), settings(other, p.new)
        for k in sorted(set(sa) | set(sb)):
            if sa.get(k) != sb.get(k):
                diffs.setdefault(k, set()).add(f"{sa.get(k)} → {sb.get(k)}")
    return tuple(f"{k}: {', '.join(sorted(v))}" for k, v in diffs.items())


def trace_difference(base: dict[str, Any], other: dict[str, Any]) -> str | None:
    tb, to = base["manifest"].get("trace", {}), other["manifest"].get("trace", {})
    for k in ("rows", "profile", "seed", "events"):
        if tb.get(k) != to.get(k):
            return f"different trace ({k}: {tb.get(k)} vs {to.get(k)})"
    return None


def _profile(rs: dict[str, Any], label: str) -> tuple[str, str] | None:
    """(name, sha256) of the latency profile a virtual-time model run used; None for a broker's
    or a wall-time run, where none applies. Results from before profiles were recorded ran the built-in constants."""
    run = rs["manifest"]["runs"][label]
    if rs["manifest"].get("target", {}).get("kind") == "pulsar" or run.get("time_mode") == "wall":
        return None  # real backends' times: no profile went into them
    rec = run.get("config", {}).get("latency_profile")
    if not isinstance(rec, dict):
        from engine.profile import LatencyProfile

        c = LatencyProfile.constants()
        return c.name, c.sha256
    return str(rec.get("name")), str(rec.get("sha256"))


def profile_difference(base: dict[str, Any], other: dict[str, Any], pairs: Sequence[Pair]) -> str | None:
    """Why runs modelled with different latency profiles are not an A/B (their times differ by
    the inputs, not by a setting), or None."""
    for p in pairs:
        a, b = _profile(base, p.baseline), _profile(other, p.new)
        if a is not None and b is not None and a != b:
            return (f"different latency profiles ({p.name}: baseline {a[0]} sha256 {a[1][:12]}, new {b[0]} "
                    f"sha256 {b[1][:12]}): times modelled from different inputs are not an A/B")
    return None


def compare(base: dict[str, Any], other: dict[str, Any], row_cls: Any, engine_rows: Any, verdict: Any,
            lower_better: dict[str, bool], noise: tuple[float, float]) -> Comparison:
    """Each matched run of ``other`` against its run in ``base``, row by row (by row id).

    ``engine_rows``/``verdict``/``row_cls`` come from :mod:`bench.report.report` (passed in so that this
    module does not import it back); ``noise`` is (deterministic, wall)."""
    why = trace_difference(base, other)
    pairs, unmatched = pair_runs(base, other)
    if why is None and not pairs:
        designs = lambda rs: ", ".join(sorted({str(r.get("config", {}).get("engine", k)) for k, r in rs["manifest"].get("runs", {}).items()}))
        why = f"no engine design in common (baseline: {designs(base) or 'none'}; new: {designs(other) or 'none'})"
    if why is None:
        why = profile_difference(base, other, pairs)
    if why:
        return Comparison(base["path"], other["path"], why, (), tuple(pairs), (), tuple(unmatched))
    b_rows = {r.id: r for r in engine_rows(base, diagnostics=False)}
    rows: list[Change] = []
    for r in engine_rows(other, diagnostics=False):
        br = b_rows.get(r.id)
        if br is None:
            continue
        for p in pairs:
            a, b = br.values.get(p.baseline), r.values.get(p.new)
            if a is None and b is None:
                continue
            det = r.deterministic and br.deterministic
            sa, sb = (br.spread or {}).get(p.baseline), (r.spread or {}).get(p.new)
            if sa and sb and a is not None and b is not None:  # repeated runs: medians, judged by their spreads
                ratio, v = spread_verdict([sa[0], a, sa[1]], [sb[0], b, sb[1]], lower_better.get(r.id, True))
            else:
                ratio, v = verdict(a, b, lower_better.get(r.id, True), noise[0] if det else noise[1])
            rows.append(Change(p.name, row_cls(r.section, f"{p.name}: {r.metric}", r.unit, {"baseline": a, "new": b},
                                               ratio, v, det, id=r.id)))
    why_empty = None if rows else "the two sets have no row in common"
    return Comparison(base["path"], other["path"], why_empty, factor_of(base, other, pairs), tuple(pairs),
                      tuple(rows), tuple(unmatched))


@dataclass(frozen=True)
class FailOn:
    metric: str
    threshold: float
    relative: bool
    spec: str


def parse_fail_on(spec: str) -> FailOn:
    metric, sep, thr = spec.rpartition(":")
    if not sep or not metric or not thr:
        raise ConfigError(f"--fail-on {spec!r}: expected METRIC:THRESHOLD, e.g. end_txn_us.p50:10%")
    relative = thr.endswith("%")
    try:
        value = float(thr[:-1] if relative else thr)
    except ValueError:
        raise ConfigError(f"--fail-on {spec!r}: threshold {thr!r} is not a number or a percentage") from None
    if value < 0 or math.isnan(value):
        raise ConfigError(f"--fail-on {spec!r}: threshold must be >= 0")
    return FailOn(metric, value / 100 if relative else value, relative, spec)


def regressions(comparisons: Sequence[Comparison], rules: Sequence[FailOn]) -> list[str]:
    """One line per regression beyond a rule's threshold. Raises ConfigError when a rule cannot
    be checked at all (no comparable pair of sets, or no such row), so CI never passes by default."""
    usable = [c for c in comparisons if not c.why_not]
    if rules and not usable:
        why = "; ".join(c.why_not or "" for c in comparisons) or "only one result set given"
        raise ConfigError(f"--fail-on needs two comparable result sets: nothing comparable ({why})")
    out = []
    for rule in rules:
        hits = [c for comp in usable for c in comp.rows if c.row.id == rule.metric]
        if not hits:
            known = sorted({c.row.id for comp in usable for c in comp.rows})
            raise ConfigError(f"--fail-on {rule.spec}: no row {rule.metric!r} in the comparison; "
                              f"row ids include {', '.join(known[:12])}")
        for c in hits:
            a, b = c.row.values["baseline"], c.row.values["new"]
            if c.row.verdict != "worse" or a is None or b is None:
                continue
            delta = abs(b - a)
            beyond = (delta / abs(a) > rule.threshold if a else True) if rule.relative else delta > rule.threshold
            if beyond:
                out.append(f"regression: {c.pair} {rule.metric} {a:g} → {b:g} {c.row.unit} "
                           f"({_ratio_text(c.row.ratio)}, threshold {rule.spec.rpartition(':')[2]})")
    return out
