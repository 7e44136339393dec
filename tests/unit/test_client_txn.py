"""The Java client's own transaction logic, played by the replayer on both engines:
``TransactionImpl``'s timer (OPEN -> TIME_OUT, then ``InvalidTxnStatusException`` on every use)
and ``hasOpsFailed`` (a commit after a failed publish or ack is sent as an abort), and the
broker's ``maxMessageSize`` (``ServiceConfiguration``, 5 MB)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer, RunResult
from bench.trace.trace import read_events
from tests.unit.test_trace import T, write

ENGINES = ("v4", "v5")
# new_txn's answer under the constants profile, from the code: the request and answer hops (rpc
# 200 each) around v4's coordinator-log append (ledger.append 1,000), or v5's sequence key (a
# meta.read 300 and its meta.cas 1,000) and header create (meta.write 1,000). The client's
# TransactionImpl, and its timer, start then.
NEW_TXN_US = {"v4": 200 + 1_000 + 200, "v5": 200 + 300 + 1_000 + 1_000 + 200}
# a txn ack's answer, which the commit waits for (TransactionImpl.registerAckOp): the client's
# registration of the subscription first (ConsumerBase: registerAckedTopic), a round trip around
# v4's coordinator-log append (ledger.append 1,000) or v5's ownership read (meta.read 300), then
# the ack's round trip around its pending-ack record: v4's pending-ack log append, v5's op record
# (meta.write 1,000). A v4 subscription's first txn ack also waits for its pending-ack log's
# creation (legacy_v4.pending_ack: two meta.read 300, five meta.write and a meta.cas 1,000 each, a
# meta.list 500), as each of these tests' acks is.
PENDING_ACK_LOG_US = 2 * 300 + 6 * 1_000 + 500
ACK_US = {"v4": (200 + 1_000 + 200) + PENDING_ACK_LOG_US + (200 + 1_000 + 200),
          "v5": (200 + 300 + 200) + (200 + 1_000 + 200)}
PLAIN_US = {"v4": 200 + 1_000 + 200, "v5": 200 + 1_000 + 1_000 + 200}  # a plain publish, v5's watermark CAS in it
MB5 = 5 * 1024 * 1024


def _run(tmp_path: Path, engine: str, rows: list[dict[str, Any]], **cfg: Any) -> RunResult:
    trace = write(tmp_path / f"{engine}.parquet", rows)
    return Replayer(RunConfig(engine=engine, **cfg)).run(read_events(trace))


def _outcomes(result: RunResult) -> dict[str, str]:
    return dict(zip(result.txns["txn"], result.txns["outcome"]))


def _delivered(result: RunResult) -> set[str]:
    return set(result.deliveries["msg"])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_commit_after_the_client_timeout_fails_and_the_txn_ends_aborted(tmp_path: Path, engine: str) -> None:
    # timeout 1 s; the commit at 1.5 s. v5's coordinator sweeps only every 60 s, v4's ticks every
    # 100 ms: whichever swept first, the client refuses the commit (TransactionImpl.run/commit).
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t1", "timeout_ms": 1_000},
        {"ts_us": 10, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 1_200_000, "op": "publish", "txn": "t1", "topic": T, "msg": "m2", "size": 10},
        {"ts_us": 1_500_000, "op": "commit", "txn": "t1"},
        {"ts_us": 1_600_000, "op": "publish", "topic": T, "msg": "p1", "size": 10},
    ]
    result = _run(tmp_path, engine, rows)
    c = result.counts
    assert c["client_errors.TxnClientTimeout"] == 2  # the late publish and the commit
    assert c["txns.client_timed_out"] == 1
    assert _outcomes(result) == {"t1": "aborted"}
    i = result.txns["txn"].index("t1")
    assert result.txns["end_ts_us"][i] == NEW_TXN_US[engine] + 1_000_000  # its deadline
    assert result.txns["commit_requested_ts_us"][i] is None  # the commit never left the client
    assert _delivered(result) == {"p1"}  # m1 was aborted by the coordinator, m2 never sent
    assert c["undelivered_at_end"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_a_commit_before_the_timeout_cancels_the_client_timer(tmp_path: Path, engine: str) -> None:
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t1", "timeout_ms": 1_000},
        {"ts_us": 10, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 999_999, "op": "commit", "txn": "t1"},
    ]
    result = _run(tmp_path, engine, rows)
    assert _outcomes(result) == {"t1": "committed"}
    assert "txns.client_timed_out" not in result.counts
    assert _delivered(result) == {"m1"}


@pytest.mark.parametrize("engine", ENGINES)
def test_an_open_txn_past_its_timeout_is_reported_aborted(tmp_path: Path, engine: str) -> None:
    # No end row: the coordinator's timeout aborts it (v4 forgets it then; the client's timer
    # says TIME_OUT on both). One still within its timeout at the end of the drain stays open.
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t1", "timeout_ms": 1_000},
        {"ts_us": 10, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 10, "op": "new_txn", "txn": "t2", "timeout_ms": 3_600_000},
        {"ts_us": 20, "op": "publish", "txn": "t2", "topic": T, "msg": "m2", "size": 10},
    ]
    result = _run(tmp_path, engine, rows, drain_ms=2_000)
    assert _outcomes(result) == {"t1": "aborted", "t2": "open"}
    assert result.counts["txns.aborted"] == 1 and result.counts["txns.open"] == 1


@pytest.mark.parametrize("engine", [*ENGINES, "none"])
def test_a_message_over_max_message_size_is_refused(tmp_path: Path, engine: str) -> None:
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 10, "op": "publish", "topic": T, "msg": "big", "size": MB5 + 1},
        {"ts_us": 20, "op": "publish", "topic": T, "msg": "limit", "size": MB5},
    ]
    result = _run(tmp_path, engine, rows)
    assert result.counts["client_errors.MessageTooBig"] == 1
    assert _delivered(result) == {"limit"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_commit_after_a_failed_send_turns_into_an_abort(tmp_path: Path, engine: str) -> None:
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t1"},
        {"ts_us": 10, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 20, "op": "publish", "txn": "t1", "topic": T, "msg": "big", "size": MB5 + 1},
        {"ts_us": 30, "op": "commit", "txn": "t1"},
        {"ts_us": 40, "op": "new_txn", "txn": "t2"},
        {"ts_us": 50, "op": "publish", "txn": "t2", "topic": T, "msg": "m2", "size": 10},
        {"ts_us": 60, "op": "commit", "txn": "t2"},
    ]
    result = _run(tmp_path, engine, rows)
    c = result.counts
    assert c["client_errors.MessageTooBig"] == 1 and c["client_errors.TxnOpFailed"] == 1
    assert _outcomes(result) == {"t1": "aborted", "t2": "committed"}
    assert _delivered(result) == {"m2"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_commit_after_a_conflicting_ack_turns_into_an_abort(tmp_path: Path, engine: str) -> None:
    # t2's ack of m1 conflicts with t1's pending ack (PendingAckHandleImpl): t2's commit aborts.
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "publish", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 0, "op": "publish", "topic": T, "msg": "m2", "size": 10},
        {"ts_us": 100_000, "op": "new_txn", "txn": "t1"},
        {"ts_us": 100_000, "op": "new_txn", "txn": "t2"},
        {"ts_us": 100_010, "op": "ack", "txn": "t1", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 100_020, "op": "ack", "txn": "t2", "topic": T, "msg": "m2", "subscription": "s"},
        {"ts_us": 100_030, "op": "ack", "txn": "t2", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 100_040, "op": "commit", "txn": "t1"},
        {"ts_us": 100_050, "op": "commit", "txn": "t2"},
    ]
    result = _run(tmp_path, engine, rows)
    c = result.counts
    assert c["client_errors.TxnConflict"] == 1 and c["client_errors.TxnOpFailed"] == 1
    assert _outcomes(result) == {"t1": "committed", "t2": "aborted"}


def _delivered_then_acked_in_t1(ack_us: int) -> list[dict[str, Any]]:
    """m1, published at 0, is delivered long before t1 (opened at 100 ms) acks it at ``ack_us``."""
    return [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "publish", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 100_000, "op": "new_txn", "txn": "t1"},
        {"ts_us": ack_us, "op": "ack", "txn": "t1", "topic": T, "msg": "m1", "subscription": "s"},
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_plain_ack_of_a_message_pending_in_a_txn_applies_at_once(tmp_path: Path, engine: str) -> None:
    # The consumer received m1, acked it in t1, then acks it plainly: the cursor takes it at once
    # (PersistentSubscription.acknowledgeMessage), so t1's abort redelivers nothing.
    rows = _delivered_then_acked_in_t1(ack_us=100_010) + [
        {"ts_us": 100_020, "op": "ack", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 100_030, "op": "abort", "txn": "t1"},
    ]
    result = _run(tmp_path, engine, rows)
    c = result.counts
    assert result.deliveries["msg"] == ["m1"]  # no redelivery after the abort
    assert "acks.deferred" not in c and c["acks.never_applied"] == 0
    assert _outcomes(result) == {"t1": "aborted"}


@pytest.mark.parametrize("engine", ENGINES)
def test_the_checker_sees_a_timed_out_txn_ack_as_aborted(tmp_path: Path, engine: str) -> None:
    # t1 acks m1 and never ends: the coordinator's timeout aborts it and m1 comes back. Reported
    # "open" (v4 before the client timer), the checker took that pending ack for ever and called
    # the redelivery an acked message delivered again.
    from bench.check import History, check

    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "publish", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 100_000, "op": "new_txn", "txn": "t1", "timeout_ms": 1_000},
        {"ts_us": 100_010, "op": "ack", "txn": "t1", "topic": T, "msg": "m1", "subscription": "s"},
    ]
    history = History()
    trace = write(tmp_path / f"{engine}.parquet", rows)
    result = Replayer(RunConfig(engine=engine), history=history).run(read_events(trace))
    assert _outcomes(result) == {"t1": "aborted"}
    assert result.deliveries["msg"] == ["m1", "m1"] and result.deliveries["redelivery"] == [False, True]
    assert check(history) == []


def _commit_then_crash(commit_us: int | None, crash_us: int, timeout_ms: int) -> list[dict[str, Any]]:
    """t1 publishes m1 at 2 us and commits at ``commit_us`` (None: never); the broker crashes at
    ``crash_us``."""
    return [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 1, "op": "new_txn", "txn": "t1", "timeout_ms": timeout_ms},
        {"ts_us": 2, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        *([{"ts_us": commit_us, "op": "commit", "txn": "t1"}] if commit_us is not None else []),
        {"ts_us": crash_us, "op": "crash_broker"},
    ]


@pytest.mark.parametrize("engine, options", [("v4", {}), ("v5", {}), ("v5", {"variant": "pip"})])
def test_an_end_txn_a_crash_cut_off_fails_at_the_client_after_the_operation_timeout(tmp_path: Path, engine: str, options: dict[str, Any]) -> None:
    # the commit at 50 ms, its publish answered long before; the broker (the coordinator with
    # it) dies 2 us later, before its answer reaches the client: TransactionMetaStoreHandler
    # fails the request 30 s after it was sent
    rows = _commit_then_crash(commit_us=50_000, crash_us=50_002, timeout_ms=1000)
    before = _run(tmp_path, engine, rows, drain_ms=29_000, options=options)  # still waiting
    assert before.in_flight["ending_txns"] == 1
    # unanswered: the row says what the coordinator knows (v4 forgets a finished txn)
    assert before.txns["outcome"] == (["unfinished"] if engine == "v4" else ["committed"])
    assert "client_errors.TimeoutException" not in before.counts
    result = _run(tmp_path, engine, rows, drain_ms=31_000, options=options)
    assert result.in_flight == {"undelivered": 0, "committed_not_visible": 0, "ending_txns": 0, "unsent": 0}
    assert _outcomes(result) == {"t1": "end_timed_out"} and result.counts["txns.end_timed_out"] == 1
    assert result.counts["client_errors.TimeoutException"] == 1
    assert result.txns["end_ts_us"] == [50_000 + 30_000_000]
    assert _delivered(result) == {"m1"}  # the coordinator had committed it: only the answer was lost


@pytest.mark.parametrize("engine, options", [("v4", {}), ("v5", {"variant": "pip"})])
def test_a_txn_append_a_crash_follows_at_once_stays_hidden_until_its_timeout_aborts_it(tmp_path: Path, engine: str, options: dict[str, Any]) -> None:
    # found by a fuzzer's enumeration: v4's first txn append on a fresh topic (the new TB's snapshot
    # lookup still in flight) and a crash the same instant; the next TB found no snapshot, took
    # the ledger's last entry as maxReadPosition and dispatched m1 of a txn its timeout aborted.
    # (The shipped v5 delivers m1 here: its crash windows are findings, test_v5_shipped.py.)
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 1, "op": "new_txn", "txn": "t1", "timeout_ms": 1000},
        {"ts_us": 2, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 2, "op": "crash_broker"},
        {"ts_us": 3, "op": "publish", "topic": T, "msg": "p1", "size": 10},
    ]
    result = _run(tmp_path, engine, rows, options=options)  # v5 sweeps timed-out txns every 60 s
    assert _outcomes(result) == {"t1": "aborted"}
    assert _delivered(result) == {"p1"}  # after the abort marker: maxReadPosition moves past m1


@pytest.mark.parametrize("engine, options", [("v4", {}), ("v5", {"variant": "pip"})])
def test_an_end_txn_waits_for_the_txns_sends_even_across_a_crash(tmp_path: Path, engine: str, options: dict[str, Any]) -> None:
    """jvm TraceRunner.end sends END_TXN once the txn's sends are answered (TransactionImpl.commit
    waits for its send futures): a commit row 1 us after its publish goes out at the publish's
    answer, here after the broker's crash, to the broker that recovered the txn."""
    from engine.clock import LatencyModel

    rows = _commit_then_crash(commit_us=3, crash_us=5, timeout_ms=10_000)
    result = _run(tmp_path, engine, rows, drain_ms=5_000, options=options)
    assert result.txns["commit_requested_ts_us"][0] >= 2 + LatencyModel().of("ledger.append")
    assert _outcomes(result) == {"t1": "committed"} and _delivered(result) == {"m1"}
    assert result.in_flight == {"undelivered": 0, "committed_not_visible": 0, "ending_txns": 0, "unsent": 0}


