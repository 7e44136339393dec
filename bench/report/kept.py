"""The validations kept beside a latency profile (``datasets/validation/**/*.json``, each the
``validation`` object ``txnbench validate`` wrote): how far the model, run with that profile, held
against a real broker, trace by trace and figure by figure.

A figure is one check of :mod:`bench.report.validate` (its section, design and metric). Over the
kept traces it was judged on (its verdict not ``n/a``), it was met where the verdict is ``exact``,
``explained`` or ``within goal``. A figure met on at most half of them is one whose model value a
reader should take as the model's, not the broker's: the headline names every such figure, however
many traces met the rest.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

MET = frozenset({"exact", "explained", "within goal"})
NOT_JUDGED = "n/a"

Kept = list[tuple[str, dict[str, Any]]]  # (path under validation/, validation object)


@dataclass(frozen=True)
class Figure:
    """One check over the kept traces that judged it."""
    section: str  # Counts, Latency, Throughput
    design: str
    metric: str
    met: int
    judged: int
    errors: tuple[float, ...]  # (model - broker) / broker on each judged trace that has one
    missed_on: tuple[str, ...]  # the traces whose verdict was missed or differs

    @property
    def name(self) -> str:
        return self.metric if self.metric.startswith(self.design) else f"{self.design} {self.metric}"

    @property
    def mostly_missed(self) -> bool:
        return 2 * self.met <= self.judged

    @property
    def verdict(self) -> str:
        return ("met on at most half" if self.mostly_missed else "met on all" if self.met == self.judged
                else "met on most")

    def error_range(self) -> str:
        """"model -50% to +77%": the lowest and highest error over the judged traces."""
        if not self.errors:
            return ""
        lo, hi = min(self.errors), max(self.errors)
        return f"model {lo:+.0%}" if lo == hi else f"model {lo:+.0%} to {hi:+.0%}"


def kept_validations(folder: Path, sha256: str) -> Kept:
    """(path under ``folder``, validation object) of each object in ``folder`` or a folder under
    it made with the profile of that sha256 (the sets are kept by what they measured:
    ``validation/dense-probe/default/``)."""
    out = []
    for f in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
        try:
            v = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(v, dict) and "checks" in v and f"sha256 {sha256[:12]}" in str(v.get("profile", "")):
            out.append((f.relative_to(folder).as_posix(), v))
    return out


def kept_for(rs: dict[str, Any]) -> Kept:
    """The validations kept beside the latency profile a model's result set ran with (the
    ``validation/`` folder next to the profile's own folder); none for a broker's set."""
    if rs["manifest"].get("target", {}).get("kind") == "pulsar":
        return []
    for run in rs["manifest"].get("runs", {}).values():
        prof = run.get("config", {}).get("latency_profile") or {}
        if prof.get("sha256") and prof.get("path"):
            return kept_validations(Path(prof["path"]).parent.parent / "validation", prof["sha256"])
    return []


def figures(kept: Kept) -> list[Figure]:
    """Every check of the kept validations, in the order the first trace lists them."""
    seen: dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]] = {}
    for name, v in kept:
        for c in v.get("checks", []):
            seen.setdefault((c.get("section", ""), c["design"], c["metric"]), []).append((name, c))
    out = []
    for (section, design, metric), found in seen.items():
        judged = [(name, c) for name, c in found if c.get("verdict") != NOT_JUDGED]
        if not judged:
            continue
        out.append(Figure(section, design, metric, sum(c["verdict"] in MET for _, c in judged), len(judged),
                          tuple(c["error"] for _, c in judged if c.get("error") is not None),
                          tuple(name.removesuffix(".json") for name, c in judged if c["verdict"] not in MET)))
    return out


def _counts(v: dict[str, Any]) -> tuple[int, int]:
    """(judged rows met, judged rows) of one validation."""
    verdicts = [c.get("verdict") for c in v.get("checks", []) if c.get("verdict") != NOT_JUDGED]
    return sum(x in MET for x in verdicts), len(verdicts)


def tally(kept: Kept) -> tuple[int, int]:
    """(judged rows met, judged rows) over every kept trace."""
    counts = [_counts(v) for _, v in kept]
    return sum(m for m, _ in counts), sum(j for _, j in counts)


def held_line(kept: Kept) -> str:
    """The headline's sentence for several kept traces: the rows met over all of them, the worst
    and best trace, and every figure met on at most half the traces it was judged on."""
    met, judged = tally(kept)
    per_trace = sorted((_share(v), name.removesuffix(".json"), v) for name, v in kept)
    worst, best = per_trace[0], per_trace[-1]
    weak = [f for f in figures(kept) if f.mostly_missed]
    line = (f"**Held against a real broker** with this profile ({len(kept)} traces in `validation/`): {met} of "
            f"{judged} judged rows meet the goals (worst trace {worst[1]} {_met_of(worst[2])}, best {best[1]} "
            f"{_met_of(best[2])})")
    if not weak:
        return line + "; every figure met on most traces (see \"Held against a real broker, figure by figure\")."
    listed = ", ".join(f"{f.name} ({f.met} of {f.judged}" + (f", {f.error_range()}" if f.errors else "") + ")"
                       for f in weak)
    return (line + f"; met on at most half the traces: {listed} — read those figures as the model's, not the "
            "broker's (every figure: \"Held against a real broker, figure by figure\").")


def held_section(kept: Kept, row_cls: Callable[..., Any]) -> tuple[str, list[str], list[Any], str]:
    """The report section: one row per figure, with the traces that met it, those that judged it
    and the model's error over them (median, lowest, highest; in %)."""
    rows = []
    for f in figures(kept):
        err = ({"error % median": round(100 * statistics.median(f.errors), 1),
                "lowest": round(100 * min(f.errors), 1), "highest": round(100 * max(f.errors), 1)}
               if f.errors and f.section != "Counts" else {"error % median": None, "lowest": None, "highest": None})
        rows.append(row_cls(f"{f.section} {f.design}", f.metric, "", {"traces met": f.met, "judged": f.judged, **err},
                            None, f.verdict))
    met, judged = tally(kept)
    traces = ", ".join(f"{name.removesuffix('.json')} {_met_of(v)}"
                       for _, name, v in sorted(((_share(v), n, v) for n, v in kept), key=lambda t: (-t[0], t[1])))
    note = (f"The {len(kept)} validations kept in `validation/` with this latency profile (`txnbench validate`: the "
            f"same trace through the model and a real Pulsar broker): {met} of {judged} judged rows meet the goals. "
            f"Per trace, best first: {traces}. A figure is met where its verdict is exact, explained or within goal; "
            "error = (model - broker) / broker over the traces that judged it (counts: exact or explained, "
            "no error range).")
    return "Held against a real broker, figure by figure", ["traces met", "judged", "error % median", "lowest",
                                                            "highest"], rows, note


def held_json(kept: Kept) -> dict[str, Any]:
    """summary.json's record of the same: the traces' tallies and every figure's."""
    met, judged = tally(kept)
    return {"traces": {name: v.get("tally") for name, v in kept}, "met": met, "judged": judged,
            "figures": [{"section": f.section, "design": f.design, "metric": f.metric, "met": f.met,
                         "judged": f.judged, "errors": list(f.errors), "missed_on": list(f.missed_on),
                         "mostly_missed": f.mostly_missed} for f in figures(kept)]}


def _share(v: dict[str, Any]) -> float:
    met, judged = _counts(v)
    return met / judged if judged else 0.0


def _met_of(v: dict[str, Any]) -> str:
    """"38/42": the trace's judged rows met, of its judged rows."""
    return "{}/{}".format(*_counts(v))
