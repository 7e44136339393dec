"""The MetadataStore contract, written once and run against every backend: ``memory``,
``memory-degraded``, ``memory-emulated``, ``redis``, ``redis-degraded`` and ``redis-emulated`` (Redis ones skip locally without
``TXNBENCH_REDIS_URL`` and fail when ``TXNBENCH_REQUIRE`` includes redis). Plus a Hypothesis
state machine driving every available backend in lockstep against the in-memory one.

Watch timing is the one documented difference: a backend whose ``capabilities.range_watch_events``
is ``False`` (degraded) reports range changes only at ``relist()`` and only their net effect.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from engine.errors import BackendUnavailable, BadVersion, ConfigError, KeyExists, MetadataError, NoSuchKey
from metadata_v5.store.degraded import DegradedMetadataStore
from metadata_v5.store.emulated import EmulatedMetadataStore
from metadata_v5.store.memory import MemoryMetadataStore
from metadata_v5.store.registry import open_metadata
from metadata_v5.store.port import (
    ABSENT, STAT_KEYS, ChangeKind, Check, Delete, DeleteSequence, IndexEntry, IndexSpec, MetadataStore, OpResult,
    Put, PutSequential, Record, WatchEvent, partition_key, sequential_key,
)

ROOT = Path(__file__).resolve().parents[2]

DEADLINE = IndexSpec("txn-by-deadline", "/txn/", ("timeout_ms",), numeric=True, where={"state": "OPEN"})
FINAL = IndexSpec("txn-by-final-state", "/txn/", ("state", "finalized_ms"), int_fields=("finalized_ms",),
                  where={"state": ("COMMITTED", "ABORTED")})
WRITES = IndexSpec("writes-by-segment", "/txn-op/", ("segment", "txn"), where={"kind": "write"})
ACKS = IndexSpec("acks-by-segment-subscription", "/txn-op/", ("segment", "subscription", "txn"),
                 where={"kind": "ack"})
SPECS = (DEADLINE, FINAL, WRITES, ACKS)


class Factory:
    """Opens handles on one fresh, empty store of a backend kind; cleans up after the test."""

    def __init__(self, kind: str, redis_url: str | None) -> None:
        self.kind = kind
        self.degraded = kind.endswith("-degraded")
        self.url = f"{redis_url}/0?prefix=t{uuid.uuid4().hex[:12]}:" if redis_url else "memory://"
        self.backend_url = self.url  # the wrapped backend's own URL (the purger's)
        if kind.endswith("-emulated"):  # Pulsar's AbstractMetadataStore fallback (metadata_v5.store.emulated)
            self.url += "&emulated=1" if "?" in self.url else "?emulated=1"
        self.handles: list[MetadataStore] = []
        self._first: MetadataStore | None = None

    def open(self) -> MetadataStore:
        """A handle; the second and later ones are new clients on the first one's data."""
        if self._first is None:
            store = open_metadata(self.url, degraded=self.degraded)
            self._first = store
        else:
            store = self._first.reopen()
        self.handles.append(store)
        return store

    def close(self) -> None:
        for h in self.handles:
            h.close()
        if self.url.startswith("redis"):
            from metadata_v5.store.redis import RedisMetadataStore

            purger = RedisMetadataStore.from_url(self.backend_url)
            purger.purge()
            purger.close()


def _kinds() -> list[Any]:
    return [pytest.param("memory"), pytest.param("memory-degraded"), pytest.param("memory-emulated"),
            pytest.param("redis", marks=pytest.mark.redis), pytest.param("redis-degraded", marks=pytest.mark.redis),
            pytest.param("redis-emulated", marks=pytest.mark.redis)]


@pytest.fixture(params=_kinds())
def factory(request: pytest.FixtureRequest) -> Iterator[Factory]:
    url = request.getfixturevalue("redis_url") if request.param.startswith("redis") else None
    f = Factory(request.param, url)
    yield f
    f.close()


@pytest.fixture
def store(factory: Factory) -> MetadataStore:
    s = factory.open()
    for spec in SPECS:
        s.define_index(spec)
    return s


def settle(*stores: MetadataStore) -> None:
    """What an engine's schedule does: re-list (degraded) and deliver pending events."""
    for s in stores:
        s.relist()
        s.poll_watches()


def txn(store: MetadataStore, t: str, state: str = "OPEN", timeout: int = 100, final: int | None = None,
        expected: int | None = None) -> int:
    fields = {"state": state, "timeout_ms": str(timeout)}
    if final is not None:
        fields["finalized_ms"] = str(final)
    return store.put(f"/txn/{{{t}}}", fields, expected).version


# --- records and CAS --------------------------------------------------------------------------


def test_get_put_delete(store: MetadataStore) -> None:
    assert store.get("/a") is None
    r1 = store.put("/a", {"x": "1", "y": "two"})
    assert r1.version > 0
    got = store.get("/a")
    assert got is not None and dict(got.fields) == {"x": "1", "y": "two"} and got.version == r1.version
    r2 = store.put("/a", {"z": "3"})  # replaces, no merge
    assert r2.version > r1.version
    assert dict(store.get("/a").fields) == {"z": "3"}  # type: ignore[union-attr]
    assert store.delete("/a") is True
    assert store.get("/a") is None
    assert store.delete("/a") is False  # idempotent
    r3 = store.create("/a", {})
    assert r3.version > r2.version  # versions never go back, even across delete + create
    assert dict(store.get("/a").fields) == {}  # type: ignore[union-attr]
    assert store.get_many(["/a", "/missing"]) == [store.get("/a"), None]


def test_cas_conflicts_write_nothing(store: MetadataStore) -> None:
    events: list[WatchEvent] = []
    store.watch("/k", events.append)
    r = store.create("/k", {"v": "1"})
    with pytest.raises(KeyExists):
        store.create("/k", {"v": "2"})
    with pytest.raises(BadVersion):
        store.put("/k", {"v": "3"}, r.version + 100)
    with pytest.raises(BadVersion):
        store.delete("/k", r.version + 100)
    with pytest.raises(NoSuchKey):
        store.put("/nope", {"v": "1"}, 5)
    with pytest.raises(NoSuchKey):
        store.delete("/nope", 5)
    assert store.get("/k") == r and store.get("/nope") is None
    ok = store.put("/k", {"v": "4"}, r.version)
    assert ok.version > r.version
    assert store.delete("/k", ok.version)
    settle(store)
    assert [(e.kind, e.version) for e in events] == [(ChangeKind.PUT, r.version), (ChangeKind.PUT, ok.version),
                                                      (ChangeKind.DELETE, ok.version + 1)]
    stats = store.stats()
    assert stats["cas_conflict"] == 5 and stats["cas_ok"] == 3


