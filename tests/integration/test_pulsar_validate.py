"""``txnbench validate`` against the suite's broker on a tiny trace: the model and the broker run
it, and the "model vs broker" section holds the broker's counts and latencies against the
model's. One committed txn of one message per design: the counts the code fixes are exact.

Needs a broker (``scripts/pulsar.sh start DIR``; env ``TXNBENCH_PULSAR_URL``,
``TXNBENCH_PULSAR_ADMIN_URL``): skips without one, fails when ``TXNBENCH_REQUIRE`` includes ``pulsar``.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from bench.cli import main
from bench.pulsar.client import PULSAR_SH
from bench.trace.trace import TraceWriter
from tests.conftest import PulsarBroker

pytestmark = pytest.mark.pulsar

T = "persistent://public/bench/t0-partition-0"


def _trace(path: Path) -> Path:
    with TraceWriter(path, metadata={"profile": "tiny", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        w.add(1_000, "new_txn", txn="t0")
        w.add(2_000, "publish", txn="t0", topic=T, msg="m0", size=16)
        w.add(300_000, "commit", txn="t0")  # a txn phase of 0.3 s: CPU samples inside it (bench.pulsar.cpu)
    return path


def test_validate_writes_the_section_for_both_designs(tmp_path: Path, pulsar: PulsarBroker,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v"
    code = main(["validate", "--trace", str(_trace(tmp_path / "t.parquet")), "--target", pulsar.url,
                 "--admin-url", pulsar.admin_url, "--drain-ms", "8000", "--no-saturation", "--warm-up", "0",
                 "--warm-up-jit", "1", "--warm-up-txns", "v4=0", "--warm-up-txns", "v5=0", "--out", str(out)])
    assert code == 0
    assert "model vs broker, against the goals: " in capsys.readouterr().out
    doc = json.loads((out / "validation.json").read_text())
    rows = {(c["design"], c["section"], c["metric"]): c for c in doc["checks"]}
    for d in ("v4", "v5"):
        assert rows[(d, "Counts", "deliveries")]["verdict"] == "exact"
        assert rows[(d, "Counts", "txns committed")]["broker"] == 1
        end = rows[(d, "Latency", "end-txn p50")]
        assert end["broker"] > 0 and end["model"] > 0
        assert end["error"] == pytest.approx((end["model"] - end["broker"]) / end["broker"])
    # 1 new + 1 add-partition + committing + committed on the broker's coordinator (MLTransactionMetadataStore)
    assert rows[("v4", "Counts", "coordinator log appends (v4)")]["verdict"] in ("exact", "explained")
    assert rows[("v4", "Counts", "commit/abort markers (v4)")]["verdict"] == "exact"
    assert rows[("v5/v4", "Throughput", "v5/v4 committed-rate ratio at saturation")]["verdict"] == "n/a"  # no asap run
    assert doc["saturation"] is None
    md = (out / "report" / "report.md").read_text()
    assert "## Model vs broker — model vs broker" in md and "no asap run" in md
    assert not (out / "broker-asap").exists() and not (out / "broker-warm-up").exists()
    assert doc["broker_state"] == {"fresh": False, "warm_up_runs": 0, "warm_up_txns": {}}
    # each run's new-txns in kinds, from the answer times its txns.parquet records (the broker's
    # from the client's events): every new-txn the trace opened was answered
    for d in ("v4", "v5"):
        for side in ("model", "broker"):
            assert doc["new_txn_modes"][d][side]["requests"] == rows[(d, "Counts", "txns committed")]["broker"]
            # and its publishes: the model's from its publishes.parquet, the broker's from its
            # client's events; the trace's one publish is in its txn, sent before the commit
            kinds = doc["publish_modes"][d]
            assert kinds["plain"] == {"model": None, "broker": None}
            assert (kinds["txn"][side]["requests"], kinds["txn"][side]["behind_end_txn"]) == (1, 0)
    assert (out / "model" / "publishes.parquet").exists()

    # judged again without the broker: the same model gives the same rows; another profile the
    # same broker figures beside its own latencies
    again = tmp_path / "again"
    assert main(["validate", "--rejudge", str(out), "--out", str(again)]) == 0
    redo = json.loads((again / "validation.json").read_text())
    assert redo["checks"] == doc["checks"] and redo["broker"] == str(out / "broker")
    other = tmp_path / "other"
    assert main(["validate", "--rejudge", str(out), "--latency-profile", "constants", "--out", str(other)]) == 0
    moved = json.loads((other / "validation.json").read_text())
    assert [c["broker"] for c in moved["checks"]] == [c["broker"] for c in doc["checks"]]
    assert "latency profile constants" in moved["profile"]
    assert ({c["model"] for c in moved["checks"] if c["section"] == "Latency"}
            != {c["model"] for c in doc["checks"] if c["section"] == "Latency"})


def _namespaces(admin_url: str) -> list[str]:
    with urllib.request.urlopen(f"{admin_url}/admin/v2/namespaces/public", timeout=10) as r:
        return list(json.loads(r.read()))


@pytest.fixture
def own_broker(tmp_path: Path, pulsar: PulsarBroker) -> Iterator[PulsarBroker]:
    """A broker of this test's own (scripts/pulsar.sh start), so that wiping it disturbs no other
    test: the suite's workers share the other one. Needs the suite's broker to be up (the jars and
    Java are there then)."""
    directory = tmp_path / "broker"
    done = subprocess.run([str(PULSAR_SH), "start", str(directory)], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"scripts/pulsar.sh start failed: {done.stderr.strip()[-500:]}")
    url, admin = done.stdout.split()[:2]
    try:
        yield PulsarBroker(url, admin, str(directory))
    finally:
        subprocess.run([str(PULSAR_SH), "stop", str(directory)], capture_output=True, timeout=120, check=False)


def test_fresh_broker_and_warm_up_runs_come_before_the_measured_ones(tmp_path: Path, own_broker: PulsarBroker) -> None:
    """--fresh-broker restarts the broker with its data wiped (same URLs), then one discarded asap
    run of both designs, then the measured runs; the section says so."""
    trace = _trace(tmp_path / "t.parquet")
    # what an earlier run leaves behind: a namespace of its own
    req = urllib.request.Request(f"{own_broker.admin_url}/admin/v2/namespaces/public/left-by-an-earlier-run", method="PUT")
    urllib.request.urlopen(req, timeout=30).close()
    earlier = {"public/left-by-an-earlier-run"}
    assert earlier <= set(_namespaces(own_broker.admin_url))
    out = tmp_path / "v"
    assert main(["validate", "--trace", str(trace), "--target", own_broker.url, "--admin-url", own_broker.admin_url,
                 "--pulsar-dir", str(own_broker.dir), "--drain-ms", "8000", "--no-saturation", "--fresh-broker",
                 "--warm-up", "1", "--warm-up-jit", "1", "--warm-up-txns", "v4=0", "--warm-up-txns", "v5=0",
                 "--out", str(out)]) == 0
    assert not earlier & set(_namespaces(own_broker.admin_url))  # wiped: only this validate's runs are there
    warm = json.loads((out / "broker-warm-up" / "manifest.json").read_text())
    assert warm["target"]["pacing"] == "asap" and set(warm["runs"]) == {"v4", "v5"}
    measured = json.loads((out / "broker" / "manifest.json").read_text())
    assert measured["validate"] == {"broker": {"fresh": True, "warm_up_runs": 1, "warm_up_txns": {"v4": 1, "v5": 1}}}
    for d in ("v4", "v5"):  # the broker's pid from --pulsar-dir: its share of the cores over the txn phase
        cpu = measured["runs"][d]["cpu"]
        assert cpu["span_ms"] > 100 and 0 <= cpu["broker_cores"] <= cpu["cores"]
        assert cpu["machine_busy_cores"] >= cpu["broker_cores"] - 0.1
        # the v5 coordinator's sweep thread is found by its name in the 5.0.0-M1 broker, and read
        assert 0 <= cpu["sweep_cores"] <= cpu["broker_cores"] + 0.05
        # and so are its JIT compiler threads (HotSpot's C1/C2 CompilerThread names)
        assert 0 <= cpu["jit_cores"] <= cpu["broker_cores"] + 0.05
        assert measured["runs"][d]["sweep_wait_s"] >= 0
    doc = json.loads((out / "validation.json").read_text())
    assert doc["broker_cpu"]["v5"]["sweep_wait_s"] == measured["runs"]["v5"]["sweep_wait_s"]
    assert doc["broker_state"] == {"fresh": True, "warm_up_runs": 1, "warm_up_txns": {"v4": 1, "v5": 1}}
    rows = {(c["design"], c["section"], c["metric"]): c for c in doc["checks"]}
    assert rows[("v4", "Counts", "txns committed")]["broker"] == 1  # the warm-up's txn is not counted
    assert "the broker restarted with its data wiped before this trace, then 1 discarded" in (out / "report" / "report.md").read_text()


def test_fresh_broker_without_its_directory_is_one_line(tmp_path: Path, pulsar: PulsarBroker, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TXNBENCH_PULSAR_DIR", raising=False)
    code = main(["validate", "--trace", str(_trace(tmp_path / "t.parquet")), "--target", pulsar.url,
                 "--admin-url", pulsar.admin_url, "--fresh-broker", "--out", str(tmp_path / "v")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "--fresh-broker needs the broker's scripts/pulsar.sh DIR" in err[0]
    assert not (tmp_path / "v").exists()


def test_the_clients_warm_up_is_in_none_of_the_counts(tmp_path: Path, pulsar: PulsarBroker) -> None:
    """--client-warm-up: the trace's rows run first in a namespace of their own, then the broker's
    counters are read; the measured run's counts are one txn's, as without it."""
    out = tmp_path / "v"
    assert main(["validate", "--trace", str(_trace(tmp_path / "t.parquet")), "--target", pulsar.url,
                 "--admin-url", pulsar.admin_url, "--drain-ms", "8000", "--no-saturation", "--warm-up", "0",
                 "--warm-up-jit", "1", "--warm-up-txns", "v4=0", "--warm-up-txns", "v5=0", "--client-warm-up",
                 "--out", str(out)]) == 0
    doc = json.loads((out / "validation.json").read_text())
    rows = {(c["design"], c["section"], c["metric"]): c for c in doc["checks"]}
    for d in ("v4", "v5"):
        assert rows[(d, "Counts", "deliveries")]["verdict"] == "exact"
        assert rows[(d, "Counts", "txns committed")]["broker"] == 1  # the warm-up's txn ran, and is not counted
        events = [json.loads(line) for line in (out / "broker" / f"pulsar-events-{d}.jsonl").read_text().splitlines()]
        kinds = [e["ev"] for e in events]
        assert kinds.index("warmed") < kinds.index("ready") and kinds.count("warmed") == 1
        assert events[kinds.index("warmed")]["rows"] == 4  # the trace's rows, run first
        assert sum(1 for e in events if e["ev"] == "op") == 4  # only the measured rows are reported
    assert rows[("v4", "Counts", "commit/abort markers (v4)")]["verdict"] == "exact"  # not the warm-up's marker
    # the coordinator's broker-wide counters were read after the warm-up's txn
    counts = json.loads((out / "broker" / "counts.json").read_text())["v4"]
    assert counts["pulsar.pulsar_txn_created_total"] == counts["pulsar.pulsar_txn_committed_total"] == 1
    assert rows[("v4", "Counts", "coordinator log appends (v4)")]["verdict"] in ("exact", "explained")


def test_each_designs_asap_runs_replay_the_rows_as_often_as_its_last_warm_up_run_asks(tmp_path: Path,
                                                                                      pulsar: PulsarBroker) -> None:
    """By default the first warm-up run replays the rows once; a design's later warm-up runs (here
    v4's, until its rows held 3 txns: v5's goal is met by the first) replay them as many times
    over as make a txn phase of 2 s at the rate the run before measured, the measured asap runs
    (the model's too) of 1 s (bench.pulsar.validate_run.repeats_for), each pass its own txn, in
    one set per design when the designs' counts differ; the runs at the trace's pace replay them once."""
    from bench.pulsar.validate_run import WARM_UP_PHASE_S, groups, repeats_for

    out = tmp_path / "v"
    assert main(["validate", "--trace", str(_trace(tmp_path / "t.parquet")), "--target", pulsar.url,
                 "--admin-url", pulsar.admin_url, "--drain-ms", "8000", "--saturation-runs", "1", "--warm-up", "1",
                 "--warm-up-jit", "1", "--warm-up-txns", "v4=3", "--warm-up-txns", "v5=0", "--no-client-warm-up",
                 "--out", str(out)]) == 0

    def suffixes(counts: dict[str, int]) -> dict[str, str]:  # each design's set-name suffix
        traces = {d: out / f"x{n}" for d, n in counts.items()}
        return {d: suffix for _, designs, suffix in groups(traces) for d in designs}

    def rate(name: str, d: str) -> float:
        return json.loads((out / name / "manifest.json").read_text())["runs"][d]["rates"]["committed_txns_per_s"]

    # the warm-up, from the rates its runs measured (the trace has one txn)
    runs = [("broker-warm-up", d, 1) for d in ("v4", "v5")]
    v4 = [1, repeats_for({"v4": rate("broker-warm-up", "v4")}, 1, WARM_UP_PHASE_S)["v4"]]
    runs.append(("broker-warm-up-2", "v4", v4[1]))
    while sum(v4) < 3:  # a 1-txn run at 2 s of its rate: never more than one more
        v4.append(repeats_for({"v4": rate(f"broker-warm-up-{len(v4)}", "v4")}, 1, WARM_UP_PHASE_S)["v4"])
        runs.append((f"broker-warm-up-{len(v4)}", "v4", v4[-1]))
    assert not (out / f"broker-warm-up-{len(v4) + 1}").exists()
    assert set(json.loads((out / "broker-warm-up-2" / "manifest.json").read_text())["runs"]) == {"v4"}
    measured = {"v4": repeats_for({"v4": rate(runs[-1][0], "v4")}, 1)["v4"],
                "v5": repeats_for({"v5": rate("broker-warm-up", "v5")}, 1)["v5"]}
    doc = json.loads((out / "validation.json").read_text())
    assert doc["broker_state"] == {"fresh": False, "warm_up_runs": len(v4), "warm_up_txns": {"v4": sum(v4), "v5": 1}}
    assert doc["saturation_repeat"] == measured and all(1 <= n <= 32 for n in measured.values())
    runs += [(f"{kind}{suffixes(measured)[d]}", d, n) for d, n in measured.items() for kind in ("broker-asap", "model-asap")]
    runs += [(name, d, 1) for d in ("v4", "v5") for name in ("broker", "model")]  # at the trace's pace: the trace
    for name, d, n in runs:
        manifest = json.loads((out / name / "manifest.json").read_text())
        counts = json.loads((out / name / "counts.json").read_text())
        assert counts[next(lab for lab in counts if lab.startswith(d))]["txns.committed"] == n, name
        assert manifest["trace"]["rows"] == 1 + 3 * n, name  # one subscribe, the rest n times
        if n > 1:
            assert manifest["trace"]["path"] == str(out / f"saturation-trace-x{n}.parquet"), name
            assert manifest["trace"]["repeated"] == str(n), name
    assert len(doc["broker_saturation_runs"]["v4"]) == len(doc["broker_saturation_runs"]["v5"]) == 1
    # the model ran after the broker, its v5 store from the txns the broker's coordinator had created
    from bench.report.validate import txns_before

    asap_v5 = f"broker-asap{suffixes(measured)['v5']}"
    history = {"trace_pacing": txns_before({"path": out / "broker"}, "v5") or 0,
               "asap": txns_before({"path": out / asap_v5}, "v5") or 0}
    assert doc["model_v5_history"] == history and history["asap"] > history["trace_pacing"]
    for name, n in (("model", history["trace_pacing"]), (asap_v5.replace("broker", "model"), history["asap"])):
        runs_of = json.loads((out / name / "manifest.json").read_text())["runs"]
        config = next(r["config"] for lab, r in runs_of.items() if lab.startswith("v5"))
        assert (config.get("options") or {}).get("history", 0) == n, name
