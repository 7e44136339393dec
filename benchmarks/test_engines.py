"""Publish, end-txn, dispatch read and recovery, per engine and backend."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from benchmarks.conftest import Rig, config
from engine.ports import TxnAction

T = "persistent://public/bench/t"
ROUNDS = dict(rounds=20, warmup_rounds=3, iterations=1)


def test_txn_publish(benchmark, rig: Rig, engine: str) -> None:  # type: ignore[no-untyped-def]
    """100 transactional publishes into one open txn."""
    counter = itertools.count()
    txn = rig.broker.new_txn(600_000)

    def publish_100() -> None:
        for _ in range(100):
            rig.broker.publish(T, f"m{next(counter)}", 1024, txn=txn)

    benchmark.pedantic(publish_100, **ROUNDS)
    benchmark.extra_info["counts"] = dict(rig.broker.stats())


@pytest.mark.parametrize("participants", [1, 16, 64])
def test_end_txn(benchmark, rig: Rig, engine: str, participants: int) -> None:  # type: ignore[no-untyped-def]
    """Commit of a txn that wrote one message to each of N partitions, until it resolves."""
    topics = [f"persistent://public/bench/p{i}" for i in range(participants)]
    counter = itertools.count()

    def setup():  # type: ignore[no-untyped-def]
        txn = rig.broker.new_txn(600_000)
        for t in topics:
            rig.broker.publish(t, f"m{next(counter)}", 100, txn=txn)
        return (txn,), {}

    def commit(txn) -> None:  # type: ignore[no-untyped-def]
        done = []
        rig.broker.end_txn(txn, TxnAction.COMMIT, lambda t, s: done.append(s))
        while not done:
            rig.run(1_000)

    benchmark.pedantic(commit, setup=setup, rounds=10, warmup_rounds=2)
    benchmark.extra_info["counts"] = dict(rig.broker.stats())


def test_dispatch_read(benchmark, rig: Rig, engine: str) -> None:  # type: ignore[no-untyped-def]
    """Publish 200 committed-txn messages and dispatch them to a subscriber."""
    got: list[object] = []
    rig.broker.subscribe(T, "sub", got.extend)
    counter = itertools.count()

    def cycle() -> None:
        txn = rig.broker.new_txn(600_000)
        for _ in range(200):
            rig.broker.publish(T, f"m{next(counter)}", 100, txn=txn)
        rig.broker.end_txn(txn, TxnAction.COMMIT)
        rig.run(50_000)

    benchmark.pedantic(cycle, **ROUNDS)
    benchmark.extra_info["delivered"] = len(got)


@pytest.mark.parametrize("entries", [1_000, 10_000])
def test_recovery(benchmark, engine: str, backend: str, entries: int) -> None:  # type: ignore[no-untyped-def]
    """Crash a broker whose topic holds N entries (one txn left open) and recover its buffer."""
    rig = Rig(config(engine, backend))
    try:
        for i in range(entries):
            rig.broker.publish(T, f"m{i}", 100)
        txn = rig.broker.new_txn(600_000)
        rig.broker.publish(T, "open", 100, txn=txn)
        rig.run(10_000_000)

        def recover() -> None:
            rig.crash()
            rig.broker.transaction_buffer(T)
            rig.run(60_000_000)

        benchmark.pedantic(recover, rounds=5, warmup_rounds=1)
        benchmark.extra_info["recovery"] = [dataclasses.asdict(s) for s in rig.broker.recovery_stats()]
    finally:
        rig.close()