def test_batch_is_all_or_nothing(store: MetadataStore) -> None:
    v = txn(store, "1", timeout=10)
    before = (store.query(DEADLINE.name), store.list("/"))
    with pytest.raises(BadVersion):
        store.batch([Put("/txn/{1}", {"state": "COMMITTED", "timeout_ms": "10", "finalized_ms": "5"}, v),
                     Put("/txn/{2}", {"state": "OPEN", "timeout_ms": "20"}),
                     PutSequential("/txn-op/{1}/", {"kind": "write", "segment": "s", "txn": "1"}),
                     Check("/txn/{1}", v + 7)])
    with pytest.raises(ValueError):  # a non-integer numeric index field: rejected before any write
        store.batch([Put("/txn/{3}", {"state": "OPEN", "timeout_ms": "1"}),
                     Put("/txn/{4}", {"state": "OPEN", "timeout_ms": "soon"})])
    assert (store.query(DEADLINE.name), store.list("/")) == before
    store._check()
    res = store.batch([Check("/txn/{1}", v),
                       Put("/txn/{1}", {"state": "COMMITTED", "timeout_ms": "10", "finalized_ms": "5"}, v),
                       PutSequential("/txn-op/{1}/", {"kind": "write", "segment": "s", "txn": "1"}),
                       Delete("/txn/{9}"), DeleteSequence("/x/")])
    assert res[0].version == v
    assert res[1].version == res[2].version and res[1].version is not None and res[1].version > v
    assert res[2].key == sequential_key("/txn-op/{1}/", 1)
    assert res[3].version is None
    assert store.query(DEADLINE.name) == []
    assert store.query(FINAL.name) == [IndexEntry(FINAL.name, ("COMMITTED", 5), "/txn/{1}")]
    assert [e.key for e in store.query(WRITES.name, prefix=("s",))] == [res[2].key]
    with pytest.raises(ValueError):
        store.batch([Put("/a", {}), Delete("/a")])  # one write per key
    with pytest.raises(ValueError):
        store.put("/__txnbench/x", {})  # reserved
    with pytest.raises(ValueError):
        store.put("/a", {"$v": "1"})  # reserved field name
    store._check()


def test_batches_apply_each_on_its_own_and_raise_the_first_failure_after_trying_all(factory: Factory) -> None:
    store, other = factory.open(), factory.open()
    for spec in SPECS:
        store.define_index(spec)
    events: list[WatchEvent] = []
    other.watch("/txn/{2}", events.append)
    v1 = txn(store, "1")
    res = store.batches([[Put("/txn/{1}", {"state": "COMMITTED", "timeout_ms": "100", "finalized_ms": "3"}, v1)],
                         [Put("/txn/{2}", {"state": "OPEN", "timeout_ms": "7"})],
                         [PutSequential("/txn-op/{1}/", {"kind": "write", "segment": "s", "txn": "1"}),
                          Delete("/txn/{9}")]])
    assert [len(r) for r in res] == [1, 1, 2]
    assert res[0][0].version is not None and res[0][0].version > v1 and res[2][1].version is None
    assert store.get("/txn/{2}") is not None and [e.key for e in store.query(WRITES.name, prefix=("s",))] == [res[2][0].key]
    settle(other)
    assert [e.fields for e in events] == [{"state": "OPEN", "timeout_ms": "7"}]
    # a failing batch refuses only itself: the ones before and after it are applied
    with pytest.raises(BadVersion):
        store.batches([[Delete("/txn/{2}")], [Put("/txn/{1}", {"state": "ABORTED", "timeout_ms": "1"}, v1)],
                       [Put("/txn/{3}", {"state": "OPEN", "timeout_ms": "9"})]])
    assert store.get("/txn/{2}") is None and store.get("/txn/{3}") is not None
    assert store.get("/txn/{1}").fields["state"] == "COMMITTED"  # type: ignore[union-attr]
    assert store.batches([]) == [] and len(store.batches([[Delete("/txn/{3}")]])) == 1
    settle(other)
    assert [e.kind for e in events] == [ChangeKind.PUT, ChangeKind.DELETE]
    # counted as the same batches one by one (only round trips may differ)
    s0 = store.stats()
    store.batches([[Put("/y/1", {"n": "1"})], [Put("/y/2", {"n": "2"})], [Delete("/y/0")]])
    s1 = store.stats()
    store.batch([Put("/y/3", {"n": "3"})])
    store.batch([Put("/y/4", {"n": "4"})])
    store.batch([Delete("/y/5")])
    s2 = store.stats()
    assert {k: s1[k] - s0[k] for k in s0 if k != "round_trips"} == {k: s2[k] - s1[k] for k in s0 if k != "round_trips"}
    assert s1["batches"] > s0["batches"]
    store._check()


def test_batch_then_query_reads_what_the_batch_left_and_a_refused_batch_lists_nothing(store: MetadataStore) -> None:
    """END_TXN's CAS and the scan chained to it (``batch_then_query_records``): the query sees
    the batch's writes; a refused batch raises and changes nothing; counted as the two calls
    (one round trip fewer where the store pipelines them)."""
    v1 = txn(store, "1")
    first = store.put_sequential("/txn-op/{1}/", {"kind": "write", "segment": "s", "txn": "1"})
    other = store.put_sequential("/txn-op/{1}/", {"kind": "write", "segment": "t", "txn": "1"})
    s0 = store.stats()
    results, recs = store.batch_then_query_records(
        [Put("/txn/{1}", {"state": "COMMITTED", "timeout_ms": "100", "finalized_ms": "3"}, v1),
         PutSequential("/txn-op/{1}/", {"kind": "write", "segment": "s", "txn": "1"}), Delete(other.key)],
        WRITES.name, prefix=("s",))
    s1 = store.stats()
    assert results[0].version is not None and results[0].version > v1 and results[2].version is not None
    assert [r.key for r in recs] == [first.key, results[1].key]  # the batch's own write is listed
    assert recs[0].fields == first.fields
    with pytest.raises(BadVersion):  # stale: nothing applied, nothing listed
        store.batch_then_query_records([Put("/txn/{1}", {"state": "ABORTED", "timeout_ms": "1"}, v1),
                                        Delete(first.key)], WRITES.name, prefix=("s",))
    assert store.get("/txn/{1}").fields["state"] == "COMMITTED"  # type: ignore[union-attr]
    assert store.get(first.key) is not None
    # counted as one batch and one query; on Redis one round trip (a pipeline), not two
    assert (s1["batches"] - s0["batches"], s1["index_queries"] - s0["index_queries"]) == (1, 1)
    if factory_kind(store) == "redis":
        assert s1["round_trips"] - s0["round_trips"] == 1
    store._check()


