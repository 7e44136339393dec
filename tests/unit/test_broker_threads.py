"""The flight-recording summary behind the per-thread metadata queues (benchmarks/broker_threads.py)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.broker_threads import classify, tally, txn_phase


def _frame(type_: str, method: str) -> dict[str, Any]:
    return {"method": {"type": {"name": type_}, "name": method}}


def _sample(thread: str, iso: str, *frames: tuple[str, str]) -> dict[str, Any]:
    return {"values": {"startTime": iso, "sampledThread": {"javaName": thread},
                       "stackTrace": {"frames": [_frame(t, m) for t, m in frames]}}}


def test_samples_are_waiting_committing_listing_or_busy() -> None:
    commit = [("org/rocksdb/Transaction", "commit"), ("org/apache/pulsar/metadata/impl/RocksdbMetadataStore", "storePut")]
    assert classify([_frame(*f) for f in commit]) == "commit"
    assert classify([_frame("io/netty/channel/epoll/Native", "epollWait0")]) == "waiting"
    assert classify([_frame("jdk/internal/misc/Unsafe", "park")]) == "waiting"
    assert classify([_frame("java/lang/String", "compareTo"),
                     _frame("org/apache/pulsar/metadata/impl/RocksdbMetadataStore", "getChildrenFromStore")]) == "listing"
    assert classify([_frame("com/fasterxml/jackson/core/json/UTF8StreamJsonParser", "nextToken")]) == "busy"
    assert classify([]) == "waiting"


def test_only_the_txn_phase_is_counted() -> None:
    events = [{"ev": "ready", "t0_epoch_ms": 1_000_000},
              {"ev": "op", "op": "subscribe", "start_us": 0, "end_us": 50_000},
              {"ev": "op", "op": "new_txn", "start_us": 100_000, "end_us": 101_000},
              {"ev": "op", "op": "commit", "start_us": 150_000, "end_us": 200_000}]
    lo, hi = txn_phase(events)
    assert (lo, hi) == (1_000_100, 1_000_200)
    # 1970-01-01T00:16:40.150Z is 1_000_150 ms after the epoch: inside; .050 is the subscribe's time
    inside = _sample("pulsar-io-1", "1970-01-01T00:16:40.150Z", ("org/rocksdb/Transaction", "commit"))
    before = _sample("pulsar-io-1", "1970-01-01T00:16:40.050Z", ("x/Y", "run"))
    assert tally([inside, before], lo, hi) == {"pulsar-io-1": {"commit": 1}}
    with pytest.raises(SystemExit, match="no txn phase"):
        txn_phase(events[:2])
