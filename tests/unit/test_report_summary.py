"""The report's headline is derived from the rows; the HTML is one self-contained file;
summary.json validates against the schema shipped in bench/report/schemas and its row ids are the
counts.json / latency.json keys."""

from __future__ import annotations

import json
import re
import shutil
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from bench.replay.config import RunConfig
from bench.report.headline import answer, headline
from bench.report.report import Row, build
from bench.replay.runner import replay_trace
from bench.trace.trace import TraceWriter

T = "persistent://public/b/t0-partition-0"


def _row(rid: str, values: dict[str, float | None], unit: str = "µs", deterministic: bool = True) -> Row:
    return Row("Latency", rid, unit, values, None, "n/a", deterministic, id=rid)


def test_headline_names_the_winner_and_the_factor_from_the_rows() -> None:
    rows = [_row("end_txn_us.p50", {"a": 3000, "b": 1000}), _row("end_txn_us.p99", {"a": 3000, "b": 1200}),
            _row("dispatch_txn_us.p50", {"a": 500, "b": 500}),
            _row("publish_txn_us.p50", {"a": 1000, "b": 1050}),
            _row("dispatch.empty_reads", {"a": 0, "b": 640}, unit="reads")]
    found = {f.metric: f for f in headline(rows, crashed=False, noise=0.01)}
    end = found["end_txn_us.p50"]
    assert end.winner == "b" and end.ratio == 3.0
    assert end.text.startswith("**b** wins, 3.00× lower (b 1.00 ms vs a 3.00 ms); at p99 b lower")
    assert end.confidence == "exact (virtual time, deterministic)"
    assert found["dispatch_txn_us.p50"].winner is None and "identical" in found["dispatch_txn_us.p50"].text
    assert found["publish_txn_us.p50"].text.startswith("about even, a 1.05× lower")  # real but small
    assert found["dispatch.empty_reads"].winner == "a" and "zero against" in found["dispatch.empty_reads"].text
    assert "no broker crash" in found["derived.recovery_us"].text  # not a verdict on zero vs zero
    assert "not measured" in found["commit_to_visible_us.p50"].text