def factory_kind(store: MetadataStore) -> str:
    """``redis`` for a native Redis handle (no emulation or degradation wrapped around it)."""
    from metadata_v5.store.redis import RedisMetadataStore

    return "redis" if isinstance(store, RedisMetadataStore) else "other"


def test_sequential_keys(store: MetadataStore) -> None:
    a = [store.put_sequential("/txn-op/{7}/", {"kind": "ack"}).key for _ in range(12)]
    b = store.put_sequential("/txn-op/{8}/", {"kind": "ack"}).key
    assert a == sorted(a) and len(set(a)) == 12
    assert a[0] == sequential_key("/txn-op/{7}/", 1) and a[-1] == sequential_key("/txn-op/{7}/", 12)
    assert b == sequential_key("/txn-op/{8}/", 1)
    store.delete(a[-1])
    assert store.put_sequential("/txn-op/{7}/", {}).key == sequential_key("/txn-op/{7}/", 13)  # never reused
    assert store.list_keys("/txn-op/{7}/") == a[:-1] + [sequential_key("/txn-op/{7}/", 13)]
    assert store.list_keys("/txn-op/{7}/", limit=2) == a[:2]
    assert [store.count(p) for p in ("/txn-op/{7}/", "/txn-op/", "/txn-op/{9}/", "")] == [
        12, 13, 0, len(store.list_keys(""))]
    store.batch([Delete(k) for k in store.list_keys("/txn-op/{7}/")] + [DeleteSequence("/txn-op/{7}/")])
    assert store.list("/txn-op/{7}/") == []
    assert store.put_sequential("/txn-op/{7}/", {}).key == sequential_key("/txn-op/{7}/", 1)
    assert store.stats()["seq_allocs"] == 15
    store._check()


def test_a_sequence_forgotten_between_two_of_its_keys_in_one_batch_assigns_neither_again(store: MetadataStore) -> None:
    """A PutSequential after a DeleteSequence of its prefix in the same batch continues after the
    key the batch assigned before the forgetting, which stays (found by the lockstep machine below:
    it was assigned again, and the counter left behind it)."""
    p = "/txn-op/{5}/"
    first = store.put_sequential(p, {"kind": "a"}).key
    store.delete(first)
    got = store.batch([PutSequential(p, {"kind": "b"}), DeleteSequence(p), PutSequential(p, {"kind": "c"})])
    keys = [got[0].key, got[2].key]
    assert keys == [sequential_key(p, 2), sequential_key(p, 3)]
    after = store.put_sequential(p, {"kind": "d"}).key
    assert after == sequential_key(p, 4) and store.list_keys(p) == keys + [after]
    store._check()


def test_partition_keys(store: MetadataStore) -> None:
    assert partition_key("/txn/{42}") == "42" and partition_key("/txn-op/{42}/0001") == "42"
    assert partition_key("/plain") is None and partition_key("/a/{}/b") is None
    store.batch([Put("/txn/{1}", {"state": "x"}), PutSequential("/txn-op/{1}/", {"kind": "x"})])
    assert store.stats()["multi_partition_batches"] == 0
    store.batch([Put("/txn/{1}", {"state": "y"}), Put("/txn/{2}", {"state": "y"})])
    assert store.stats()["multi_partition_batches"] == 1
    assert store.get("/txn/{1}").partition_key == "1"  # type: ignore[union-attr]


# --- indexes ----------------------------------------------------------------------------------


def test_numeric_index_bounds_order_limit(store: MetadataStore) -> None:
    for t, timeout in [("a", 30), ("b", 10), ("c", 20), ("d", 20), ("e", -5)]:
        txn(store, t, timeout=timeout)
    txn(store, "f", state="COMMITTED", timeout=15, final=1)  # not OPEN: not in the deadline index
    keys = lambda es: [(e.sort_key, e.key) for e in es]  # noqa: E731
    all_ = [(-5, "/txn/{e}"), (10, "/txn/{b}"), (20, "/txn/{c}"), (20, "/txn/{d}"), (30, "/txn/{a}")]
    q = store.query
    assert keys(q(DEADLINE.name)) == all_
    assert keys(q(DEADLINE.name, 10, 20)) == all_[1:4]  # inclusive both ends by default
    assert keys(q(DEADLINE.name, 10, 20, inclusive=(False, True))) == all_[2:4]
    assert keys(q(DEADLINE.name, 10, 20, inclusive=(True, False))) == all_[1:2]
    assert keys(q(DEADLINE.name, 10, 20, inclusive=(False, False))) == []
    assert keys(q(DEADLINE.name, maximum=20)) == all_[:4]
    assert keys(q(DEADLINE.name, minimum=21)) == all_[4:]
    assert keys(q(DEADLINE.name, 25, 15)) == []
    assert keys(q(DEADLINE.name, reverse=True)) == all_[::-1]
    assert keys(q(DEADLINE.name, maximum=20, limit=2)) == all_[:2]
    assert keys(q(DEADLINE.name, maximum=20, limit=2, reverse=True)) == [all_[3], all_[2]]
    assert [r.key for r in store.query_records(DEADLINE.name, 20, 20)] == ["/txn/{c}", "/txn/{d}"]
    # moving an entry: re-put with another deadline, then leave the index by state
    v = store.get("/txn/{a}").version  # type: ignore[union-attr]
    v = txn(store, "a", timeout=0, expected=v)
    assert keys(q(DEADLINE.name, maximum=0)) == [(-5, "/txn/{e}"), (0, "/txn/{a}")]
    txn(store, "a", state="ABORTED", timeout=0, final=7, expected=v)
    assert [e.key for e in q(DEADLINE.name)] == ["/txn/{e}", "/txn/{b}", "/txn/{c}", "/txn/{d}"]
    assert q(FINAL.name, prefix=("ABORTED",)) == [IndexEntry(FINAL.name, ("ABORTED", 7), "/txn/{a}")]
    store._check()


