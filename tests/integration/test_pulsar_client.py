"""The JVM trace client (jvm/, txnbench.client.TraceClient) on hand-written rows against the real broker.

Both designs run the same small trace: a txn that commits, a txn that aborts, and a plain message
published on the same partition (v4) / single segment (v5) while both txns are open. Pulsar holds
back what follows an open txn's message (v4: TopicTransactionBuffer's maxReadPosition; v5: the
metadata-store buffer), so the plain message must not arrive before the committing txn ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PulsarBroker

pytestmark = pytest.mark.pulsar

ROOT = Path(__file__).resolve().parents[2]
PLAIN_AFTER_TXN = 60  # plain sends 250 µs apart after the first txn send: some go while it is parked
ATTEMPTS = 3  # fresh namespaces tried for the overtaking scenario, whose timing is the broker's


@pytest.fixture(scope="session")
def client_cp(pulsar: PulsarBroker) -> str:
    """The trace client's class path (compiled by scripts/pulsar.sh when its sources changed)."""
    done = subprocess.run([str(ROOT / "scripts" / "pulsar.sh"), "client-cp"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _row(row: int, ts_us: int, op: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"row": row, "ts_us": ts_us, "op": op}
    for name in ("txn", "topic", "msg", "subscription", "size", "timeout_ms", "ack_kind", "target", "key", "sub_type"):
        base[name] = fields.get(name)
    return base


def _run(cp: str, pulsar: PulsarBroker | None, design: str, rows: list[dict[str, Any]], tmp: Path,
         urls: tuple[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    path = tmp / f"rows-{design}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    service, admin = urls or (pulsar.url, pulsar.admin_url)  # type: ignore[union-attr]
    cmd = ["java", "-XX:TieredStopAtLevel=1", "-cp", cp, "txnbench.client.TraceClient",
           "--service-url", service, "--admin-url", admin, "--design", design, "--rows", str(path),
           "--pacing", "trace", "--quiet-ms", "1500", "--drain-ms", "20000"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, events, done.stderr


def _topic(design: str) -> str:
    ns = f"public/tb-test-{uuid.uuid4().hex[:8]}"
    return f"persistent://{ns}/t-partition-0" if design == "v4" else f"topic://{ns}/t"


def _trace(topic: str) -> list[dict[str, Any]]:
    """Txn A commits at 6 s, txn B aborts at 4.5 s; plain m-plain goes out at 3 s while both are open."""
    s = 1_000_000
    return [
        _row(0, 0, "subscribe", topic=topic, subscription="sub"),
        _row(1, 0, "new_txn", txn="A", timeout_ms=60_000),
        _row(2, 0, "new_txn", txn="B", timeout_ms=60_000),
        _row(3, 10, "publish", txn="A", topic=topic, msg="m-commit", size=64, key="k"),
        _row(4, 20, "publish", txn="B", topic=topic, msg="m-abort", size=64, key="k"),
        _row(5, 3 * s, "publish", topic=topic, msg="m-plain", size=64, key="k"),
        _row(6, 4 * s + s // 2, "abort", txn="B"),
        _row(7, 6 * s, "commit", txn="A"),
        _row(8, 6 * s + 1, "ack", topic=topic, msg="m-plain", subscription="sub", ack_kind="individual"),
        _row(9, 6 * s + 2, "ack", topic=topic, msg="m-commit", subscription="sub", ack_kind="individual"),
    ]


@pytest.mark.parametrize("design", ["v4", "v5"])
def test_txn_visibility_and_blocking_behind_an_open_txn(client_cp: str, pulsar: PulsarBroker, design: str,
                                                        tmp_path: Path) -> None:
    rows = _trace(_topic(design))
    rc, events, stderr = _run(client_cp, pulsar, design, rows, tmp_path)
    assert rc == 0, (events[-3:], stderr[-2000:])
    assert events[0]["ev"] == "ready" and events[-1]["ev"] == "done"
    ops = {e["row"]: e for e in events if e["ev"] == "op"}
    assert sorted(ops) == list(range(10))
    # The clock stopped while the subscribe was waited for: every later row is due that much later.
    pause = ops[0]["end_us"] - ops[0]["start_us"]
    assert pause > 0 and events[-1]["paused_us"] == pause and ops[0]["due_us"] == 0
    assert {r: ops[r]["due_us"] - row["ts_us"] for r, row in enumerate(rows) if r > 0} == {r: pause for r in range(1, 10)}
    assert ops[1]["start_us"] >= pause  # not sent before it was due
    failed = {r: e["error"] for r, e in ops.items() if not e["ok"]}
    assert not failed, failed
    assert ops[1]["txn_id"] and ops[1]["txn_id"] != ops[2]["txn_id"]
    # The scenario holds only if the plain publish went out after both txn publishes were stored.
    assert ops[5]["start_us"] > max(ops[3]["end_us"], ops[4]["end_us"]), "pacing too slow for the scenario"

    delivered = {e["msg"]: e for e in events if e["ev"] == "deliver"}
    assert set(delivered) == {"m-plain", "m-commit"}  # the aborted txn's message never arrives
    commit_start = ops[7]["start_us"]
    assert ops[6]["end_us"] < commit_start  # B had ended; only A was still open
    assert delivered["m-commit"]["t_us"] >= commit_start  # not visible before its commit
    # Held back behind open txn A although it was published (and stored) 3 s earlier.
    assert delivered["m-plain"]["t_us"] >= commit_start
    assert not any(e["redelivery"] for e in delivered.values())
    # Both acks were issued only once their message had arrived.
    assert ops[8]["start_us"] >= delivered["m-plain"]["t_us"]
    assert ops[9]["start_us"] >= delivered["m-commit"]["t_us"]
    subscribed = [e for e in events if e["ev"] == "subscribed"]
    assert [e["type"] for e in subscribed] == (["Failover"] if design == "v4" else ["QueueConsumer"])


def test_plain_sends_overtaking_a_parked_first_txn_send_keep_the_connection(client_cp: str, pulsar: PulsarBroker,
                                                                           tmp_path: Path) -> None:
    """v4 parks a fresh partition's first txn append until the partition's first transaction-buffer
    snapshot is written (TopicTransactionBuffer.appendBufferToTxn: takeFirstSnapshot) and appends
    plain sends at once, so plain sends issued just after the txn send are answered before it. On
    the txn's own producer that is an out-of-order receipt, on which the client closes its
    connection (ProducerImpl.ackReceived) and fails whatever is in flight on it: the client keeps
    a producer for txn sends and another for plain ones.

    How long the first snapshot parks the txn send depends on the broker's load (40-100 ms idle;
    a busy broker has been seen answering it before any plain send), so the scenario is tried on
    up to ATTEMPTS fresh namespaces; every attempt must keep the connection, one must overtake."""
    overtaken = []
    for attempt in range(ATTEMPTS):
        overtaken.append(_overtaking_attempt(client_cp, pulsar, tmp_path / str(attempt)))
        if overtaken[-1]:
            break
    assert overtaken[-1], f"no plain send overtook the txn send in {ATTEMPTS} attempts: the first snapshot was too quick"


def _overtaking_attempt(client_cp: str, pulsar: PulsarBroker, tmp: Path) -> int:
    """One run of the scenario on a fresh namespace; the plain sends that overtook the txn send."""
    topic, ms = _topic("v4"), 1_000
    plain = range(4, 4 + PLAIN_AFTER_TXN)
    rows = [
        _row(0, 0, "subscribe", topic=topic, subscription="sub"),
        _row(1, 100 * ms, "publish", topic=topic, msg="m0", size=16, key="k"),
        _row(2, 500 * ms, "new_txn", txn="A", timeout_ms=60_000),
        _row(3, 600 * ms, "publish", txn="A", topic=topic, msg="m-txn", size=16, key="k"),
        *[_row(r, 600 * ms + (r - 3) * 250, "publish", topic=topic, msg=f"m{r}", size=16, key="k") for r in plain],
        _row(4 + PLAIN_AFTER_TXN, 2_000 * ms, "commit", txn="A"),
    ]
    tmp.mkdir()
    rc, events, stderr = _run(client_cp, pulsar, "v4", rows, tmp)
    assert rc == 0, (events[-3:], stderr[-2000:])
    assert "unexpected sequence id" not in stderr, stderr[-2000:]
    ops = {e["row"]: e for e in events if e["ev"] == "op"}
    assert sorted(ops) == list(range(len(rows)))
    failed = {r: e["error"] for r, e in ops.items() if not e["ok"]}
    assert not failed, failed
    assert {e["msg"] for e in events if e["ev"] == "deliver"} == {"m0", "m-txn", *(f"m{r}" for r in plain)}
    # the scenario: a plain send issued after the txn send was answered before it
    return sum(ops[3]["start_us"] < ops[r]["start_us"] and ops[r]["end_us"] < ops[3]["end_us"] for r in plain)


@pytest.mark.parametrize("design", ["v4", "v5"])
def test_a_txn_ack_ends_at_its_answer_and_a_refused_one_fails_its_row(client_cp: str, pulsar: PulsarBroker,
                                                                      design: str, tmp_path: Path) -> None:
    """A txn ack's row ends when the broker answered it (v4: its own future; v5: the classic txn's
    pending ops, which the SDK's commit waits for), so a commit starts after its acks in both
    designs. B acks a message A holds in pending ack: the broker refuses it
    (PendingAckHandleImpl: TransactionConflictException), B's ack row fails and so does its
    commit (TransactionImpl: hasOpsFailed), while A commits."""
    topic, s = _topic(design), 1_000_000
    rows = [
        _row(0, 0, "subscribe", topic=topic, subscription="sub"),
        _row(1, s // 10, "publish", topic=topic, msg="m", size=16, key="k"),
        _row(2, s, "new_txn", txn="A", timeout_ms=60_000),
        _row(3, s, "new_txn", txn="B", timeout_ms=60_000),
        _row(4, 2 * s, "ack", txn="A", topic=topic, msg="m", subscription="sub", ack_kind="individual"),
        _row(5, 3 * s, "ack", txn="B", topic=topic, msg="m", subscription="sub", ack_kind="individual"),
        _row(6, 4 * s, "commit", txn="A"),
        _row(7, 4 * s + s // 2, "commit", txn="B"),
    ]
    rc, events, stderr = _run(client_cp, pulsar, design, rows, tmp_path)
    assert rc == 0, (events[-3:], stderr[-2000:])
    ops = {e["row"]: e for e in events if e["ev"] == "op"}
    assert sorted(ops) == list(range(8))
    failed = {r for r, e in ops.items() if not e["ok"]}
    assert failed == {5, 7}, {r: e["error"] for r, e in ops.items()}
    assert ("Conflict" if design == "v4" else "TransactionHasOperationFailed") in ops[5]["error"]
    assert "OperationFailed" in ops[7]["error"]
    assert ops[6]["start_us"] >= ops[4]["end_us"] and ops[7]["start_us"] >= ops[5]["end_us"]


def test_v5_split_merge_and_cumulative_acks(client_cp: str, pulsar: PulsarBroker, tmp_path: Path) -> None:
    """split/merge name the model's segments (hex ranges, engine/topics.py); the broker's layout
    follows; a subscription acked cumulatively runs on a StreamConsumer across the new segment."""
    topic, s = _topic("v5"), 1_000_000
    rows = [
        _row(0, 0, "subscribe", topic=topic, subscription="sub"),
        _row(1, s // 10, "publish", topic=topic, msg="m-a", size=16, key="k1"),
        _row(2, s, "split", topic=topic, target="0000-ffff-0"),
        _row(3, 6 * s, "merge", topic=topic, target="0000-7fff-1,8000-ffff-2"),
        _row(4, 9 * s, "publish", topic=topic, msg="m-b", size=16, key="k1"),
        _row(5, 9 * s + 1, "ack", topic=topic, msg="m-b", subscription="sub", ack_kind="cumulative"),
    ]
    rc, events, stderr = _run(client_cp, pulsar, "v5", rows, tmp_path)
    assert rc == 0, (events[-3:], stderr[-2000:])
    ops = {e["row"]: e for e in events if e["ev"] == "op"}
    assert sorted(ops) == list(range(6)) and all(e["ok"] for e in ops.values()), ops
    assert [e["type"] for e in events if e["ev"] == "subscribed"] == ["StreamConsumer"]
    # The merged segment is the topic's fourth (ids 0; 1, 2 from the split; 3), as in the model.
    assert "segment=3," in ops[4]["message_id"] and "segment=0," in ops[1]["message_id"]
    assert [e["msg"] for e in events if e["ev"] == "deliver"] == ["m-a", "m-b"]


@pytest.mark.parametrize(("design", "bad", "why"), [
    ("v4", {"op": "crash_tc"}, "crash_tc"),
    ("v4", {"op": "publish", "topic": "topic://public/x/t", "msg": "m", "size": 1}, "V5 SDK"),
    ("v5", {"op": "publish", "topic": "persistent://public/x/t", "msg": "m", "size": 1}, "topic://"),
])
def test_unsupported_row_is_refused_before_anything_runs(client_cp: str, pulsar: PulsarBroker, design: str,
                                                         bad: dict[str, Any], why: str, tmp_path: Path) -> None:
    topic = _topic(design)
    rows = [_row(0, 0, "publish", topic=topic, msg="m0", size=8), {**_row(1, 5, "publish"), **bad}]
    rc, events, _ = _run(client_cp, pulsar, design, rows, tmp_path)
    assert rc == 2
    assert len(events) == 1 and events[0]["ev"] == "refused" and events[0]["row"] == 1
    assert why in events[0]["reason"]


def test_v4_subscribes_with_the_type_the_trace_names(client_cp: str, pulsar: PulsarBroker, tmp_path: Path) -> None:
    """The classic consumer takes any subscription type: the trace's sub_type, Failover without one."""
    topic = _topic("v4")
    rows = [_row(0, 0, "subscribe", topic=topic, subscription="shared", sub_type="Shared"),
            _row(1, 0, "subscribe", topic=topic, subscription="untyped"),
            _row(2, 10, "publish", topic=topic, msg="m0", size=8, key="k"),
            _row(3, 500_000, "ack", topic=topic, msg="m0", subscription="shared", ack_kind="individual")]
    rc, events, stderr = _run(client_cp, pulsar, "v4", rows, tmp_path)
    assert rc == 0, (events[-3:], stderr[-2000:])
    assert [(e["subscription"], e["type"]) for e in events if e["ev"] == "subscribed"] == [
        ("shared", "Shared"), ("untyped", "Failover")]
    assert sorted((e["subscription"], e["msg"]) for e in events if e["ev"] == "deliver") == [
        ("shared", "m0"), ("untyped", "m0")]


@pytest.mark.parametrize(("sub_type", "ack_kind", "why"), [
    ("Failover", "individual", "QueueConsumer (Shared)"),
    ("Shared", "cumulative", "StreamConsumer (Exclusive)"),
])
def test_v5_refuses_a_subscription_type_its_consumer_does_not_give(client_cp: str, pulsar: PulsarBroker, sub_type: str,
                                                                   ack_kind: str, why: str, tmp_path: Path) -> None:
    """The V5 SDK has consumers, not subscription types: a trace naming another type is refused."""
    topic = _topic("v5")
    rows = [_row(0, 0, "subscribe", topic=topic, subscription="s", sub_type=sub_type),
            _row(1, 10, "publish", topic=topic, msg="m0", size=8, key="k"),
            _row(2, 20, "ack", topic=topic, msg="m0", subscription="s", ack_kind=ack_kind)]
    rc, events, _ = _run(client_cp, pulsar, "v5", rows, tmp_path)
    assert rc == 2
    assert len(events) == 1 and events[0]["ev"] == "refused" and events[0]["row"] == 0
    assert why in events[0]["reason"] and sub_type in events[0]["reason"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("design", ["v4", "v5"])
def test_unreachable_broker_is_fatal_and_named_at_once(client_cp: str, pulsar: PulsarBroker, tmp_path: Path,
                                                        design: str) -> None:
    """Checked before any client is built (Reach: its message, not the client's), so the v4 client's
    30-s retries of the coordinators' lookup do not come first."""
    port = _closed_port()
    rows = [_row(0, 0, "publish", topic=_topic(design), msg="m0", size=8)]
    for urls, named in (((f"pulsar://127.0.0.1:{port}", pulsar.admin_url), f"broker pulsar://127.0.0.1:{port}"),
                        ((pulsar.url, f"http://127.0.0.1:{port}"), f"admin http://127.0.0.1:{port}")):
        rc, events, _ = _run(client_cp, None, design, rows, tmp_path, urls=urls)
        assert rc == 3
        assert [e["ev"] for e in events] == ["error"]
        assert events[0]["fatal"] is True and f"{named} is unreachable" in events[0]["message"]


def test_client_cp_is_cached_by_source_hash(client_cp: str) -> None:
    again = subprocess.run([str(ROOT / "scripts" / "pulsar.sh"), "client-cp"], capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.strip() == client_cp
    classes = Path(client_cp.split(":")[0])
    assert (classes / "txnbench" / "client" / "TraceClient.class").is_file()