def test_wall_time_rows_within_the_noise_band_are_a_tie_with_that_confidence() -> None:
    f = answer("q", _row("end_txn_us.p50", {"a": 1000, "b": 1200}, deterministic=False), True, 0.25)
    assert f.winner is None and f.text.startswith("tie within 25% noise")
    assert f.confidence == "wall time, one sample (differences under 25% are noise)"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rep")
    trace = d / "t.parquet"
    with TraceWriter(trace, metadata={"profile": "hand", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        for i in range(3):
            w.add(20 + 100 * i, "new_txn", txn=f"t{i}")
            w.add(30 + 100 * i, "publish", txn=f"t{i}", topic=T, msg=f"x{i}", size=1)
            w.add(40 + 100 * i, "publish", topic=T, msg=f"p{i}", size=1)
            w.add(50 + 100 * i, "commit", txn=f"t{i}")
    replay_trace(trace, [RunConfig(engine="v4"), RunConfig(engine="v5")], d / "a")
    shutil.copytree(d / "a", d / "b")
    build([d / "a", d / "b"], d / "out")
    return d


def test_summary_validates_against_the_shipped_schema_and_ids_are_result_keys(report: Path) -> None:
    schema = json.loads(files("bench.report").joinpath("schemas/summary.schema.json").read_text())
    summary = json.loads((report / "out" / "summary.json").read_text())
    jsonschema.validate(summary, schema)
    assert summary["schema_version"] == 1
    counts = json.loads((report / "a" / "counts.json").read_text())
    latency = json.loads((report / "a" / "latency.json").read_text())
    keys = {k for c in counts.values() for k in c} | {f"{m}.{p[:-3]}" for s in latency.values() for m, v in s.items()
                                                     for p in v if p.endswith("_us") and p.startswith(("p", "max"))}
    rows = summary["result_sets"][0]["rows"]
    ids = [r["id"] for r in rows]
    assert "end_txn_us.p50" in ids and "ledger.appends.data" in ids and len(set(ids)) == len(ids)
    # a count absent from counts.json is zero (counters are written when they move)
    strays = [r for r in rows if r["id"] not in keys and not r["id"].startswith("derived.")]
    assert all(set(r["values"].values()) == {0} for r in strays), strays
    (comp,) = summary["comparisons"]
    assert comp["comparable"] and comp["rows_compared"] > 0 and comp["changes"] == []
    assert "No change beyond noise in" in comp["verdict"]


def test_a_summary_with_a_string_number_fails_the_schema(report: Path) -> None:
    schema = json.loads(files("bench.report").joinpath("schemas/summary.schema.json").read_text())
    summary = json.loads((report / "out" / "summary.json").read_text())
    summary["result_sets"][0]["rows"][0]["values"]["v4"] = "inf"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(summary, schema)


def test_html_is_self_contained_and_opens_with_the_headline(report: Path) -> None:
    html = (report / "out" / "report.html").read_text()
    srcs = re.findall(r"<img[^>]*\ssrc='([^']*)'", html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r"(?:src|href)=['\"](?!data:)[^'\"]+\.(?:png|css|js)", html)
    body = html.split("<body>", 1)[1]
    assert body.index("What this run shows") < body.index("<table")
    assert "replay speed" not in body.split("<footer>")[0]  # the simulator's speed is a footer item
    assert "events per second" in body.split("<footer>")[1]


def test_github_markdown_puts_the_summary_first_and_tables_in_details(report: Path) -> None:
    md = (report / "out" / "report.github.md").read_text()
    assert md.index("## What this run shows") < md.index("<details>")
    assert "](" not in md.replace("](#", "")  # no image or relative links
    assert md.count("<details>") == md.count("</details>") >= 3


def _validation(sha256: str, met: int, judged: int, missed: list[tuple[str, str, float]]) -> dict[str, object]:
    """A validation object as `txnbench validate` writes it, with these missed latency checks."""
    checks = [{"design": d, "section": "Latency", "metric": m, "error": e, "verdict": "missed"} for d, m, e in missed]
    checks.append({"design": "v4", "section": "Counts", "metric": "deliveries", "error": 0.0, "verdict": "exact"})
    return {"profile": f"latency profile p (p.json, sha256 {sha256[:12]})",
            "tally": f"{met} of {judged} judged rows meet them (2 n/a)", "checks": checks}


def test_a_run_with_a_validated_profile_says_how_it_held_against_the_broker(tmp_path: Path) -> None:
    """The validation objects beside a profile (validation/ next to its folder): one is quoted with
    its tally and every missed goal; several by every tally, best first, and the goals missed on
    all of them; a profile with none says nothing."""
    import json as _json

    from bench.replay.config import RunConfig
    from bench.replay.runner import replay_trace
    from bench.report.report import build
    from engine.profile import LatencyProfile, resolve

    root = Path(__file__).resolve().parents[2]
    trace = root / "datasets" / "samples" / "small.parquet"
    (tmp_path / "latency").mkdir()
    (tmp_path / "latency" / "p.json").write_text(_json.dumps(LatencyProfile.load(resolve("constants")).to_json()))
    prof = LatencyProfile.load(tmp_path / "latency" / "p.json")
    replay_trace(trace, [RunConfig(engine="v5", latency=prof.to_latency_model(1), latency_profile=prof)], tmp_path / "r")

    def held() -> str:
        md = build([tmp_path / "r"], tmp_path / "out", force=True).markdown.read_text()
        return next(x for x in md.splitlines() if "Held against a real broker" in x)

    folder = tmp_path / "validation"
    folder.mkdir()
    (folder / "slow.json").write_text(_json.dumps(_validation(prof.sha256, 36, 42, [("v5", "end-txn p50", -0.25),
                                                                                   ("v4", "end-txn p99", 0.66)])))
    (folder / "other.json").write_text(_json.dumps(_validation("0" * 64, 42, 42, [])))  # another profile's
    line = held()
    assert "(`validation/slow.json`): 36 of 42 judged rows meet the goals (2 n/a)" in line
    assert "v5 end-txn p50 (-25%), v4 end-txn p99 (+66%)" in line

    (folder / "fast.json").write_text(_json.dumps(_validation(prof.sha256, 20, 42, [("v4", "end-txn p99", 1.2),
                                                                                   ("v5", "publish (txn) p50", -0.6)])))
    line = held()
    assert "(2 traces in `validation/`): judged rows meeting the goals slow 36/42, fast 20/42" in line
    assert "missed on every trace: v4 end-txn p99 —" in line and "publish (txn)" not in line
    (folder / "a-set").mkdir()  # sets kept in folders by what they measured are found too
    (folder / "a-set" / "deep.json").write_text(_json.dumps(_validation(prof.sha256, 30, 42, [("v4", "end-txn p99", 0.5)])))
    (folder / "a-set" / "profile.json").write_text(_json.dumps(prof.to_json()))  # not a validation object
    line = held()
    assert "(3 traces in `validation/`): judged rows meeting the goals slow 36/42, a-set/deep 30/42, fast 20/42" in line

    plain = tmp_path / "elsewhere" / "mine"  # the same profile kept elsewhere: no validation beside it
    plain.mkdir(parents=True)
    (plain / "p.json").write_text(_json.dumps(LatencyProfile.load(resolve("constants")).to_json()))
    own = LatencyProfile.load(plain / "p.json")
    replay_trace(trace, [RunConfig(engine="v5", latency=own.to_latency_model(1), latency_profile=own)], tmp_path / "c")
    assert "Held against a real broker" not in build([tmp_path / "c"], tmp_path / "out2").markdown.read_text()