def test_lexicographic_composite_index(store: MetadataStore) -> None:
    rows = [("seg1", "subA", "t1"), ("seg1", "subA", "t2"), ("seg1", "subB", "t1"), ("seg10", "subA", "t3"),
            ("seg2", "", "t4"), ("seg1", "subA", "t2")]
    for seg, sub, t in rows:
        store.put_sequential(f"/txn-op/{{{t}}}/", {"kind": "ack", "segment": seg, "subscription": sub, "txn": t,
                                                   "position": "1:2"})
    store.put_sequential("/txn-op/{t1}/", {"kind": "write", "segment": "seg1", "txn": "t1"})
    sk = lambda es: [e.sort_key for e in es]  # noqa: E731
    assert sk(store.query(ACKS.name, prefix=("seg1", "subA"))) == [("seg1", "subA", "t1"), ("seg1", "subA", "t2"),
                                                                  ("seg1", "subA", "t2")]
    assert sk(store.query(ACKS.name, prefix=("seg1",))) == [("seg1", "subA", "t1"), ("seg1", "subA", "t2"),
                                                           ("seg1", "subA", "t2"), ("seg1", "subB", "t1")]
    assert sk(store.query(ACKS.name, prefix=("seg2", ""))) == [("seg2", "", "t4")]
    # bounds are (partial) tuples ordered as Python orders tuples
    assert sk(store.query(ACKS.name, ("seg1", "subB"), ("seg10",))) == [("seg1", "subB", "t1")]
    # an extension sorts after its prefix, so an exclusive ("seg1", "subB") still admits its entries
    assert sk(store.query(ACKS.name, ("seg1", "subB"), ("seg10",), inclusive=(False, True))) == [("seg1", "subB", "t1")]
    assert sk(store.query(ACKS.name, ("seg1", "subB", "t1"), ("seg10",), inclusive=(False, True))) == []
    assert sk(store.query(ACKS.name, ("seg10",), ("seg2",), inclusive=(True, False))) == [("seg10", "subA", "t3")]
    assert sk(store.query(ACKS.name, ("seg10",), inclusive=(False, True))) == [("seg10", "subA", "t3"), ("seg2", "", "t4")]
    assert sk(store.query(ACKS.name, ("seg10", "subA", "t3"), inclusive=(False, True))) == [("seg2", "", "t4")]
    assert sk(store.query(ACKS.name, maximum=("seg1", "subA", "t1"))) == [("seg1", "subA", "t1")]
    assert sk(store.query(ACKS.name, maximum=("seg1", "subA", "t1"), inclusive=(True, False))) == []
    assert sk(store.query(ACKS.name, prefix=("seg1", "subA"), reverse=True, limit=1)) == [("seg1", "subA", "t2")]
    recs = store.query_records(WRITES.name, prefix=("seg1",))
    assert [dict(r.fields)["kind"] for r in recs] == ["write"]
    assert len(store.query(ACKS.name)) == 6
    store._check()


def test_int_components_sort_numerically(store: MetadataStore) -> None:
    for t, final in [("a", 100), ("b", 9), ("c", -3), ("d", 2**40)]:
        txn(store, t, state="COMMITTED", final=final)
    txn(store, "e", state="ABORTED", final=1)
    es = store.query(FINAL.name, prefix=("COMMITTED",))
    assert [e.sort_key for e in es] == [("COMMITTED", -3), ("COMMITTED", 9), ("COMMITTED", 100), ("COMMITTED", 2**40)]
    assert [e.key for e in store.query(FINAL.name, ("COMMITTED", 0), ("COMMITTED", 100))] == ["/txn/{b}", "/txn/{a}"]
    assert [e.key for e in store.query(FINAL.name, maximum=("ABORTED", 1))] == ["/txn/{e}"]


def test_define_index_rules(factory: Factory) -> None:
    store = factory.open()
    store.define_index(DEADLINE)
    store.define_index(DEADLINE)  # idempotent
    with pytest.raises(ConfigError):
        store.define_index(IndexSpec(DEADLINE.name, "/txn/", ("other",), numeric=True))
    store.put("/later/x", {"f": "1"})
    with pytest.raises(ConfigError):
        store.define_index(IndexSpec("late", "/later/", ("f",)))
    with pytest.raises(MetadataError):
        store.query("no-such-index")
    other = factory.open()
    assert other.indexes() == {DEADLINE.name: DEADLINE}  # the schema is durable
    other.put("/txn/{1}", {"state": "OPEN", "timeout_ms": "5"})
    assert [e.key for e in store.query(DEADLINE.name)] == ["/txn/{1}"]


# --- watches ----------------------------------------------------------------------------------


def test_point_watch_snapshot_order_cancel(factory: Factory) -> None:
    a, b = factory.open(), factory.open()
    first = b.put("/txn/{1}", {"state": "OPEN"})
    events: list[WatchEvent] = []
    w = a.watch("/txn/{1}", events.append)
    assert w.initial == first
    r2 = b.put("/txn/{1}", {"state": "COMMITTED"}, first.version)
    b.delete("/txn/{1}")
    r4 = b.put("/txn/{1}", {"state": "OPEN"})
    b.put("/other", {})
    assert events == []  # nothing is delivered until the owner polls (or its notifier runs it)
    assert a.poll_watches() == 3
    assert [(e.key, e.kind, e.version, e.fields and dict(e.fields)) for e in events] == [
        ("/txn/{1}", ChangeKind.PUT, r2.version, {"state": "COMMITTED"}),
        ("/txn/{1}", ChangeKind.DELETE, r2.version + 1, None),
        ("/txn/{1}", ChangeKind.PUT, r4.version, {"state": "OPEN"})]
    w.cancel()
    b.delete("/txn/{1}")
    assert a.poll_watches() == 0 and len(events) == 3
    assert a.stats()["watch_events"] == 3


def test_watch_dies_with_its_handle(factory: Factory) -> None:
    a, b = factory.open(), factory.open()
    events: list[WatchEvent] = []
    a.watch("/k", events.append)
    b.put("/k", {})
    a.close()
    b.put("/k", {"x": "1"})
    b.poll_watches()
    assert events == []
    with pytest.raises(MetadataError):
        a.get("/k")
    c = a.reopen()  # the data survives the handle
    assert dict(c.get("/k").fields) == {"x": "1"}  # type: ignore[union-attr]


