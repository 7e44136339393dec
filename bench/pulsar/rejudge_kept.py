"""Every kept broker set judged again at once: ``txnbench validate --rejudge-kept DIR --out OUT
[--latency-profile P] [--latency-seed N | --latency-seeds A-B]``.

``datasets/validation/`` keeps each fresh-broker set's broker runs packed beside its judgement
(``SET/broker-runs/TRACE.tar.xz``, the trace ``TRACE.parquet`` in the folder above). A change to
the model or its profile is measured on all of them the same way: each archive re-judged
(:func:`bench.pulsar.validate_run.rejudge`, about 6 s each) into ``OUT/SET/TRACE``, and the rows
met over every set, the v5/v4 ratio's verdicts, the rows a goal judges beside what the brokers'
spread leaves reachable (:class:`bench.report.kept.GoalRows`), the rows missed most and those with
the most room, printed and written to ``OUT/summary.json`` in the form the report keeps them
(``bench.report.kept``: the compare's "Held against a real broker"), which with the default profile
it reproduces. The model's latency draws move the record by several rows (validation/README.md,
session 44), so ``--latency-seeds`` judges them once per seed and gives the spread.
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


def parse_seeds(spec: str) -> list[int]:
    """``--latency-seeds``: ``A-B`` (every seed from A to B) or ``A,B,...``; two at least, each once."""
    try:
        if "-" in spec and "," not in spec:
            lo, hi = (int(x) for x in spec.split("-", 1))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in spec.split(",")]
    except ValueError:
        seeds = []
    if len(seeds) < 2 or len(set(seeds)) < len(seeds) or min(seeds) < 0:
        raise ConfigError(f"validate --latency-seeds {spec!r}: expected A-B or A,B,... (two seeds at least, "
                          "each once, >= 0)")
    return seeds


def rejudge_seeds(folder: str | Path, out: str | Path, seeds: list[int], profile: str | Path | None = None, *,
                  force: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """:func:`rejudge_kept` once per seed of the model's latency draws, each into ``out/seed-N``;
    every seed's summary and the spread over them (the rows, the ratio's sets and the rows a goal
    judges: mean, least and most), also ``out/summary.json``. A record's rows move with the draws
    alone, so two profiles are compared over the same seeds. Nothing is left in ``out`` if one
    fails."""
    import statistics

    from bench.replay.output import check_out, staged_dir

    say = progress or (lambda _line: None)
    check_out(out, force=force)
    kept_archives(Path(folder))  # refused before anything runs
    with staged_dir(out, force=force) as tmp:
        each: dict[str, dict[str, Any]] = {}
        for seed in seeds:
            each[str(seed)] = result = rejudge_kept(folder, tmp / f"seed-{seed}", profile, latency_seed=seed)
            say(f"seed {seed}: {result['met']} of {result['judged']} rows, the ratio on {result['ratio_met']} of "
                f"{len(result['ratio'])}")

        def spread(values: list[int]) -> dict[str, float]:
            # fmean: 45.0 even when the mean is integral (mean gives 45), as the summary's line prints it
            return {"mean": round(statistics.fmean(values), 1), "min": min(values), "max": max(values)}

        doc = {"seeds": each, "over_seeds": {
            "seeds": seeds, "judged": next(iter(each.values()))["judged"],
            "met": spread([r["met"] for r in each.values()]),
            "ratio_met": spread([r["ratio_met"] for r in each.values()]),
            "goal_rows_met": spread([r["goal_rows"]["met"] for r in each.values() if r.get("goal_rows")])}}
        (tmp / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def say_seeds(doc: dict[str, Any], out: str | Path, show: Callable[[str], None] = print) -> None:
    """The spread over the seeds in a line or two."""
    over = doc["over_seeds"]
    seeds = ", ".join(str(s) for s in over["seeds"])
    show(f"over latency seeds {seeds}: {over['met']['mean']} of {over['judged']} judged rows meet the goals on "
         f"average ({over['met']['min']}-{over['met']['max']}); the v5/v4 ratio within its goal on "
         f"{over['ratio_met']['mean']} sets ({over['ratio_met']['min']}-{over['ratio_met']['max']})")
    show(f"each seed's sets under {Path(out)}/seed-N; the totals in {Path(out) / 'summary.json'}")


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
