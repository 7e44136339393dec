"""The flight-recording summary behind the per-thread metadata queues (benchmarks/broker_threads.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from benchmarks.broker_threads import (CLIENT, MACHINE, CpuSample, Windows, _on_grid, _sample_client, _sample_cpu,
                                       by_window, classify, client_pid, cpu_by_window, end_txns, tally, txn_phase)


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


def test_the_clients_share_is_over_its_own_readings_grid() -> None:
    """The client is read less often than the broker's threads: its ms per window, scaled to the
    broker's window lengths, give back the share of the time its own readings spanned."""
    ends = [(100.0, 110.0)]
    ms = 1_000_000
    client = [(98.0, {CLIENT: 0}), (102.0, {CLIENT: 2 * ms}),  # midpoint 100: during, 2 of 4 ms
              (106.0, {CLIENT: 4 * ms}),                         # 104: during, 2 of 4 ms
              (114.0, {CLIENT: 4 * ms})]                         # 110: 0-5 ms after, 0 of 8 ms
    broker_lengths = {"during": 10.0, "0-5 ms": 5.0, "5-10 ms": 5.0, "10-50 ms": 0.0, "rest": 0.0}
    scaled = _on_grid(client, ends, 90.0, 200.0, broker_lengths)
    assert {w: v / broker_lengths[w] for w, v in scaled.items()} == {"during": 0.5}


SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


def test_cpu_readings_hold_each_threads_time_on_a_cpu_and_waiting_for_one() -> None:
    """``--cpu`` reads both of schedstat's first fields, the same instants in both lists: a thread
    kept busy meanwhile gains time on a CPU, and neither count goes back; the machine's busy time
    is read beside them and grows too."""
    busy = subprocess.Popen([sys.executable, "-c", SPIN.format(s=0.5)])  # its own process: no GIL to share
    tid = str(busy.pid)  # its main thread
    worked: list[CpuSample] = []
    waited: list[CpuSample] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_cpu, args=(str(busy.pid), [tid], worked, waited, stop))
    sampler.start()
    try:
        deadline = time.time() + 5
        while (len(worked) < 10 or worked[-1][0] - worked[0][0] < 30) and time.time() < deadline:
            time.sleep(0.005)
    finally:
        stop.set()
        sampler.join()
        busy.wait()
    assert len(worked) == len(waited) >= 10
    assert [t for t, _ in worked] == [t for t, _ in waited]
    on_cpu = [row[tid] for _, row in worked if tid in row]
    queued = [row[tid] for _, row in waited if tid in row]
    assert on_cpu == sorted(on_cpu) and queued == sorted(queued)
    assert on_cpu[-1] - on_cpu[0] > 1_000_000  # more than 1 ms of the 30 read, spent spinning
    machine = [row[MACHINE] for _, row in worked]
    assert machine == sorted(machine) and machine[-1] > machine[0]  # /proc/stat's ticks: 10 ms each
    assert all(MACHINE not in row for _, row in waited)


def test_the_client_is_found_by_its_main_class_and_read_with_all_its_threads() -> None:
    """``--cpu`` finds the trace client's JVM by the main class on its command line, once it has
    started, and reads its threads' time together: a client that spins gains time on a CPU."""
    marker = f"txnbench-test-client-{os.getpid()}"
    worked: list[CpuSample] = []
    waited: list[CpuSample] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_client, args=(worked, waited, stop, marker))
    sampler.start()
    time.sleep(0.05)
    assert client_pid(marker) is None and not worked  # not started yet: nothing read
    client = subprocess.Popen([sys.executable, "-c", SPIN.format(s=5), marker])
    try:
        # until ten readings, the last past the first (on a loaded machine a new process may
        # wait for a CPU through several readings)
        deadline = time.time() + 5
        while (len(worked) < 10 or worked[-1][1].get(CLIENT) == worked[0][1].get(CLIENT)) and time.time() < deadline:
            time.sleep(0.01)
        assert client_pid(marker) == str(client.pid)
        client.kill()
    finally:
        stop.set()
        sampler.join()
        client.wait()
    assert len(worked) == len(waited) >= 10
    on_cpu = [row[CLIENT] for _, row in worked]
    assert on_cpu == sorted(on_cpu) and on_cpu[-1] > on_cpu[0]