def test_notifier_hands_over_closures(factory: Factory) -> None:
    a, b = factory.open(), factory.open()
    handed: list[Callable[[], None]] = []
    events: list[WatchEvent] = []
    a.watch("/k", events.append)
    b.put("/k", {"n": "1"})
    a.set_notifier(handed.append)
    b.put("/k", {"n": "2"})
    b.delete("/k")
    a.poll_watches()  # Redis learns of changes here; in-process stores already handed them over
    assert len(handed) == 3 and events == []
    for deliver in handed:
        deliver()
    assert [e.fields and e.fields["n"] for e in events] == ["1", "2", None]
    w2 = a.watch("/k", events.append)
    b.put("/k", {"n": "3"})
    a.poll_watches()
    w2.cancel()
    handed[-1]()  # cancelled before delivery: a no-op
    assert len(events) == 3
    a.set_notifier(None)
    b.put("/k", {"n": "4"})
    assert a.poll_watches() == 1


def test_range_watch(factory: Factory) -> None:
    a, b = factory.open(), factory.open()
    for spec in SPECS:
        a.define_index(spec)
    txn(b, "1", timeout=10)
    events: list[WatchEvent] = []
    w = a.watch_range(DEADLINE.name, events.append, maximum=50)
    assert w.initial == [IndexEntry(DEADLINE.name, 10, "/txn/{1}")]
    v2 = txn(b, "2", timeout=20)
    txn(b, "3", timeout=99)  # out of range
    v1 = txn(b, "1", timeout=60, expected=b.get("/txn/{1}").version)  # type: ignore[union-attr] # leaves the range
    b.put("/txn/{2}", {"state": "COMMITTED", "timeout_ms": "20", "finalized_ms": "1"}, v2)  # leaves the index
    txn(b, "4", timeout=5)
    settle(a)
    got = [(e.kind, e.key, e.sort_key) for e in events]
    if a.capabilities.range_watch_events:
        assert got == [(ChangeKind.PUT, "/txn/{2}", 20), (ChangeKind.DELETE, "/txn/{1}", 10),
                       (ChangeKind.DELETE, "/txn/{2}", 20), (ChangeKind.PUT, "/txn/{4}", 5)]
        assert all(e.version is not None for e in events)
    else:  # net effect since the snapshot, learnt at relist(): /txn/{2} came and went unseen
        assert got == [(ChangeKind.DELETE, "/txn/{1}", 10), (ChangeKind.PUT, "/txn/{4}", 5)]
    assert events[-1].fields is not None and events[-1].fields["timeout_ms"] == "5"
    del v1
    events.clear()
    # a prefix range watch on a composite index (the PendingAckStore's view)
    w2 = a.watch_range(ACKS.name, events.append, prefix=("seg", "sub"))
    op = b.put_sequential("/txn-op/{5}/", {"kind": "ack", "segment": "seg", "subscription": "sub", "txn": "5"})
    b.put_sequential("/txn-op/{5}/", {"kind": "ack", "segment": "seg", "subscription": "zzz", "txn": "5"})
    settle(a)
    assert [(e.kind, e.key) for e in events] == [(ChangeKind.PUT, op.key)]
    b.delete(op.key)
    settle(a)
    assert [(e.kind, e.key) for e in events] == [(ChangeKind.PUT, op.key), (ChangeKind.DELETE, op.key)]
    w.cancel()
    w2.cancel()
    txn(b, "6", timeout=1)
    settle(a)
    assert len(events) == 2
    a._check()


def test_watch_events_across_many_writes_in_order(factory: Factory) -> None:
    a, b = factory.open(), factory.open()
    events: list[WatchEvent] = []
    a.watch("/hot", events.append)
    versions = [b.put("/hot", {"i": str(i)}).version for i in range(50)]
    settle(a)
    assert [e.version for e in events] == versions
    assert [e.fields["i"] for e in events if e.fields] == [str(i) for i in range(50)]


def test_stats_names(store: MetadataStore) -> None:
    before = store.stats()["round_trips"]
    store.get("/x")
    assert set(store.stats()) >= set(STAT_KEYS)
    assert all(isinstance(v, int) for v in store.stats().values())
    # a get is one round trip to a remote store, none in process
    assert store.stats()["round_trips"] - before == (0 if store.capabilities.in_process else 1)


def test_degraded_costs_extra_records(factory: Factory) -> None:
    store = factory.open()
    store.define_index(DEADLINE)
    before = store.stats()
    txn(store, "1", timeout=5)
    after = store.stats()
    if isinstance(store, DegradedMetadataStore):
        assert after["index_record_writes"] == 1 and after["writes"] - before["writes"] == 2
    else:  # native, or emulated (no index records: its queries scan instead)
        assert after["writes"] - before["writes"] == 1 and after["index_record_writes"] == 0
    assert after["index_writes"] - before["index_writes"] == 1


def test_emulated_scan_reads_every_child_and_sequences_use_a_counter(factory: Factory) -> None:
    """Pulsar's AbstractMetadataStore fallback: a query lists the index's prefix and GETs every
    child, in range or not; a sequential put is a counter GET + CAS plus the create."""
    store = factory.open()
    if not isinstance(store, EmulatedMetadataStore):
        pytest.skip("emulated stores only")
    store.define_indexes([DEADLINE, WRITES])
    for t, state in (("1", "OPEN"), ("2", "COMMITTED"), ("3", "OPEN")):
        txn(store, t, state=state, timeout=int(t))
    before = store.stats()
    assert [e.key for e in store.query(DEADLINE.name, maximum=1)] == ["/txn/{1}"]
    after = store.stats()
    # three serial GETs, counted apart: Pulsar's get metric does not see storeGet
    assert after["scan_reads"] - before["scan_reads"] == 3 and after["reads"] == before["reads"]
    assert after["lists"] - before["lists"] == 1
    store.put_sequential("/txn-op/{1}/", {"kind": "ack"})  # first of its prefix: no counter yet
    before = store.stats()
    store.put_sequential("/txn-op/{1}/", {"kind": "ack"})
    after = store.stats()
    assert after["reads"] - before["reads"] == 1  # the counter's GET
    assert after["writes"] - before["writes"] == 2 and after["cas_ok"] - before["cas_ok"] == 1  # CAS + create
    # the counters stay when their records go, and a listing of the prefix iterates them
    store.batch([Delete(k) for k in store.list_keys("/txn-op/{1}/")])
    store.put_sequential("/txn-op/{2}/", {"kind": "write", "segment": "s", "txn": "2"})
    before = store.stats()
    assert [e.key for e in store.query(WRITES.name, prefix=("s",))] == [sequential_key("/txn-op/{2}/", 1)]
    after = store.stats()
    assert after["scan_keys"] - before["scan_keys"] == 3  # the record and two counters
    assert after["scan_reads"] - before["scan_reads"] == 1  # the counters are not fetched


