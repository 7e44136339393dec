from __future__ import annotations

import pytest

from engine.errors import ConfigError, LedgerSealed
from engine.ledger import CursorState
from engine.memledger import MemoryLedgerFactory
from engine.records import EntryData, MarkerKind, Position


def _data(i: int) -> EntryData:
    return EntryData(size=i, publish_ts_us=i, msg=f"m{i}")


def test_rollover_positions_and_next_position_cross_ledgers() -> None:
    f = MemoryLedgerFactory(max_entries_per_ledger=3)
    ml = f.open("l")
    positions = [ml.append(_data(i)) for i in range(7)]
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0]
    assert len({p.ledger_id for p in positions}) == 3
    walk = [ml.first_position()]
    while walk[-1] != ml.last_confirmed():
        walk.append(ml.next_position(walk[-1]))
    assert walk == positions
    assert ml.next_position(ml.last_confirmed()) == Position(positions[-1].ledger_id, 1)
    got = ml.read(positions[1], positions[5], 100)
    assert [e.data.msg for e in got] == ["m1", "m2", "m3", "m4", "m5"]
    assert [e.data.msg for e in ml.read(positions[1], positions[5], 2)] == ["m1", "m2"]


def test_trim_deletes_whole_ledgers_only_and_remembers_them() -> None:
    f = MemoryLedgerFactory(max_entries_per_ledger=3)
    ml = f.open("l")
    positions = [ml.append(_data(i)) for i in range(7)]
    assert ml.trim(positions[4]) == 3  # first ledger only; the second still holds m4
    assert ml.is_trimmed(positions[0]) and not ml.is_trimmed(positions[3])
    assert ml.first_position() == positions[3]
    assert [e.data.msg for e in ml.read(positions[0], positions[4], 10)] == ["m3", "m4"]
    assert ml.trim(Position(10**9, 0)) == 3  # never the current ledger
    assert ml.entry_count() == 1


def test_durable_across_handles_seal_and_cursors() -> None:
    f = MemoryLedgerFactory()
    heard: list[Position] = []
    a = f.open("l")
    a.add_listener(heard.append)
    p = a.append(EntryData(0, 0, marker=MarkerKind.COMMIT))
    a.save_cursor("sub", CursorState(p, ()))
    a.seal()
    a.close()
    b = f.open("l")
    assert b.sealed and b.last_confirmed() == p and b.load_cursor("sub") == CursorState(p, ())
    with pytest.raises(LedgerSealed, match="ledger l is sealed"):
        b.append(_data(1))
    assert heard == [p]  # a's listener died with a
    assert b.stats["appends"] == 0 and a.stats["appends.marker"] == 1
    assert f.names() == ["l"] and f.exists("l")
    f.delete("l")
    assert not f.exists("l")


def test_bad_rollover_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_entries_per_ledger"):
        MemoryLedgerFactory(max_entries_per_ledger=0)
