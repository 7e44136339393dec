"""Every kept broker set judged again at once (bench.pulsar.rejudge_kept, validate --rejudge-kept)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.pulsar.rejudge_kept import kept_archives, rejudge_kept, say_summary, summary
from bench.report.kept import tally
from engine.errors import ConfigError

KEPT = Path(__file__).resolve().parents[2] / "datasets" / "validation"


def _check(design: str, metric: str, verdict: str, error: float | None = None,
           broker: float | None = None) -> dict[str, Any]:
    model = None if error is None or broker is None else broker * (1 + error)
    return {"design": design, "section": "Latency", "metric": metric, "verdict": verdict, "error": error,
            "broker": broker, "model": model}


def test_the_summary_totals_the_sets_rows_the_ratio_and_the_misses() -> None:
    ratio = "v5/v4 committed-rate ratio at saturation"
    goals = {"p50": 0.2, "p99": 0.35, "ratio": 0.25}
    docs = [("a/t", {"tally": "2 of 3", "goals": goals, "checks": [
                _check("v5", "end-txn p99", "missed", -0.5, 1000), _check("v4", "deliveries", "exact", None, 7),
                _check("v5/v4", ratio, "within goal", 0.1, 0.05), _check("v4", "dispatch p50", "n/a")]}),
            ("b/t", {"tally": "0 of 3", "goals": goals, "checks": [
                _check("v5", "end-txn p99", "missed", 0.4, 1300), _check("v4", "deliveries", "differs", None, 9),
                _check("v5/v4", ratio, "missed", 0.3, 0.035)]})]
    got = summary(docs)
    # a: 2 met of 3 judged (n/a not judged); b: 0 of 3
    assert (got["sets"], got["met"], got["judged"]) == (2, 2, 6)
    assert (got["ratio"], got["ratio_met"]) == ({"a/t": "within goal", "b/t": "missed"}, 1)
    # the one trace's two brokers against each other: end-txn p99 1,000 and 1,300 are 300 apart,
    # within 35 % of either; ratios 0.05 and 0.035 are 0.015 apart, beyond 25 % of either (0.0125,
    # 0.00875), yet both within 25 % of 0.04 (their ranges 0.0375-0.0625 and 0.02625-0.04375 meet);
    # the counts have no goal. The models: end-txn p99 500 (a) and 1,820 (b), below 1,000 and above
    # 1,300: both beyond the brokers' values; the missed ratio's 0.0455 lies between 0.035 and 0.05
    assert got["missed"] == {
        "v5 end-txn p99": {"missed": 2, "judged": 2, "errors": "model -50% to +40%",
                           "spread": "one value per trace could meet 2, the model beyond every broker on 2, "
                                     "brokers agreeing on 100% of pairs"},
        "v4 deliveries": {"missed": 1, "judged": 2, "errors": "", "spread": ""},
        ratio: {"missed": 1, "judged": 2, "errors": "model +10% to +30%",
                "spread": "one value per trace could meet 2, the model beyond every broker on 0, "
                          "brokers agreeing on 0% of pairs"}}
    assert list(got["missed"])[0] == "v5 end-txn p99"  # most missed first
    # rows a goal judges: the end-txn p99s (both missed) and the ratios (one met)
    assert got["goal_rows"] == {"met": 1, "judged": 4, "reachable": 4, "beyond": 2, "broker_met": 2,
                                "broker_judged": 4}
    lines: list[str] = []
    say_summary(got, "OUT", lines.append)
    assert lines[0] == "2 kept sets: 2 of 6 judged rows meet the goals; the v5/v4 ratio within its goal on 1 of 2"
    assert lines[1] == ("on the rows a goal judges (latency, the v5/v4 ratio) the model met 1 of 4 (25%), of the 4 "
                        "(100%) one value per trace and figure could meet; 2 of its 3 misses lie beyond every broker's value "
                        "of their trace; each trace's broker sets held against one another the same way met 2 of 4 "
                        "pairs (50%)")
    assert lines[2].startswith("missed most: v5 end-txn p99 (2 of 2, model -50% to +40%, one value per trace could "
                               "meet 2, the model beyond every broker on 2, brokers agreeing on 100% of pairs), "
                               "v4 deliveries (1 of 2), ")
    # room: end-txn p99 met on 0 where one value meets 2, the ratio on 1 of 2
    assert got["room"] == {"v5 end-txn p99": 2, ratio: 1}
    assert lines[3] == f"most room (sets one value per trace could meet beyond the model's): v5 end-txn p99 +2, {ratio} +1"


def test_one_value_per_trace_meets_at_most_the_brokers_largest_overlap() -> None:
    """reachable: per trace, the most broker values one value is within the goal of; traces apart."""
    from bench.report.kept import figures

    def doc(broker: float) -> dict[str, Any]:
        return {"goals": {"p50": 0.2}, "checks": [_check("v4", "end-txn p50", "missed", 0.5, broker)]}

    # trace t: 100, 110 and 160. Within 20 %: 100 takes 80-120, 110 takes 88-132, 160 takes 128-192;
    # 100's and 110's meet (88-120), 160's meets 110's only at 128-132: two at most, never three.
    # Trace u, one broker: always reachable. Pairs on t: 100 and 110 meet both ways (10 apart, within
    # 20 % of either); 160 is 50 and 60 from them, beyond 20 % of any: 2 of 6.
    # Every row is missed with the model at 1.5x its broker: 150 lies within t's 100-160, 165 and 240
    # beyond it; u's 7.5 beyond its one value.
    kept = [(f"s{i}/t.json", doc(b)) for i, b in enumerate((100, 110, 160))] + [("s0/u.json", doc(5))]
    (f,) = figures(kept)
    assert (f.judged, f.reachable, f.broker_met, f.broker_judged, f.beyond) == (4, 3, 2, 6, 3)


def test_a_kept_set_judged_again_gives_its_kept_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    folder = tmp_path / "kept"
    (folder / "jit-idle-1" / "broker-runs").mkdir(parents=True)
    shutil.copy(KEPT / "jit-idle-1" / "broker-runs" / "small-slow-2000.tar.xz", folder / "jit-idle-1" / "broker-runs")
    shutil.copy(KEPT / "small-slow-2000.parquet", folder)
    assert main(["validate", "--rejudge-kept", str(folder), "--out", str(tmp_path / "out")]) == 0
    kept = json.loads((KEPT / "jit-idle-1" / "small-slow-2000.json").read_text())
    again = json.loads((tmp_path / "out" / "jit-idle-1" / "small-slow-2000" / "validation.json").read_text())
    assert again["checks"] == kept["checks"]  # this model and the default profile on the kept broker runs
    met, judged = tally([("kept", kept)])
    totals = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (totals["sets"], totals["met"], totals["judged"]) == (1, met, judged)
    assert f"1 kept sets: {met} of {judged} judged rows meet the goals" in capsys.readouterr().out
    # the model's draws are seeded by the trace unless told: another seed draws other latencies
    seed = int(json.loads((tmp_path / "out" / "jit-idle-1" / "small-slow-2000" / "broker-runs" / "small-slow-2000"
                           / "broker" / "manifest.json").read_text())["seed"])
    assert again["profile"].endswith(f", latency seed {seed})")
    # once per seed: the trace's own gives the same judgement, another draws other latencies
    assert main(["validate", "--rejudge-kept", str(folder), "--latency-seeds", f"{seed},{seed + 6}",
                 "--out", str(tmp_path / "seeds")]) == 0
    by_seed = {s: json.loads((tmp_path / "seeds" / f"seed-{s}" / "jit-idle-1" / "small-slow-2000"
                              / "validation.json").read_text()) for s in (seed, seed + 6)}
    assert by_seed[seed]["checks"] == again["checks"]
    assert by_seed[seed + 6]["profile"].endswith(f", latency seed {seed + 6})")
    latency = lambda doc: [c["model"] for c in doc["checks"] if c["section"] == "Latency"]  # noqa: E731
    assert latency(by_seed[seed + 6]) != latency(again)
    over = json.loads((tmp_path / "seeds" / "summary.json").read_text())
    rows = [over["seeds"][str(s)]["met"] for s in (seed, seed + 6)]
    mean = round(sum(rows) / 2, 1)
    assert rows[0] == met and over["over_seeds"]["met"] == {"mean": mean, "min": min(rows), "max": max(rows)}
    assert (f"over latency seeds {seed}, {seed + 6}: {mean} of {judged} judged rows meet the goals on average "
            f"({min(rows)}-{max(rows)})") in capsys.readouterr().out


@pytest.mark.parametrize(("spec", "ok"), [("1-3", [1, 2, 3]), ("4,1", [4, 1]), ("3", None), ("2-2", None),
                                          ("a-b", None), ("1,1", None), ("-1,2", None)])
def test_latency_seeds_are_a_range_or_a_list_of_two_at_least(spec: str, ok: list[int] | None) -> None:
    from bench.pulsar.rejudge_kept import parse_seeds

    if ok is None:
        with pytest.raises(ConfigError, match="expected A-B or A,B"):
            parse_seeds(spec)
    else:
        assert parse_seeds(spec) == ok


def test_latency_seeds_go_with_rejudge_kept_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import EXIT_USAGE, main

    assert main(["validate", "--rejudge", str(tmp_path), "--latency-seeds", "1-2", "--out", str(tmp_path / "o")]) \
        == EXIT_USAGE
    assert "--latency-seeds judges the kept sets once per seed: it goes with --rejudge-kept" in capsys.readouterr().err
    assert main(["validate", "--rejudge-kept", str(tmp_path), "--latency-seeds", "1-2", "--latency-seed", "3",
                 "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert "--latency-seed and --latency-seeds: give one" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_what_is_not_a_kept_folder_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import EXIT_USAGE, main

    with pytest.raises(ConfigError, match="no packed broker set there"):
        kept_archives(tmp_path)
    (tmp_path / "s" / "broker-runs").mkdir(parents=True)
    (tmp_path / "s" / "broker-runs" / "gone.tar.xz").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"s/broker-runs/gone.tar.xz ran gone.parquet, which is not in"):
        kept_archives(tmp_path)
    assert main(["validate", "--rejudge-kept", str(tmp_path), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert "which is not in" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert main(["validate", "--rejudge-kept", str(tmp_path), "--target", "pulsar://127.0.0.1:1",
                 "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert "judges the packed sets it finds: not with" in capsys.readouterr().err


def test_a_set_that_cannot_be_judged_leaves_nothing_of_the_others(tmp_path: Path) -> None:
    folder = tmp_path / "kept"
    for name in ("good", "z-bad"):
        (folder / name / "broker-runs").mkdir(parents=True)
    shutil.copy(KEPT / "jit-idle-1" / "broker-runs" / "small-slow-2000.tar.xz", folder / "good" / "broker-runs")
    (folder / "z-bad" / "broker-runs" / "small-slow-2000.tar.xz").write_bytes(b"not an archive")
    shutil.copy(KEPT / "small-slow-2000.parquet", folder)
    assert [name for name, _, _ in kept_archives(folder)] == ["good/small-slow-2000", "z-bad/small-slow-2000"]
    with pytest.raises(ConfigError, match="cannot unpack it"):  # judged after the good one
        rejudge_kept(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