# --- Redis specifics --------------------------------------------------------------------------


@pytest.mark.redis
def test_unreachable_redis_names_the_url() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    url = f"redis://127.0.0.1:{port}"
    with pytest.raises(BackendUnavailable, match=f"redis at {url}"):
        open_metadata(url)


def test_bad_urls() -> None:
    with pytest.raises(ConfigError):
        open_metadata("zookeeper://x:2181")
    with pytest.raises(ConfigError):
        open_metadata("memory://?degraded=maybe")
    assert isinstance(open_metadata("memory://?degraded=1"), DegradedMetadataStore)
    assert isinstance(open_metadata("memory://"), MemoryMetadataStore)


@pytest.mark.redis
@pytest.mark.parametrize("degraded", [False, True], ids=["redis", "redis-degraded"])
def test_redis_watch_survives_reconnect(redis_url: str, degraded: bool) -> None:
    f = Factory("redis-degraded" if degraded else "redis", redis_url)
    try:
        a, b = f.open(), f.open()
        a.define_index(DEADLINE)
        events: list[WatchEvent] = []
        ranges: list[WatchEvent] = []
        a.watch("/txn/{1}", events.append)
        a.watch_range(DEADLINE.name, ranges.append)
        txn(b, "1", timeout=1)
        settle(a)
        inner: Any = a.inner if degraded else a  # type: ignore[attr-defined]
        inner._drop_connections()  # the client's pool is gone ...
        versions = [txn(b, "1", timeout=i + 2) for i in range(20)]  # ... while another client writes
        b.delete("/txn/{1}")
        settle(a)  # reconnects and resumes the change stream after the last entry it saw
        assert [e.version for e in events] == [versions[0] - 1] + versions + [versions[-1] + 1]
        assert events[-1].kind == ChangeKind.DELETE
        if not degraded:
            assert [e.sort_key for e in ranges if e.kind == ChangeKind.PUT] == [1] + [i + 2 for i in range(20)]
        else:
            assert ranges[-1].kind == ChangeKind.DELETE
    finally:
        f.close()


@pytest.mark.redis
def test_redis_server_side_disconnect(redis_url: str, tmp_path: Path) -> None:
    import redis as redislib

    # a server of its own: the kill below drops every other client, and the suite's server has
    # the other test worker's connections on it
    d = tmp_path / "redis"
    redis_url = subprocess.run([ROOT / "scripts" / "redis.sh", "start", d], check=True, capture_output=True,
                               text=True).stdout.strip()
    f = Factory("redis", redis_url)
    try:
        a, b = f.open(), f.open()
        events: list[WatchEvent] = []
        a.watch("/k", events.append)
        b.put("/k", {"n": "1"})
        a.poll_watches()
        admin = redislib.Redis.from_url(redis_url, decode_responses=True)
        admin.client_kill_filter(_id=None, skipme=True, _type="normal")  # every other client's connection
        admin.close()
        b.put("/k", {"n": "2"})  # b reconnects on its next call (pool) — a write is not retried,
        a.get("/k")              # but a fresh pool connection is used after the kill
        b.put("/k", {"n": "3"})
        a.poll_watches()
        assert [e.fields["n"] for e in events if e.fields] == ["1", "2", "3"]
    except BackendUnavailable:
        pytest.fail("a killed connection must be replaced transparently for reads")
    finally:
        f.close()
        subprocess.run([ROOT / "scripts" / "redis.sh", "stop", d], check=True, capture_output=True)


@pytest.mark.redis
def test_redis_round_trips_per_operation(redis_url: str) -> None:
    f = Factory("redis", redis_url)
    try:
        s = f.open()
        for spec in SPECS:
            s.define_index(spec)
        counts: dict[str, int] = {}

        def rt(name: str, fn: Callable[[], Any]) -> Any:
            before = s.stats()["round_trips"]
            out = fn()
            counts[name] = s.stats()["round_trips"] - before
            return out

        v = rt("create header", lambda: txn(s, "1", timeout=5))
        rt("get", lambda: s.get("/txn/{1}"))
        rt("put_sequential op record (+index)", lambda: s.put_sequential(
            "/txn-op/{1}/", {"kind": "write", "segment": "s", "txn": "1"}))
        rt("end-txn CAS (+2 indexes)", lambda: txn(s, "1", state="COMMITTED", final=9, expected=v))
        rt("query", lambda: s.query(DEADLINE.name, maximum=10))
        rt("query_records", lambda: s.query_records(WRITES.name, prefix=("s",)))
        rt("list", lambda: s.list("/txn-op/{1}/"))
        rt("watch", lambda: s.watch("/txn/{1}", lambda e: None))
        rt("watch_range", lambda: s.watch_range(WRITES.name, lambda e: None, prefix=("s",)))
        rt("poll_watches", s.poll_watches)
        rt("gc batch", lambda: s.batch([Delete(k) for k in s.list_keys("/txn-op/{1}/")]
                                       + [Delete("/txn/{1}"), DeleteSequence("/txn-op/{1}/")]))
        rt("4 batches issued at once", lambda: s.batches([[Delete(f"/x/{i}")] for i in range(4)]))
        assert all(n == 1 for name, n in counts.items() if name != "gc batch"), counts
        assert counts["gc batch"] == 2  # the list, then one batch
        assert s.stats()["batches"] == 4 + 4  # header, op record, CAS, gc; then one pipeline, each batch counted
    finally:
        f.close()


