"""``replay --repeat N``: the same trace replayed N times into one result set.

The result set's own files are the first repeat's; ``repeats.json`` records every repeat's
latency percentiles and counts per engine label. The report then uses each row's median and
judges a difference by the spread (min..max over the repeats, both sides) instead of a fixed
noise band on one sample: wall-time figures vary from run to run, virtual-time ones do not
(their spread is zero, so the repeats also show that determinism).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable

from bench.replay.config import RunConfig
from bench.replay.output import MARKER, staged_dir
from engine.errors import ConfigError

REPEATS_FILE = "repeats.json"
PCTS = ("p50_us", "p99_us", "p99.9_us", "max_us")


def _sample(out: Path) -> dict[str, dict[str, float]]:
    """One repeat's figures per label, under the report's row ids."""
    latency = json.loads((out / "latency.json").read_text())
    counts = json.loads((out / "counts.json").read_text())
    sample: dict[str, dict[str, float]] = {}
    for label in set(latency) | set(counts):
        row = {k: float(v) for k, v in counts.get(label, {}).items() if isinstance(v, (int, float))}
        for name, s in latency.get(label, {}).items():
            row.update({f"{name}.{p[:-3]}": float(s[p]) for p in PCTS if p in s})
        sample[label] = row
    return sample


def replay_repeated(trace: str | Path, configs: list[RunConfig], out: str | Path, repeats: int,
                    replay: Callable[[Path], dict[str, Any]], *, force: bool = False) -> dict[str, Any]:
    """Replay ``repeats`` times (``replay(dir)`` runs one replay into a new ``dir``): the first
    run's files and ``repeats.json`` become ``out`` together (:func:`bench.replay.output.staged_dir`),
    the others stay in scratch directories."""
    if repeats < 1:
        raise ConfigError(f"--repeat {repeats}: must be at least 1")
    with staged_dir(out, force=force) as staged, tempfile.TemporaryDirectory(prefix="txnbench-repeat-") as scratch:
        first = Path(scratch) / "r1"
        manifest = replay(first)
        samples = [_sample(first)]
        for i in range(2, repeats + 1):
            replay(Path(scratch) / f"r{i}")
            samples.append(_sample(Path(scratch) / f"r{i}"))
        for entry in first.iterdir():
            if entry.name != MARKER:
                entry.rename(staged / entry.name)
        _write_repeats(staged, trace, repeats, samples, manifest)
    return manifest


def _write_repeats(out: Path, trace: str | Path, repeats: int, samples: list[dict[str, dict[str, float]]],
                   manifest: dict[str, Any]) -> None:
    data = {"repeats": repeats, "trace": str(trace),
            "samples": {label: {rid: [s.get(label, {}).get(rid, 0.0) for s in samples]
                                for rid in sorted({k for s in samples for k in s.get(label, {})})}
                        for label in manifest.get("runs", {})}}
    (out / REPEATS_FILE).write_text(json.dumps(data, indent=1) + "\n")


def load_repeats(path: str | Path) -> dict[str, dict[str, list[float]]] | None:
    """label -> row id -> values over the repeats, or None for a single-run result set."""
    f = Path(path) / REPEATS_FILE
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
        return {lab: {rid: [float(v) for v in vs] for rid, vs in rows.items()} for lab, rows in data["samples"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{f}: not a txnbench repeats file ({exc})") from None


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def spread_verdict(a: list[float], b: list[float], lower_better: bool) -> tuple[float | None, str]:
    """Median ratio b/a; "same" when the two ranges (min..max over the repeats) overlap."""
    ma, mb = median(a), median(b)
    ratio = (mb / ma) if ma else (None if mb == 0 else float("inf"))
    if ma == mb or (min(a) <= max(b) and min(b) <= max(a)):
        return (1.0 if ma == mb else ratio), "same"
    return ratio, ("better" if (mb < ma) == lower_better else "worse")