def _requested(result: RunResult) -> dict[str, int]:
    return dict(zip(result.txns["txn"], result.txns["commit_requested_ts_us"]))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_txns_sends_wait_for_its_new_txn_answer_and_a_topics_later_sends_for_them(tmp_path: Path, engine: str) -> None:
    """jvm TraceRunner.publish: a txn send goes once new_txn is answered (the client has no txn
    before), and a send behind it on the same topic once it has gone (the client issues a topic's
    sends in trace order); a send to another topic goes at once. Latencies start when the request goes out,
    as the broker run measures them."""
    U = "persistent://public/default/u"
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "subscribe", "topic": U, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t1"},
        {"ts_us": 0, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 1, "op": "publish", "topic": T, "msg": "p1", "size": 10},  # behind m1
        {"ts_us": 1, "op": "publish", "topic": U, "msg": "q1", "size": 10},  # its own topic
        {"ts_us": 2, "op": "commit", "txn": "t1"},
        {"ts_us": 3, "op": "new_txn", "txn": "t2"},
        {"ts_us": 4, "op": "commit", "txn": "t2"},  # no sends: it waits for the txn alone
    ]
    result = _run(tmp_path, engine, rows)
    lat, c = result.latency, result.counts
    assert (lat["new_txn_us"]["count"], lat["new_txn_us"]["sum_us"]) == (2, 2 * NEW_TXN_US[engine])
    assert c["client.ops_gated"] == 2  # m1 and p1, not q1
    # p1 and q1: rpc + ledger.append + rpc each, p1's wait for m1 not in it; on v5 each also waits
    # for its segment's first watermark CAS (meta.cas 1,000), which an idle state tail runs before
    # the receipt (MetadataTransactionBuffer.syncMaxReadPositionForNormalPublish)
    assert (lat["publish_nontxn_us"]["count"], lat["publish_nontxn_us"]["sum_us"]) == (2, 2 * PLAIN_US[engine])
    # END_TXN: once m1, sent at the new_txn answer, is answered; t2's at its own answer
    m1_us = lat["publish_txn_us"]["sum_us"]
    assert _requested(result) == {"t1": NEW_TXN_US[engine] + m1_us, "t2": 3 + NEW_TXN_US[engine]}
    assert _outcomes(result) == {"t1": "committed", "t2": "committed"}
    assert _delivered(result) == {"m1", "p1", "q1"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_txn_ack_waits_for_its_new_txn_answer(tmp_path: Path, engine: str) -> None:
    # jvm TraceRunner.ack: a txn ack goes once its txn exists; the commit goes once it is answered
    rows = _delivered_then_acked_in_t1(ack_us=100_000) + [{"ts_us": 100_001, "op": "commit", "txn": "t1"}]
    result = _run(tmp_path, engine, rows)
    assert result.counts["client.ops_gated"] == 1
    assert result.counts["acks.txn_after_delivery"] == 1
    assert _requested(result) == {"t1": 100_000 + NEW_TXN_US[engine] + ACK_US[engine]}
    assert _outcomes(result) == {"t1": "committed"}
    assert result.counts["undelivered_at_end"] == 0 and result.in_flight["ending_txns"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_what_waits_for_new_txn_goes_out_before_a_broker_crash(tmp_path: Path, engine: str) -> None:
    # jvm TraceRunner.crash waits for every outstanding op first: m1 goes to the broker about to
    # crash, at the crash row, once (not again to the next broker at new_txn's answer). (The
    # shipped v5 then delivers m1: its crash windows are findings, test_v5_shipped.py.)
    rows = _commit_then_crash(commit_us=None, crash_us=5, timeout_ms=1_000)  # m1 waits for new_txn until 1 + its answer
    result = _run(tmp_path, engine, rows)
    assert result.counts["client.ops_gated"] == 1
    assert result.latency["publish_txn_us"]["count"] == 1
    assert _outcomes(result) == {"t1": "aborted"}  # never committed: its timeout aborts it
    assert result.in_flight == {"undelivered": 0, "committed_not_visible": 0, "ending_txns": 0, "unsent": 0}
    if engine == "v4":
        assert _delivered(result) == set()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_ack_of_a_message_whose_send_waits_goes_right_after_the_send(tmp_path: Path, engine: str) -> None:
    # jvm TraceRunner.ack acks by the id its message's publish returns: p1's send waits behind m1
    # (t1's new_txn), and t0's ack of p1 goes out once p1 has, before p1 is delivered: the
    # dispatcher then skips p1 (in pending ack) and the commit acks it
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t0"},
        {"ts_us": 10_000, "op": "new_txn", "txn": "t1"},
        {"ts_us": 10_000, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 10_001, "op": "publish", "topic": T, "msg": "p1", "size": 10},
        {"ts_us": 10_002, "op": "ack", "txn": "t0", "topic": T, "msg": "p1", "subscription": "s"},
        {"ts_us": 10_003, "op": "commit", "txn": "t0"},
        {"ts_us": 10_004, "op": "commit", "txn": "t1"},
    ]
    result = _run(tmp_path, engine, rows)
    c = result.counts
    assert c["client.ops_gated"] == 3  # m1, p1 and the ack
    assert c["acks.txn_before_delivery"] == 1 and "acks.after_all_acked" not in c
    assert _requested(result)["t0"] == 10_000 + NEW_TXN_US[engine] + ACK_US[engine]  # the ack's answer, the ack at p1's send
    assert _outcomes(result) == {"t0": "committed", "t1": "committed"}
    assert _delivered(result) == {"m1"}
    assert result.in_flight == {"undelivered": 0, "committed_not_visible": 0, "ending_txns": 0, "unsent": 0}


def test_a_v4_subscriptions_first_txn_ack_waits_for_its_pending_ack_log_to_be_created(tmp_path: Path) -> None:
    # PendingAckHandleImpl parks a subscription's first txn ack until initPendingAckStore has
    # created the <topic>-<sub>__transaction_pending_ack ledger and its cursor; t2's ack of the
    # same subscription finds it there, t3's of another subscription creates that one's
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "u"},
        {"ts_us": 0, "op": "publish", "topic": T, "msg": "m1", "size": 10},
        {"ts_us": 0, "op": "publish", "topic": T, "msg": "m2", "size": 10},
        *[{"ts_us": 100_000, "op": "new_txn", "txn": t} for t in ("t1", "t2", "t3")],
        {"ts_us": 200_000, "op": "ack", "txn": "t1", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 200_001, "op": "commit", "txn": "t1"},
        {"ts_us": 300_000, "op": "ack", "txn": "t2", "topic": T, "msg": "m2", "subscription": "s"},
        {"ts_us": 300_001, "op": "commit", "txn": "t2"},
        {"ts_us": 400_000, "op": "ack", "txn": "t3", "topic": T, "msg": "m1", "subscription": "u"},
        {"ts_us": 400_001, "op": "commit", "txn": "t3"},
    ]
    result = _run(tmp_path, "v4", rows)
    later = ACK_US["v4"] - PENDING_ACK_LOG_US
    assert _requested(result) == {"t1": 200_000 + ACK_US["v4"], "t2": 300_000 + later, "t3": 400_000 + ACK_US["v4"]}
    c = result.counts
    assert c["pending_ack.log_creations"] == 2
    assert _outcomes(result) == {"t1": "committed", "t2": "committed", "t3": "committed"}