@pytest.mark.redis
def test_redis_pipelined_batches_the_server_refused_unapplied_go_again(redis_url: str) -> None:
    """A pipeline whose scripts the server flushed, or whose index schema another handle moved,
    is refused unapplied: each batch goes again on its own and lands once, indexed."""
    import redis as redislib

    f = Factory("redis", redis_url)
    try:
        a, b = f.open(), f.open()
        a.define_index(DEADLINE)
        redislib.Redis.from_url(redis_url).script_flush()
        res = a.batches([[Put("/txn/{1}", {"state": "OPEN", "timeout_ms": "5"})],
                         [Put("/txn/{2}", {"state": "OPEN", "timeout_ms": "6"})]])
        assert [e.key for e in b.query(DEADLINE.name)] == ["/txn/{1}", "/txn/{2}"] and res[0][0].version
        late = IndexSpec("late", "/later/", ("f",))
        b.define_index(late)  # a's schema is now behind: its scripts refuse to write
        before = a.stats()["batches"]
        a.batches([[Put("/later/x", {"f": "2"})], [Put("/later/y", {"f": "1"})]])
        assert a.stats()["batches"] - before == 2
        assert [e.key for e in b.query(late.name)] == ["/later/y", "/later/x"]  # indexed: a learnt the schema
        a._check()
    finally:
        f.close()


@pytest.mark.redis
def test_redis_write_reply_carries_the_change_stream(redis_url: str) -> None:
    """A watching handle's write brings back the change stream after its cursor: the poll right
    after it costs no round trip and still delivers the other handle's earlier change too; the
    next poll (nothing written since) reads the stream again and sees later changes."""
    f = Factory("redis", redis_url)
    try:
        a, b = f.open(), f.open()
        events: list[WatchEvent] = []
        a.watch("/k", events.append)
        b.put("/k", {"n": "1"})       # not written by a: only the stream tells a
        a.put("/other", {"n": "x"})   # a's write: its reply carries both stream entries
        before = a.stats()["round_trips"]
        a.poll_watches()
        assert a.stats()["round_trips"] == before
        assert [e.fields["n"] for e in events if e.fields] == ["1"]
        b.put("/k", {"n": "2"})
        a.poll_watches()              # nothing written by a since: a real read
        assert a.stats()["round_trips"] == before + 1
        assert [e.fields["n"] for e in events if e.fields] == ["1", "2"]
    finally:
        f.close()


@pytest.mark.redis
def test_redis_watch_right_after_get_reuses_its_read(redis_url: str) -> None:
    """get then watch of the same key, nothing in between: one round trip, and the watch still
    sees every later change, including one another handle made between the two calls."""
    f = Factory("redis", redis_url)
    try:
        a, b = f.open(), f.open()
        b.put("/k", {"n": "1"})
        before = a.stats()["round_trips"]
        rec = a.get("/k")
        b.put("/k", {"n": "2"})  # after a's read, before its watch
        events: list[WatchEvent] = []
        w = a.watch("/k", events.append)
        assert a.stats()["round_trips"] == before + 1
        assert rec is not None and rec.fields == {"n": "1"}
        b.put("/k", {"n": "3"})
        a.poll_watches()
        assert [e.fields["n"] for e in events if e.fields] == ["2", "3"]
        w.cancel()
        a.get("/k")
        a.get("/other")  # the last read is of another key: the watch reads for itself
        a.watch("/k", lambda e: None)
        assert a.stats()["round_trips"] == before + 5  # + the poll, 2 gets, the watch
    finally:
        f.close()


@pytest.mark.redis
def test_redis_stream_gap_is_detected(redis_url: str) -> None:
    f = Factory("redis", redis_url)
    f.url += "&stream_maxlen=1"
    try:
        a, b = f.open(), f.open()
        a.watch("/k", lambda e: None)
        for i in range(300):  # MAXLEN ~ trims whole nodes (100 entries): the reader falls behind
            b.put("/k", {"i": str(i)})
        with pytest.raises(MetadataError, match="lost events"):
            a.poll_watches()
    finally:
        f.close()


# --- lockstep differential test ---------------------------------------------------------------

KEYS = ["/txn/{1}", "/txn/{2}", "/txn/{3}", "/x/a", "/x/b"]
FIELDS = st.fixed_dictionaries(
    {"state": st.sampled_from(["OPEN", "COMMITTED", "ABORTED"]), "timeout_ms": st.integers(-3, 3).map(str)},
    optional={"finalized_ms": st.integers(-2, 2).map(str)})
SEQ_FIELDS = st.fixed_dictionaries({"kind": st.sampled_from(["write", "ack"]), "segment": st.sampled_from(["s1", "s2"]),
                                    "subscription": st.sampled_from(["", "a"]), "txn": st.sampled_from(["1", "2"])})
PREFIXES = ["/txn-op/{1}/", "/txn-op/{2}/"]


def _norm(obj: Any, off: int) -> Any:
    """Versions relative to a store's revision at the start (degraded stores spend revisions on
    their schema records)."""
    if isinstance(obj, Record):
        return Record(obj.key, dict(obj.fields), obj.version - off)
    if isinstance(obj, OpResult):
        return OpResult(obj.key, None if obj.version is None else obj.version - off)
    if isinstance(obj, list):
        return [_norm(x, off) for x in obj]
    return obj


