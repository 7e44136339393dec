"""The validations kept beside a latency profile (``datasets/validation/**/*.json``, each the
``validation`` object ``txnbench validate`` wrote): how far the model, run with that profile, held
against a real broker, trace by trace and figure by figure.

A figure is one check of :mod:`bench.report.validate` (its section, design and metric). Over the
kept traces it was judged on (its verdict not ``n/a``), it was met where the verdict is ``exact``,
``explained`` or ``within goal``. A figure met on at most half of them is one whose model value a
reader should take as the model's, not the broker's: the headline names every such figure, however
many traces met the rest.

Where several kept sets ran the same trace, their brokers' figures spread, and the goals are
judged against each. Three measures of that spread, per figure, by the goal its rows are judged by:

- **reachable**: the most sets one value per trace could meet. The model gives about one: the
  same trace and profile give the same value whichever broker it is held against, unless what it
  takes from the broker moves it (v5's store history, ``model_v5_history``). What the model misses
  beyond that is the brokers' spread; what it misses within it is the model's to mend.
- **missed beyond**: the rows the model missed with its value below every broker value of their
  trace, or above every one: its own error, whichever broker had judged it.
- **the broker against itself**: each set's broker figure judged against each other set's of the
  same trace (ordered pairs, since the error is relative to the second): how often measuring again
  agrees with a measurement, the yardstick a model is read against.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path, PurePosixPath
from typing import Any, Callable

MET = frozenset({"exact", "explained", "within goal"})
NOT_JUDGED = "n/a"
GOAL_VERDICTS = frozenset({"within goal", "missed"})  # a row judged against a goal (not a count)
RATIO = "v5/v4 committed-rate ratio at saturation"

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
    # the broker against itself: ordered pairs of kept sets of one trace whose broker figures
    # meet the row's goal, of those judged (0 of 0: no goal, or no trace kept twice)
    broker_met: int = 0
    broker_judged: int = 0
    reachable: int = 0  # the most of its goal rows one value per trace could meet (0: no goal)
    beyond: int = 0  # rows missed with the model below every broker value of the trace, or above

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

    def spread(self) -> str:
        """"one value per trace could meet 15, the model beyond every broker on 11, brokers agreeing
        on 48% of pairs": the brokers' spread on this figure (module doc); "" where no trace was
        kept from two."""
        if not self.broker_judged:
            return ""
        return (f"one value per trace could meet {self.reachable}, the model beyond every broker on {self.beyond}, "
                f"brokers agreeing on {self.broker_met / self.broker_judged:.0%} of pairs")

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
    seen: dict[tuple[str, str, str], list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
    for name, v in kept:
        for c in v.get("checks", []):
            seen.setdefault((c.get("section", ""), c["design"], c["metric"]), []).append((name, c, v))
    out = []
    for (section, design, metric), found in seen.items():
        judged = [(name, c) for name, c, _ in found if c.get("verdict") != NOT_JUDGED]
        if not judged:
            continue
        out.append(Figure(section, design, metric, sum(c["verdict"] in MET for _, c in judged), len(judged),
                          tuple(c["error"] for _, c in judged if c.get("error") is not None),
                          tuple(name.removesuffix(".json") for name, c in judged if c["verdict"] not in MET),
                          *_broker_spread(found)))
    return out


def trace_of(name: str) -> str:
    """The trace a kept validation ran: its file's name (``fresh-default-7/small-slow-2000.json``)."""
    return PurePosixPath(name).name.removesuffix(".json")


