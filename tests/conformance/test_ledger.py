"""The ManagedLedger / LedgerFactory contract, written once and run against every ledger backend.

A backend registers a :class:`LedgerBackend` in ``BACKENDS``: how to get a factory, and how to get
another factory over the same durable data after a "crash" (every handle and client object
dropped). Where backends legitimately differ, tests ask the ledger's capability flags
(``rolls_over``, ``trims_whole_ledgers``), never its type. The memory backend runs with three
entries per ledger so that rollover and whole-ledger trimming are exercised on small data.
"""

from __future__ import annotations

import socket
import time
import uuid
from abc import ABC, abstractmethod
from typing import Callable, Iterator

import pytest

from engine.backends import open_ledgers
from engine.errors import BackendUnavailable, ConfigError, LedgerSealed
from engine.ids import Design, TxnID
from engine.ledger import CursorState, LedgerFactory, ManagedLedger
from engine.records import EARLIEST, EntryData, MarkerKind, Position

FAR = Position(1 << 62, 0)  # after every position of every ledger


class LedgerBackend(ABC):
    """A durable ledger store under test."""

    def __init__(self) -> None:
        self.opened: list[LedgerFactory] = []

    @abstractmethod
    def _new(self) -> LedgerFactory: ...

    def factory(self) -> LedgerFactory:
        f = self._new()
        self.opened.append(f)
        return f

    @abstractmethod
    def after_crash(self) -> LedgerFactory:
        """A factory that sees only what the store kept durably."""

    def close(self) -> None:
        for f in self.opened:
            f.close()


class MemoryBackend(LedgerBackend):
    """The memory factory *is* the durable layer; a crash drops only the handles."""

    def __init__(self) -> None:
        super().__init__()
        self._store: LedgerFactory | None = None

    def _new(self) -> LedgerFactory:
        self._store = open_ledgers("memory://?max_entries_per_ledger=3")
        return self._store

    def after_crash(self) -> LedgerFactory:
        assert self._store is not None
        return self._store