class Lockstep(RuleBasedStateMachine):
    """Every store gets the same calls; results, errors, versions and watch events must agree with
    the in-memory model ``stores[0]`` (range-watch events only where the backend has native range
    watches). Versions are compared relative to each store's revision at the start."""

    stores: list[MetadataStore] = []

    @initialize()
    def setup(self) -> None:
        self.events: list[list[tuple[Any, ...]]] = [[] for _ in self.stores]
        self.offsets: list[int] = []
        for i, s in enumerate(self.stores):
            for spec in SPECS:
                s.define_index(spec)
            self.offsets.append(s.put("/x/init", {}).version - 1)
            off = self.offsets[i]
            s.watch("/txn/{1}", lambda e, i=i, off=off: self.events[i].append(
                ("point", e.kind, e.key, e.version - off)))
            if s.capabilities.range_watch_events:
                s.watch_range(DEADLINE.name, lambda e, i=i, off=off: self.events[i].append(
                    ("range", e.kind, e.key, None if e.version is None else e.version - off, e.sort_key)), -1, 2)

    def all(self, fn: Callable[[MetadataStore, Callable[[int | None], int | None]], Any]) -> Any:
        outs = []
        for s, off in zip(self.stores, self.offsets):
            def denorm(v: int | None, off: int = off) -> int | None:
                return v + off if v else v
            try:
                outs.append(("ok", _norm(fn(s, denorm), off)))
            except (BadVersion, NoSuchKey, ValueError) as e:
                outs.append(("err", type(e).__name__))
        for o in outs[1:]:
            assert o == outs[0], (outs[0], o)
        return outs[0]

    def version(self, key: str, delta: int) -> int:
        """A version for ``key`` relative to the model (0 = absent)."""
        rec = self.stores[0].get(key)
        return max(0, (rec.version - self.offsets[0] if rec else 0) + delta)

    @rule(key=st.sampled_from(KEYS), fields=FIELDS, cas=st.sampled_from([None, "right", "wrong", "absent"]))
    def put(self, key: str, fields: dict[str, str], cas: str | None) -> None:
        expected = {None: None, "right": self.version(key, 0), "wrong": self.version(key, 1), "absent": ABSENT}[cas]
        self.all(lambda s, d: s.put(key, fields, d(expected)))

    @rule(key=st.sampled_from(KEYS), cas=st.booleans())
    def delete(self, key: str, cas: bool) -> None:
        expected = self.version(key, 0) if cas else None
        self.all(lambda s, d: s.delete(key, d(expected)))

    @rule(prefix=st.sampled_from(PREFIXES), fields=SEQ_FIELDS)
    def put_sequential(self, prefix: str, fields: dict[str, str]) -> None:
        self.all(lambda s, d: s.put_sequential(prefix, fields))

    @rule(data=st.data())
    def batch(self, data: st.DataObject) -> None:
        ops: list[Any] = []  # (kind, key or prefix, fields, expected)
        used: set[str] = set()
        for _ in range(data.draw(st.integers(1, 4))):
            kind = data.draw(st.sampled_from(["put", "delete", "check", "seq", "dseq", "op-delete"]))
            if kind == "op-delete":
                keys = self.stores[0].list_keys("/txn-op/")
                if keys:
                    key = data.draw(st.sampled_from(keys))
                    if key not in used:
                        used.add(key)
                        ops.append(("delete", key, None, None))
                continue
            if kind in ("seq", "dseq"):
                prefix = data.draw(st.sampled_from(PREFIXES))
                ops.append((kind, prefix, data.draw(SEQ_FIELDS) if kind == "seq" else None, None))
                continue
            key = data.draw(st.sampled_from(KEYS))
            expected = data.draw(st.sampled_from([None, self.version(key, 0), self.version(key, 1)]))
            if kind == "check":
                ops.append(("check", key, None, expected or 0))
            elif key not in used:
                used.add(key)
                ops.append((kind, key, data.draw(FIELDS) if kind == "put" else None, expected))

        def build(d: Callable[[int | None], int | None]) -> list[Any]:
            out: list[Any] = []
            for kind, key, fields, expected in ops:
                if kind == "put":
                    out.append(Put(key, fields, d(expected)))
                elif kind == "delete":
                    out.append(Delete(key, d(expected)))
                elif kind == "check":
                    out.append(Check(key, d(expected) or 0))
                elif kind == "seq":
                    out.append(PutSequential(key, fields))
                else:
                    out.append(DeleteSequence(key))
            return out

        self.all(lambda s, d: s.batch(build(d)))

    @rule(lo=st.none() | st.integers(-4, 4), hi=st.none() | st.integers(-4, 4), inc=st.tuples(st.booleans(), st.booleans()),
          limit=st.none() | st.integers(0, 3), reverse=st.booleans())
    def query_deadline(self, lo: int | None, hi: int | None, inc: tuple[bool, bool], limit: int | None,
                       reverse: bool) -> None:
        self.all(lambda s, d: s.query(DEADLINE.name, lo, hi, inclusive=inc, limit=limit, reverse=reverse))

    @rule(state=st.sampled_from(["COMMITTED", "ABORTED"]), hi=st.integers(-3, 3))
    def query_final(self, state: str, hi: int) -> None:
        self.all(lambda s, d: s.query(FINAL.name, (state,), (state, hi)))

    @rule(prefix=st.sampled_from([(), ("s1",), ("s1", ""), ("s2", "a"), ("s2", "a", "2")]))
    def query_acks(self, prefix: tuple[str, ...]) -> None:
        self.all(lambda s, d: s.query_records(ACKS.name, prefix=prefix))
        self.all(lambda s, d: s.query(WRITES.name, prefix=prefix[:1]))

    @rule(prefix=st.sampled_from(["/", "/txn", "/txn/", "/txn-op/{1}/", "/x/"]), limit=st.none() | st.integers(0, 3))
    def list_prefix(self, prefix: str, limit: int | None) -> None:
        self.all(lambda s, d: s.list(prefix, limit=limit))
        counted = self.all(lambda s, d: (s.count(prefix), s.count(prefix) - len(s.list_keys(prefix))))
        assert counted[0] == "err" or counted[1][1] == 0, counted

    @invariant()
    def consistent(self) -> None:
        if not getattr(self, "offsets", None):
            return
        for s in self.stores:
            s._check()
            settle(s)
        model = self.events[0]
        for s, got in zip(self.stores, self.events):
            want = model if s.capabilities.range_watch_events else [e for e in model if e[0] == "point"]
            assert got == want

    def teardown(self) -> None:
        for s in self.stores:
            s.close()


def test_lockstep_memory_vs_degraded_and_emulated() -> None:
    class Fresh(Lockstep):
        def __init__(self) -> None:
            Lockstep.stores = [MemoryMetadataStore.open(), DegradedMetadataStore(MemoryMetadataStore.open()),
                               EmulatedMetadataStore(MemoryMetadataStore.open())]
            super().__init__()

    run_state_machine_as_test(Fresh, settings=settings(max_examples=60, stateful_step_count=25, deadline=None,
                                                       suppress_health_check=[HealthCheck.too_slow]))


@pytest.mark.redis
def test_lockstep_memory_vs_redis(redis_url: str) -> None:
    factories: list[Factory] = []

    class Fresh(Lockstep):
        def __init__(self) -> None:
            fr, fd = Factory("redis", redis_url), Factory("redis-degraded", redis_url)
            factories.extend([fr, fd])
            Lockstep.stores = [MemoryMetadataStore.open(), fr.open(), fd.open()]
            super().__init__()

    try:
        run_state_machine_as_test(Fresh, settings=settings(max_examples=25, stateful_step_count=20, deadline=None,
                                                           suppress_health_check=[HealthCheck.too_slow]))
    finally:
        for f in factories:
            f.close()
