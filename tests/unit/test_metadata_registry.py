"""Picking a metadata store by URL, and the watch hub's delivery rules (no backend needed)."""

from __future__ import annotations

from typing import Callable

import pytest

from engine.errors import ConfigError
from metadata_v5.store.degraded import DegradedMetadataStore
from metadata_v5.store.memory import MemoryData, MemoryMetadataStore
from metadata_v5.store.redis import RedisMetadataStore
from metadata_v5.store.registry import backend_for, is_degraded, open_metadata
from metadata_v5.store.port import ChangeKind, WatchEvent


def test_urls() -> None:
    assert isinstance(open_metadata("memory://"), MemoryMetadataStore)
    d = open_metadata("memory://?degraded=1")
    assert isinstance(d, DegradedMetadataStore) and not d.capabilities.range_watch_events
    assert isinstance(open_metadata("memory://?degraded=1", degraded=False), MemoryMetadataStore)
    assert is_degraded("redis://h:1/0?prefix=x:&degraded=true") and not is_degraded("redis://h:1")
    assert backend_for("redis://127.0.0.1:6379") == RedisMetadataStore.from_url
    for bad in ("zookeeper://h:2181", "memory", "", "redis:/h"):
        with pytest.raises(ConfigError):
            open_metadata(bad)
    with pytest.raises(ConfigError):
        open_metadata("memory://?degraded=sometimes")
    with pytest.raises(ConfigError):  # no connection attempted
        RedisMetadataStore.from_url("redis://127.0.0.1:1/0?prefix={tag}")
    with pytest.raises(ConfigError):
        RedisMetadataStore.from_url("redis://127.0.0.1:1/0?stream_maxlen=lots")
    for spin in ("lots", "-1"):  # refused before any connection is attempted
        with pytest.raises(ConfigError, match="reply_spin_us"):
            RedisMetadataStore.from_url(f"redis://127.0.0.1:1/0?reply_spin_us={spin}")


def test_durable_data_outlives_handles() -> None:
    data = MemoryData()
    a = MemoryMetadataStore.open(data)
    a.put("/k", {"v": "1"})
    a.close()
    a.close()  # idempotent
    b = MemoryMetadataStore.open(data)
    assert b.get("/k") is not None and b.get("/k").fields == {"v": "1"}  # type: ignore[union-attr]
    assert a.reopen().get("/k") == b.get("/k")
    assert len(data.hubs) == 2  # b and the reopened handle; a is gone


def test_memory_notifier_is_called_inside_the_write() -> None:
    """In-process: the change is handed to the notifier during the write call, in order, so a
    virtual-time engine schedules delivery deterministically."""
    store = MemoryMetadataStore.open()
    order: list[str] = []
    handed: list[Callable[[], None]] = []

    def notifier(deliver: Callable[[], None]) -> None:
        order.append("handed")
        handed.append(deliver)

    store.set_notifier(notifier)
    events: list[WatchEvent] = []
    store.watch("/k", events.append)
    order.append("write")
    store.put("/k", {"n": "1"})
    order.append("returned")
    store.delete("/k")
    assert order == ["write", "handed", "returned", "handed"]
    assert store.poll_watches() == 0 and events == []
    for deliver in handed:
        deliver()
        deliver()  # one-shot: the second call does nothing
    assert [e.kind for e in events] == [ChangeKind.PUT, ChangeKind.DELETE]
    assert store.stats()["watch_events"] == 2


def test_events_to_a_closed_handle_are_dropped() -> None:
    store = MemoryMetadataStore.open()
    handed: list[Callable[[], None]] = []
    events: list[WatchEvent] = []
    store.set_notifier(handed.append)
    store.watch("/k", events.append)
    store.put("/k", {})
    store.close()
    handed[0]()
    assert events == []
