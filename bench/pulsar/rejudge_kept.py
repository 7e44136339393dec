"""Every kept broker set judged again at once: ``txnbench validate --rejudge-kept DIR --out OUT
[--latency-profile P]``.

``datasets/validation/`` keeps each fresh-broker set's broker runs packed beside its judgement
(``SET/broker-runs/TRACE.tar.xz``, the trace ``TRACE.parquet`` in the folder above). A change to
the model or its profile is measured on all of them the same way: each archive re-judged
(:func:`bench.pulsar.validate_run.rejudge`, about 6 s each) into ``OUT/SET/TRACE``, and the rows
met over every set, the v5/v4 ratio's verdicts, the rows a goal judges beside what the brokers'
spread leaves reachable (:class:`bench.report.kept.GoalRows`), the rows missed most and those with
the most room, printed and written to ``OUT/summary.json`` in the form the report keeps them
(``bench.report.kept``: the compare's "Held against a real broker"), which with the default profile
it reproduces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from engine.errors import ConfigError

ARCHIVE = ".tar.xz"  # how datasets/validation/*/broker-runs/ packs a set
RATIO = "v5/v4 committed-rate ratio at saturation"


def kept_archives(folder: Path) -> list[tuple[str, Path, Path]]:
    """(name ``SET/TRACE``, archive, trace) of every packed broker set under ``folder``; a
    :class:`ConfigError` naming what is missing when there is none, or when a set's trace is not
    beside the folder's sets."""
    archives = sorted(folder.glob(f"*/broker-runs/*{ARCHIVE}"))
    if not archives:
        raise ConfigError(f"validate --rejudge-kept {folder}: no packed broker set there "
                          f"(SET/broker-runs/TRACE{ARCHIVE})")
    out = []
    for archive in archives:
        trace_name = archive.name.removesuffix(ARCHIVE)
        trace = folder / f"{trace_name}.parquet"
        if not trace.is_file():
            raise ConfigError(f"validate --rejudge-kept {folder}: {archive.relative_to(folder)} ran "
                              f"{trace_name}.parquet, which is not in {folder}")
        out.append((f"{archive.parent.parent.name}/{trace_name}", archive, trace))
    return out


def summary(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The kept record of ``docs`` as the report keeps it (``bench.report.kept.held_json``: each
    set's tally, the rows met over all, every figure's verdicts and errors), with the v5/v4 ratio's
    verdict per set, the figures missed somewhere, most missed first, each with the model's error
    range over the sets that judged it, and the room on each figure: how many more sets one value
    per trace could meet than the model does, most first."""
    from bench.report.kept import figures, goal_rows, held_json

    figs = figures(docs)
    out = held_json(docs, figs)
    ratio = {name: c["verdict"] for name, doc in docs for c in doc["checks"] if c["metric"] == RATIO}
    missed = sorted((f for f in figs if f.met < f.judged), key=lambda f: f.met - f.judged)
    out.update({"sets": len(docs), "ratio": ratio, "ratio_met": sum(v == "within goal" for v in ratio.values()),
                "goal_rows_line": goal_rows(docs, figs).line(),
                "missed": {f.name: {"missed": f.judged - f.met, "judged": f.judged, "errors": f.error_range(),
                                    "spread": f.spread()} for f in missed}})
    room = sorted(((f.reachable - f.met, f.name) for f in figs if f.broker_judged and f.reachable > f.met),
                  key=lambda r: -r[0])
    out["room"] = {name: more for more, name in room}
    return out


def rejudge_kept(folder: str | Path, out: str | Path, profile: str | Path | None = None, *, force: bool = False,
                 progress: Callable[[str], None] | None = None, latency_seed: int | None = None) -> dict[str, Any]:
    """Every packed broker set under ``folder`` judged again with ``profile`` (by default the
    project's) into ``out/SET/TRACE``, the model's draws seeded ``latency_seed`` (by default each
    set's own); :func:`summary` of them, also ``out/summary.json``. Nothing is left in ``out`` if
    one fails."""
    from bench.pulsar.validate_run import rejudge
    from bench.replay.output import check_out, staged_dir

    say = progress or (lambda _line: None)
    sets = kept_archives(Path(folder))
    check_out(out, force=force)
    with staged_dir(out, force=force) as tmp:
        docs = []
        for i, (name, archive, trace) in enumerate(sets, 1):
            doc = rejudge(archive, tmp / name, profile, trace=trace, latency_seed=latency_seed)
            docs.append((name, doc))
            say(f"[{i}/{len(sets)}] {name}: {doc['tally']}")
        result = summary(docs)
        (tmp / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def say_summary(result: dict[str, Any], out: str | Path, show: Callable[[str], None] = print) -> None:
    """The summary in a few lines: rows, the ratio, the rows a goal judges, the figures missed
    most and those with the most room."""
    show(f"{result['sets']} kept sets: {result['met']} of {result['judged']} judged rows meet the goals; "
         f"the v5/v4 ratio within its goal on {result['ratio_met']} of {len(result['ratio'])}")
    if result.get("goal_rows_line"):
        show(result["goal_rows_line"])
    top = list(result["missed"].items())[:5]
    if top:
        show("missed most: " + ", ".join(f"{name} ({m['missed']} of {m['judged']}"
                                         + "".join(f", {m[k]}" for k in ("errors", "spread") if m.get(k)) + ")"
                                         for name, m in top))
    room = list(result.get("room", {}).items())[:5]
    if room:
        show("most room (sets one value per trace could meet beyond the model's): "
             + ", ".join(f"{name} +{more}" for name, more in room))
    show(f"each set's report under {out}; the totals in {Path(out) / 'summary.json'}")
