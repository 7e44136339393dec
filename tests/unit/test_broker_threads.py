"""The flight-recording summary behind the per-thread metadata queues (benchmarks/broker_threads.py)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.broker_threads import Windows, by_window, classify, cpu_by_window, end_txns, tally, txn_phase


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


def test_samples_are_placed_around_the_end_txns() -> None:
    events = [{"ev": "ready", "t0_epoch_ms": 1_000_000},
              {"ev": "op", "op": "new_txn", "start_us": 0, "end_us": 1_000, "ok": True},
              {"ev": "op", "op": "commit", "start_us": 100_000, "end_us": 110_000, "ok": True},
              {"ev": "op", "op": "abort", "start_us": 200_000, "end_us": 201_000, "ok": True},
              {"ev": "op", "op": "commit", "start_us": 300_000, "end_us": None, "ok": False}]  # never answered
    ends = end_txns(events)
    assert ends == [(1_000_100, 1_000_110), (1_000_200, 1_000_201)]
    assert [Windows(ends).of(t) for t in (1_000_050, 1_000_105, 1_000_110, 1_000_114.9, 1_000_115,
                                               1_000_119.9, 1_000_120, 1_000_159.9, 1_000_160, 1_000_202)] == [
        "rest", "during", "0-5 ms", "0-5 ms", "5-10 ms", "5-10 ms", "10-50 ms", "10-50 ms", "rest", "0-5 ms"]
    overlapping = Windows([(0.0, 10.0), (5.0, 20.0)])  # the second asked before the first was answered
    assert [overlapping.of(t) for t in (12.0, 19.9, 20.0, 31.0)] == ["during", "during", "0-5 ms", "10-50 ms"]
    busy = ("org/rocksdb/RocksIterator", "next0Jni")
    samples = [_sample("metadata-store-event-1-1", "1970-01-01T00:16:40.112Z", busy),  # 2 ms after the first answer
               _sample("metadata-store-event-1-1", "1970-01-01T00:16:40.113Z", busy),
               _sample("metadata-store-event-1-1", "1970-01-01T00:16:40.113Z", ("jdk/internal/misc/Unsafe", "park")),
               _sample("pulsar-io-24-1", "1970-01-01T00:16:40.105Z", busy),  # during the first
               _sample("pulsar-io-24-1", "1970-01-01T00:16:40.300Z", busy)]  # after the phase: not counted
    lengths, per = by_window(samples, ends, 1_000_000, 1_000_250)
    # during: 10 ms + 1 ms; 0-5 ms: 5 + 5; 5-10 ms: 5 + 5; 10-50 ms: 40 + 39 (the phase ends 49 ms
    # after the second answer); the rest: 250 less those
    assert lengths == {"during": 11.0, "0-5 ms": 10.0, "5-10 ms": 10.0, "10-50 ms": 79.0, "rest": 140.0}
    assert per == {"metadata-store-event-1-1": {"0-5 ms": 2}, "pulsar-io-24-1": {"during": 1}}


def test_cpu_time_goes_to_the_window_of_each_intervals_midpoint() -> None:
    """``--cpu``: between two readings, each thread's CPU time and the interval's length go to the
    window its midpoint is in; threads of one name add up; a thread first read later counts from
    its first reading; the txn phase bounds it."""
    ends = [(100.0, 110.0)]  # one END_TXN, asked at 100 ms, answered at 110
    ms = 1_000_000  # ns
    samples = [(98.0, {"1": 0, "2": 0}),
               (102.0, {"1": 1 * ms, "2": 4 * ms}),          # midpoint 100: during
               (108.0, {"1": 4 * ms, "2": 4 * ms}),          # 105: during
               (112.0, {"1": 4 * ms, "2": 6 * ms, "3": 0}),  # 110: 0-5 ms after the answer
               (118.0, {"1": 7 * ms, "2": 6 * ms, "3": 2 * ms}),  # 115: 5-10 ms
               (400.0, {"1": 9 * ms, "2": 6 * ms, "3": 2 * ms})]  # 259: past the phase, not counted
    names = {"1": "metadata-store-event", "2": "pulsar-io", "3": "pulsar-io"}
    lengths, per = cpu_by_window(samples, names, ends, 90.0, 200.0)
    assert lengths == {"during": 10.0, "0-5 ms": 4.0, "5-10 ms": 6.0, "10-50 ms": 0.0, "rest": 0.0}
    assert per == {"metadata-store-event": {"during": 4.0, "5-10 ms": 3.0},
                   "pulsar-io": {"during": 4.0, "0-5 ms": 2.0, "5-10 ms": 2.0}}
