"""v4 on scalable topics: a segment sealed under an open txn cannot take the commit marker, so
END_TXN_ON_PARTITION fails and is retried every second, the txn stays COMMITTING and its entries
(and everything after them in that segment, and the child segments that wait for it to drain)
stay invisible. This is the behaviour PIP-473 exists to fix; it is reported as it is."""

from __future__ import annotations

from engine.dispatcher import DispatchMode
from engine.ports import TxnStatus
from engine.scripted import sealed_segment
from legacy_v4 import v4_engine
from tests.harness import Combo, System, memory_durable

S = "topic://public/default/events"


def v4(mode: DispatchMode, **options: object) -> System:
    return System(Combo("v4", True, memory_durable, lambda d: v4_engine(**options)), mode)


def _stalled(mode: DispatchMode, **options: object) -> System:
    s = v4(mode, **options)
    sealed = sealed_segment(s, S, "sub", pause_us=1_000_000)
    s.commit(sealed.txn)
    s.run(10_500_000)
    assert s.ids["child"].ledger in sealed.children
    return s


def test_sealed_segment_stalls_the_commit_and_everything_behind_it() -> None:
    for mode in DispatchMode:
        s = _stalled(mode)
        t = next(iter(s.broker.coordinator().coordinators[0].live())).id  # type: ignore[attr-defined]
        assert s.broker.coordinator().status(t) is TxnStatus.COMMITTING
        assert t not in s.outcomes
        assert s.msgs(S, "sub") == ["before"]  # x, after and the child segment all wait
        st = s.stats()
        assert st["tc.end_txn.rpcs_sent"] == 11 and st["tc.end_txn.rpcs_failed"] == 11
        assert st["tc.end_txn.retries"] == 11  # every failed round schedules the next one, 1 s later
        assert st["tb.marker_append_failed"] == 11 and st.get("ledger.appends.marker", 0) == 0
        s.broker.check()


def test_bounded_retries_give_up_and_answer_the_client_with_the_unfinished_status() -> None:
    s = _stalled(DispatchMode.NOTIFY, end_txn_max_retries=2)
    assert list(s.outcomes.values()) == [TxnStatus.COMMITTING]
    st = s.stats()
    assert st["tc.end_txn.rpcs_sent"] == 3 and st["tc.end_txn.gave_up"] == 1
    assert s.msgs(S, "sub") == ["before"]


def test_a_txn_that_ends_before_the_split_is_unaffected() -> None:
    s = v4(DispatchMode.POLLING)
    s.subscribe(S, "sub")
    t = s.new_txn()
    s.publish(S, "x", txn=t, key="a")
    s.commit(t)
    s.run()
    s.broker.split(S)
    s.publish(S, "child", key="a")
    s.run()
    assert s.msgs(S, "sub") == ["x", "child"]