class KafkaBackend(LedgerBackend):
    """The broker is the durable layer; a crash drops the factory and its clients."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def _new(self) -> LedgerFactory:
        return open_ledgers(self.url)

    def after_crash(self) -> LedgerFactory:
        return self.factory()  # the old factory is left as it is, as a crashed broker's would be


BACKENDS: dict[str, tuple[Callable[[pytest.FixtureRequest], LedgerBackend], list[pytest.MarkDecorator]]] = {
    "memory": (lambda request: MemoryBackend(), []),
    "kafka": (lambda request: KafkaBackend(request.getfixturevalue("kafka_url")), [pytest.mark.kafka]),
}


@pytest.fixture(params=[pytest.param(name, marks=marks) for name, (_, marks) in BACKENDS.items()])
def backend(request: pytest.FixtureRequest) -> Iterator[LedgerBackend]:
    b = BACKENDS[request.param][0](request)
    yield b
    b.close()


@pytest.fixture
def factory(backend: LedgerBackend) -> LedgerFactory:
    return backend.factory()


@pytest.fixture
def prefix() -> str:
    """A ledger-name prefix of its own per test: Kafka keeps ledgers between tests."""
    return f"persistent://conformance/{uuid.uuid4().hex[:12]}/"


def _data(i: int) -> EntryData:
    return EntryData(size=i, publish_ts_us=i, msg=f"m{i}")


def _msgs(ml: ManagedLedger, start: Position = EARLIEST, end: Position = FAR, n: int = 1 << 30) -> list[str | None]:
    return [e.data.msg for e in ml.read(start, end, n)]


def _fill(ml: ManagedLedger, n: int) -> list[Position]:
    return [ml.append(_data(i)) for i in range(n)]


# --- appends, reads, positions ---------------------------------------------------------------------


def test_reads_are_ordered_with_inclusive_bounds_and_max_entries(factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    ps = _fill(ml, 7)
    assert ps == sorted(ps) and len(set(ps)) == 7
    assert _msgs(ml) == [f"m{i}" for i in range(7)]
    got = ml.read(ps[1], ps[5], 100)
    assert [e.position for e in got] == ps[1:6]
    assert [e.data.msg for e in got] == ["m1", "m2", "m3", "m4", "m5"]
    assert _msgs(ml, ps[1], ps[5], 2) == ["m1", "m2"]
    assert _msgs(ml, ps[3], ps[3]) == ["m3"]
    assert _msgs(ml, ps[5], ps[1]) == []
    assert _msgs(ml, ps[0], ps[6], 0) == []
    assert _msgs(ml, ml.next_position(ps[6]), FAR) == []  # past the end
    assert ml.entry_count() == 7


def test_positions_on_empty_and_growing_ledger(factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    assert ml.entry_count() == 0 and ml.read(EARLIEST, FAR, 10) == []
    empty_last = ml.last_confirmed()
    assert empty_last.entry_id == -1
    first = ml.append(_data(0))
    assert first == ml.first_position() == ml.next_position(empty_last)
    ps = [first] + [ml.append(_data(i)) for i in range(1, 7)]
    assert ml.last_confirmed() == ps[-1] and ml.first_position() == ps[0]
    walk = [ml.first_position()]
    while walk[-1] != ml.last_confirmed():
        walk.append(ml.next_position(walk[-1]))
    assert walk == ps
    expected_next = ml.next_position(ml.last_confirmed())
    assert ml.append(_data(7)) == expected_next
    # Within a ledger id, entry ids run 0, 1, 2...; ledger ids only grow.
    ps.append(expected_next)
    ids = [p.ledger_id for p in ps]
    assert ids == sorted(ids)
    for lid in set(ids):
        assert [p.entry_id for p in ps if p.ledger_id == lid] == list(range(ids.count(lid)))
    if not ml.rolls_over:
        assert len(set(ids)) == 1


def test_reopen_sees_every_acknowledged_append(backend: LedgerBackend, factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    ps = _fill(ml, 5)
    again = backend.after_crash().open(prefix + "l")
    assert again.last_confirmed() == ps[-1] and again.first_position() == ps[0]
    assert _msgs(again) == [f"m{i}" for i in range(5)]
    assert again.append(_data(5)) == again.next_position(ps[-1])


def test_entry_fields_round_trip(backend: LedgerBackend, factory: LedgerFactory, prefix: str) -> None:
    entries = [
        EntryData(size=0, publish_ts_us=0),
        EntryData(size=1024, publish_ts_us=123_456_789, msg="m1", key="user-7"),
        EntryData(size=10, publish_ts_us=5, msg="m2", txn=TxnID(Design.V4, 3, 2**40 + 1)),
        EntryData(size=0, publish_ts_us=6, txn=TxnID(Design.V5, 0, 9), marker=MarkerKind.COMMIT),
        EntryData(size=0, publish_ts_us=7, txn=TxnID(Design.V4, 1, 1), marker=MarkerKind.ABORT),
        EntryData(
            size=0,
            publish_ts_us=8,
            payload={"created": [{"range": [0, 32767], "id": 1}], "sealed": [], "note": "ünï", "x": None, "f": 1.5},
        ),
    ]
    ml = factory.open(prefix + "l")
    for d in entries:
        ml.append(d)
    assert [e.data for e in ml.read(EARLIEST, FAR, 100)] == entries
    assert [e.data for e in backend.after_crash().open(prefix + "l").read(EARLIEST, FAR, 100)] == entries
    assert ml.stats["appends"] == 6
    assert (ml.stats["appends.data"], ml.stats["appends.marker"], ml.stats["appends.system"]) == (3, 2, 1)


def test_stats_count_reads_and_entries(factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    _fill(ml, 4)
    ml.read(EARLIEST, FAR, 100)
    ml.read(EARLIEST, FAR, 2)
    assert (ml.stats["reads"], ml.stats["entries_read"]) == (2, 6)


# --- seal ---------------------------------------------------------------------------------------


def test_seal_refuses_appends_durably(backend: LedgerBackend, factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    ps = _fill(ml, 2)
    assert not ml.sealed
    ml.seal()
    ml.seal()  # idempotent
    assert ml.sealed
    with pytest.raises(LedgerSealed, match=f"ledger {prefix}l is sealed"):
        ml.append(_data(2))
    assert ml.last_confirmed() == ps[-1] and ml.stats["appends"] == 2
    after = backend.after_crash().open(prefix + "l")
    assert after.sealed and after.last_confirmed() == ps[-1]
    assert _msgs(after) == ["m0", "m1"]  # still readable
    with pytest.raises(LedgerSealed):
        after.append(_data(2))
    assert not backend.after_crash().open(prefix + "other").sealed


# --- trim ---------------------------------------------------------------------------------------


def test_trim_deletes_only_before_the_position_and_reads_skip_it(
    backend: LedgerBackend, factory: LedgerFactory, prefix: str
) -> None:
    ml = factory.open(prefix + "l")
    ps = _fill(ml, 7)
    assert ml.trim(ps[0]) == 0 and not any(ml.is_trimmed(p) for p in ps)
    removed = ml.trim(ps[4])
    trimmed = [p for p in ps if ml.is_trimmed(p)]
    assert removed == len(trimmed) > 0
    assert all(p < ps[4] for p in trimmed)
    if ml.trims_whole_ledgers:  # a ledger goes whole, and the current one never
        assert all(q in trimmed for p in trimmed for q in ps if q.ledger_id == p.ledger_id)
        assert ps[-1].ledger_id not in {p.ledger_id for p in trimmed}
    else:
        assert trimmed == ps[:4]
    kept = [p for p in ps if p not in trimmed]
    assert ml.first_position() == kept[0] and ml.entry_count() == len(kept)
    assert [e.position for e in ml.read(ps[0], ps[-1], 100)] == kept
    assert [e.position for e in ml.read(ps[0], ps[-1], 1)] == kept[:1]
    assert ml.trim(ps[4]) == 0  # nothing more to delete there
    assert ml.stats["trimmed_entries"] == removed
    after = backend.after_crash().open(prefix + "l")
    assert [p for p in ps if after.is_trimmed(p)] == trimmed
    assert after.first_position() == kept[0] and after.last_confirmed() == ps[-1]


def test_trim_past_the_end_keeps_positions_going(backend: LedgerBackend, factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    ps = _fill(ml, 7)
    removed = ml.trim(FAR)
    assert removed == 7 - ml.entry_count()
    if not ml.trims_whole_ledgers:
        assert ml.entry_count() == 0 and ml.read(EARLIEST, FAR, 10) == []
    assert ml.last_confirmed() == ps[-1]
    nxt = ml.next_position(ps[-1])
    if ml.entry_count() == 0:
        assert ml.first_position() == nxt  # where the next append lands
    assert ml.append(_data(7)) == nxt
    after = backend.after_crash().open(prefix + "l")
    assert after.last_confirmed() == nxt and after.entry_count() == ml.entry_count()


def test_consumed_ledgers_are_trimmed_behind_the_slowest_cursor(
    backend: LedgerBackend, factory: LedgerFactory, prefix: str
) -> None:
    """``trims_consumed`` (Pulsar's default retention): at a rollover, or when a mark-delete moves
    to another ledger, every ledger wholly at or before the slowest cursor's mark-delete goes."""
    ml = factory.open(prefix + "l")
    if not ml.trims_consumed:
        pytest.skip("this backend deletes only on trim()")
    ps = _fill(ml, 7)  # three entries per ledger: [0 1 2] [3 4 5] [6]
    assert ps[3].ledger_id != ps[2].ledger_id and ps[6].ledger_id != ps[5].ledger_id
    start = CursorState(Position(ps[0].ledger_id, -1))
    ml.save_cursor("fast", start)
    ml.save_cursor("slow", start)
    ml.save_cursor("fast", CursorState(ps[5]))
    assert ml.entry_count() == 7 and not any(ml.is_trimmed(p) for p in ps)  # "slow" holds everything
    ml.save_cursor("slow", CursorState(ps[4]))  # the slowest moves to the second ledger
    assert [p for p in ps if ml.is_trimmed(p)] == ps[:3]
    assert ml.stats["trimmed_entries"] == 3 and ml.stats["trimmed_ledgers"] == 1
    ml.save_cursor("slow", CursorState(ps[5]))  # same ledger: no trim until the next rollover
    assert ml.entry_count() == 4
    ps += _fill(ml, 3)  # ps[9] rolls over: the ledger ending at ps[5] is consumed by both
    assert [p for p in ps if ml.is_trimmed(p)] == ps[:6]
    assert ml.stats["trimmed_ledgers"] == 2 and ml.first_position() == ps[6]
    assert [e.position for e in ml.read(EARLIEST, FAR, 100)] == ps[6:]
    after = backend.after_crash().open(prefix + "l")
    assert [p for p in ps if after.is_trimmed(p)] == ps[:6] and after.entry_count() == 4
    lone = factory.open(prefix + "no-cursor")
    _fill(lone, 10)  # a ledger nobody subscribes to keeps everything
    assert lone.entry_count() == 10 and lone.stats["trimmed_entries"] == 0


# --- cursors ------------------------------------------------------------------------------------


def test_cursor_state_is_durable_and_replaceable(backend: LedgerBackend, factory: LedgerFactory, prefix: str) -> None:
    ml = factory.open(prefix + "l")
    ps = _fill(ml, 5)
    assert ml.load_cursor("a") is None and ml.cursor_names() == []
    ml.save_cursor("b", CursorState(ps[0]))
    ml.save_cursor("a", CursorState(ps[1], (ps[3], ps[4])))
    ml.save_cursor("b", CursorState(ps[2], (ps[4],)))  # replaces
    ml.save_cursor("gone", CursorState(ps[0]))
    ml.delete_cursor("gone")
    ml.delete_cursor("gone")  # idempotent
    ml.delete_cursor("never")
    assert ml.stats["cursor_writes"] == 4
    expected = {"a": CursorState(ps[1], (ps[3], ps[4])), "b": CursorState(ps[2], (ps[4],))}
    assert ml.cursor_names() == ["a", "b"]
    assert {n: ml.load_cursor(n) for n in ml.cursor_names()} == expected
    other = factory.open(prefix + "other")
    assert other.cursor_names() == []  # cursors belong to one ledger
    after = backend.after_crash().open(prefix + "l")
    assert after.cursor_names() == ["a", "b"]
    assert {n: after.load_cursor(n) for n in after.cursor_names()} == expected
    assert after.load_cursor("gone") is None


# --- listeners ----------------------------------------------------------------------------------


def test_listeners_hear_every_handle_and_die_with_close(
    backend: LedgerBackend, factory: LedgerFactory, prefix: str
) -> None:
    """Listeners are per handle; they hear appends made through any handle of the factory."""
    a = factory.open(prefix + "l")
    b = factory.open(prefix + "l")
    heard_a: list[Position] = []
    heard_b: list[Position] = []
    a.add_listener(heard_a.append)
    b.add_listener(heard_b.append)
    p0 = a.append(_data(0))
    p1 = b.append(_data(1))
    assert heard_a == [p0, p1] and heard_b == [p0, p1]
    a.close()
    p2 = b.append(_data(2))
    assert heard_a == [p0, p1] and heard_b == [p0, p1, p2]
    assert _msgs(a) == ["m0", "m1", "m2"]  # close drops listeners, not data
    assert b.stats["appends"] == 2 and a.stats["appends"] == 1
    c = backend.after_crash().open(prefix + "l")
    heard_c: list[Position] = []
    c.add_listener(heard_c.append)
    assert heard_c == [] and c.append(_data(3)) == c.last_confirmed() and heard_c == [c.last_confirmed()]


# --- the factory: names, exists, delete -----------------------------------------------------------


def test_names_exists_and_delete(backend: LedgerBackend, factory: LedgerFactory, prefix: str) -> None:
    names = [prefix + n for n in ("b/seg/0000-7fff-1", "a", "b/seg/8000-ffff-1", "c")]
    for n in names:
        factory.open(n)
    assert factory.names(prefix) == sorted(names)
    assert factory.names(prefix + "b/") == sorted(names[0::2])
    assert factory.names(prefix + "zzz") == []
    assert factory.exists(prefix + "a") and not factory.exists(prefix + "nope")
    ml = factory.open(prefix + "a")
    old = _fill(ml, 2)
    ml.save_cursor("sub", CursorState(old[0]))
    ml.seal()
    factory.delete(prefix + "a")
    factory.delete(prefix + "a")  # idempotent
    factory.delete(prefix + "never")
    assert not factory.exists(prefix + "a")
    after = backend.after_crash()
    assert after.names(prefix) == sorted(names[0::2] + [prefix + "c"])
    assert not after.exists(prefix + "a")
    fresh = after.open(prefix + "a")  # a new, empty ledger under the old name
    assert fresh.entry_count() == 0 and fresh.cursor_names() == [] and not fresh.sealed
    assert fresh.append(_data(0)) not in old  # a stale position never names a new entry


# --- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["memory://?max_entries_per_ledger=0", "kafka://", "kafka://no-port", "kafka://h:1?x=1"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        open_ledgers(url)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("scheme", ["kafka"])
def test_unreachable_backend_fails_within_seconds_naming_the_url(scheme: str) -> None:
    url = f"{scheme}://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable, match=url):
        open_ledgers(url)
    assert time.monotonic() - t0 < 10
