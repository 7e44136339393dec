"""Round trips of the v5 engine on Redis (issue 19's goal: at most one per transactional publish and
per END_TXN in the steady state), and the coherence of what an exclusive handle answers locally."""

from __future__ import annotations

import pytest

from engine.dispatcher import DispatchMode
from engine.memledger import MemoryLedgerFactory
from engine.ports import TxnStatus
from metadata_v5.engine import V5Engine
from metadata_v5.options import V5Options
from metadata_v5.store.memory import MemoryMetadataStore
from metadata_v5.store.port import MetadataStore
from metadata_v5.store.redis import RedisMetadataStore
from tests.harness import Combo, Durable, System

pytestmark = pytest.mark.redis

S = "topic://public/default/s"


def _round_trips(handles: list[MetadataStore]) -> int:
    return sum(h.stats()["round_trips"] for h in handles)


def _script(base: MetadataStore, variant: str) -> tuple[dict[str, int], list[tuple[list[int], int]], list[str | None]]:
    """Three txns of three publishes each, committed one after the other, on one broker: the
    meters, the round trips each publish and each END_TXN made inside the call, the deliveries."""
    handles: list[MetadataStore] = []

    def engine(d: Durable) -> object:
        def make(ctx: object) -> V5Engine:
            handles.append(base.reopen())
            return V5Engine(ctx, handles[-1], V5Options(variant=variant))  # type: ignore[arg-type]
        return make

    s = System(Combo("v5", True, lambda: Durable(MemoryLedgerFactory()), engine), DispatchMode.POLLING)  # type: ignore[arg-type]
    calls = []
    try:
        s.subscribe(S, "sub")
        for i in range(3):
            txn = s.new_txn()
            s.run(1_000)
            per_publish = []
            for j in range(3):
                before = _round_trips(handles)
                s.publish(S, f"m{i}.{j}", txn=txn)
                per_publish.append(_round_trips(handles) - before)
            s.run(1_000)
            before = _round_trips(handles)
            s.commit(txn)
            calls.append((per_publish, _round_trips(handles) - before))
            s.run(100_000)
            assert s.outcomes[txn] is TxnStatus.COMMITTED
        meters = {k: v for k, v in s.stats().items() if k.startswith("meta.") and k != "meta.round_trips"}
        return meters, calls, [d.msg for d in s.received[(S, "sub")]]
    finally:
        for h in handles:
            h.close()
        base.close()


@pytest.mark.parametrize("variant", ["shipped", "pip"])
def test_one_round_trip_per_txn_publish_and_per_end_txn(redis_url: str, redis_prefix: str, variant: str) -> None:
    meters, calls, msgs = _script(RedisMetadataStore(redis_url, prefix=redis_prefix, exclusive=True), variant)
    # the steady state, every txn after the first: one per publish; one per END_TXN (the shipped
    # coordinator's listOpsByTxn, chained to its CAS in the call, TransactionCoordinatorV5 L456
    # then L477, goes out in the CAS's pipeline: batch_then_query_records)
    for per_publish, end_txn in calls[1:]:
        assert per_publish == [1, 1, 1] and end_txn == 1, calls
    # the meters count what Pulsar's store does, as on the embedded store: reads answered
    # locally are reads all the same
    mem_meters, mem_calls, mem_msgs = _script(MemoryMetadataStore.open(), variant)
    assert msgs == mem_msgs == [f"m{i}.{j}" for i in range(3) for j in range(3)]
    assert meters == mem_meters and meters["meta.reads"] > 0
    assert all(c == ([0, 0, 0], 0) for c in mem_calls)


def test_an_exclusive_handle_answers_reads_locally_only_while_current(redis_url: str, redis_prefix: str) -> None:
    a = RedisMetadataStore(redis_url, prefix=redis_prefix, exclusive=True)
    b = a.reopen()
    plain = RedisMetadataStore(redis_url, prefix=redis_prefix)
    try:
        a.put("/txn/{1}", {"state": "OPEN"})
        rt = a.stats()["round_trips"]
        assert a.get("/txn/{1}").fields == {"state": "OPEN"}  # type: ignore[union-attr]
        assert a.stats()["round_trips"] == rt and a.stats()["reads"] == 1  # its own write, cached
        b.put("/txn/{1}", {"state": "COMMITTED"})  # another handle of this process moves on
        record = a.get("/txn/{1}")
        assert record is not None and record.fields == {"state": "COMMITTED"} and a.stats()["round_trips"] == rt + 1
        b.delete("/txn/{1}")
        assert a.get("/txn/{1}") is None
        rt = a.stats()["round_trips"]
        assert a.get("/txn/{1}") is None and a.stats()["round_trips"] == rt  # known absent
        # a handle that is not exclusive (someone outside this process may write) always asks
        rt = plain.stats()["round_trips"]
        plain.get("/txn/{1}")
        plain.get("/txn/{1}")
        assert plain.stats()["round_trips"] == rt + 2
    finally:
        for h in (a, b, plain):
            h.close()