def tolerance(check: dict[str, Any], goals: dict[str, Any]) -> float | None:
    """The goal a row is judged by (a relative error), from the validation's ``goals``; None for a
    row no goal judges (a count, a design's rate)."""
    if check.get("verdict") not in GOAL_VERDICTS:
        return None
    metric = check["metric"]
    key = "ratio" if metric == RATIO else metric.rsplit(" ", 1)[-1]
    value = goals.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _broker_spread(found: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> tuple[int, int, int, int]:
    """(pairs met, pairs judged, reachable, missed beyond) of one figure's broker values, by the goal
    each was judged by: every ordered pair of kept sets of one trace, the first's value judged
    against the second's; per trace the most of its values one value could meet (the greatest
    overlap of the ranges [b(1 - goal), b(1 + goal)], found at one of their ends), summed; and the
    rows missed with the model's value below every broker value of its trace or above every one."""
    by_trace: dict[str, list[tuple[float, float, Any, str]]] = {}
    for name, c, v in found:
        tol, broker = tolerance(c, v.get("goals") or {}), c.get("broker")
        if tol is not None and isinstance(broker, (int, float)) and broker:
            by_trace.setdefault(trace_of(name), []).append((float(broker), tol, c.get("model"), c["verdict"]))
    met = judged = reachable = beyond = 0
    for values in by_trace.values():
        for (a, *_), (b, tol, *_) in permutations(values, 2):
            judged += 1
            met += abs(a - b) <= tol * abs(b)
        ends = [b + way * tol * abs(b) for b, tol, *_ in values for way in (-1, 1)]
        reachable += max(sum(abs(end - b) <= tol * abs(b) * (1 + 1e-12) for b, tol, *_ in values) for end in ends)
        low, high = min(b for b, *_ in values), max(b for b, *_ in values)
        beyond += sum(verdict == "missed" and isinstance(m, (int, float)) and not low <= m <= high
                      for _, _, m, verdict in values)
    return met, judged, reachable, beyond


@dataclass(frozen=True)
class GoalRows:
    """Over the rows a goal judges (latency, the v5/v4 ratio): the model's met and judged, the
    most one value per trace and figure could meet, the rows missed beyond every broker value of
    their trace, and the broker's pairs met and judged (:func:`_broker_spread` of every figure)."""
    met: int
    judged: int
    reachable: int
    beyond: int
    broker_met: int
    broker_judged: int

    def line(self) -> str:
        """"on the rows a goal judges (...) the model met 430 of 522 (82%), of the 502 (96%) one
        value per trace and figure could; 44 of its 92 misses lie beyond every broker's value of their
        trace; each trace's broker sets held against one another met 2,161 of 2,610 pairs (83%)":
        "" without such rows; the brokers' spread only where a trace was kept from two."""
        if not self.judged:
            return ""
        line = (f"on the rows a goal judges (latency, the v5/v4 ratio) the model met {self.met:,} of {self.judged:,} "
                f"({self.met / self.judged:.0%})")
        if self.broker_judged:
            line += (f", of the {self.reachable:,} ({self.reachable / self.judged:.0%}) one value per trace and "
                     f"figure could meet; {self.beyond:,} of its {self.judged - self.met:,} misses lie beyond every "
                     f"broker's value of their trace; each trace's broker sets held against one another the same way "
                     f"met {self.broker_met:,} of {self.broker_judged:,} pairs "
                     f"({self.broker_met / self.broker_judged:.0%})")
        return line

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def goal_rows(kept: Kept, figs: list[Figure] | None = None) -> GoalRows:
    """:class:`GoalRows` of the kept validations (``figs``: their :func:`figures`, if at hand)."""
    met = judged = 0
    for _, v in kept:
        for c in v.get("checks", []):
            if tolerance(c, v.get("goals") or {}) is not None:
                judged += 1
                met += c["verdict"] in MET
    figs = figures(kept) if figs is None else figs
    return GoalRows(met, judged, sum(f.reachable for f in figs), sum(f.beyond for f in figs),
                    sum(f.broker_met for f in figs), sum(f.broker_judged for f in figs))


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
    figs = figures(kept)
    weak = [f for f in figs if f.mostly_missed]
    line = (f"**Held against a real broker** with this profile ({len(kept)} traces in `validation/`): {met} of "
            f"{judged} judged rows meet the goals (worst trace {worst[1]} {_met_of(worst[2])}, best {best[1]} "
            f"{_met_of(best[2])})")
    goals = goal_rows(kept, figs).line()
    if goals:
        line += "; " + goals
    if not weak:
        return line + "; every figure met on most traces (see \"Held against a real broker, figure by figure\")."
    listed = ", ".join(f"{f.name} ({f.met} of {f.judged}" + (f", {f.error_range()}" if f.errors else "")
                       + (f"; {f.spread()}" if f.broker_judged else "") + ")" for f in weak)
    return (line + f"; met on at most half the traces: {listed} — read those figures as the model's, not the "
            "broker's (every figure: \"Held against a real broker, figure by figure\").")


def held_section(kept: Kept, row_cls: Callable[..., Any]) -> tuple[str, list[str], list[Any], str]:
    """The report section: one row per figure, with the traces that met it, those that judged it
    and the model's error over them (median, lowest, highest; in %)."""
    rows = []
    figs = figures(kept)
    for f in figs:
        err = ({"error % median": round(100 * statistics.median(f.errors), 1),
                "lowest": round(100 * min(f.errors), 1), "highest": round(100 * max(f.errors), 1)}
               if f.errors and f.section != "Counts" else {"error % median": None, "lowest": None, "highest": None})
        pairs = ({"reachable": f.reachable, "missed beyond": f.beyond, "broker pairs met": f.broker_met,
                  "pairs": f.broker_judged} if f.broker_judged
                 else {"reachable": None, "missed beyond": None, "broker pairs met": None, "pairs": None})
        rows.append(row_cls(f"{f.section} {f.design}", f.metric, "",
                            {"traces met": f.met, "judged": f.judged, **err, **pairs}, None, f.verdict))
    met, judged = tally(kept)
    goals = goal_rows(kept, figs).line()
    traces = ", ".join(f"{name.removesuffix('.json')} {_met_of(v)}"
                       for _, name, v in sorted(((_share(v), n, v) for n, v in kept), key=lambda t: (-t[0], t[1])))
    note = (f"The {len(kept)} validations kept in `validation/` with this latency profile (`txnbench validate`: the "
            f"same trace through the model and a real Pulsar broker): {met} of {judged} judged rows meet the goals. "
            f"Per trace, best first: {traces}. A figure is met where its verdict is exact, explained or within goal; "
            "error = (model - broker) / broker over the traces that judged it (counts: exact or explained, "
            "no error range). Where a trace was kept from several brokers: reachable = the most of the traces "
            "judged that one value per trace could meet (the model gives about one: what it misses beyond that is "
            "the brokers' spread); missed beyond = the traces missed with the model's value below every broker's of "
            "that trace or above every one (the model's own error, whichever broker judged it); broker pairs met = "
            "each broker's figure judged against each other one's of the same trace by the same goal, of the ordered "
            "pairs (how often measuring again agrees). " + (goals[:1].upper() + goals[1:] + "." if goals else ""))
    columns = ["traces met", "judged", "error % median", "lowest", "highest", "reachable", "missed beyond",
               "broker pairs met", "pairs"]
    return "Held against a real broker, figure by figure", columns, rows, note.rstrip()


def held_json(kept: Kept, figs: list[Figure] | None = None) -> dict[str, Any]:
    """summary.json's record of the same: the traces' tallies and every figure's (``figs``: the
    kept validations' :func:`figures`, if at hand)."""
    met, judged = tally(kept)
    figs = figures(kept) if figs is None else figs
    return {"traces": {name: v.get("tally") for name, v in kept}, "met": met, "judged": judged,
            "goal_rows": goal_rows(kept, figs).to_json(),
            "figures": [{"section": f.section, "design": f.design, "metric": f.metric, "met": f.met,
                         "judged": f.judged, "errors": list(f.errors), "missed_on": list(f.missed_on),
                         "mostly_missed": f.mostly_missed, "broker_pairs_met": f.broker_met,
                         "broker_pairs": f.broker_judged, "reachable": f.reachable, "missed_beyond": f.beyond}
                        for f in figs]}


def _share(v: dict[str, Any]) -> float:
    met, judged = _counts(v)
    return met / judged if judged else 0.0


def _met_of(v: dict[str, Any]) -> str:
    """"38/42": the trace's judged rows met, of its judged rows."""
    return "{}/{}".format(*_counts(v))
