"""A real Kafka broker crash: ledgers written through ``kafka://`` survive ``kill -9`` of the broker.

Starts a broker of its own with ``scripts/kafka.sh`` (the jars are cached after the first start),
so it runs where the Kafka tests run: it skips locally without ``TXNBENCH_KAFKA_URL`` and fails
when ``TXNBENCH_REQUIRE`` includes ``kafka``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from engine.backends import open_ledgers
from engine.errors import LedgerError
from engine.ledger import CursorState
from engine.records import EARLIEST, EntryData, MarkerKind, Position

pytestmark = pytest.mark.kafka

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"


def _kafka(*args: str) -> str:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"kafka.sh {' '.join(args)} failed: {done.stderr[-2000:]}"
    return done.stdout.strip()


@pytest.fixture
def own_broker(kafka_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A broker of this test's own (``kafka_url`` only decides whether Kafka tests run)."""
    home = tmp_path / "kafka"
    url = _kafka("start", str(home))
    try:
        yield url, home
    finally:
        _kafka("stop", str(home))


def test_ledgers_survive_a_broker_kill(own_broker: tuple[str, Path]) -> None:
    url, home = own_broker
    f = open_ledgers(url)
    ml = f.open("segment://t/ns/x/0000-7fff-1")
    ps = [ml.append(EntryData(size=i, publish_ts_us=i, msg=f"m{i}")) for i in range(6)]
    ml.append(EntryData(size=0, publish_ts_us=6, marker=MarkerKind.COMMIT))
    ml.save_cursor("sub", CursorState(ps[1], (ps[3],)))
    assert ml.trim(ps[2]) == 2
    ml.seal()
    f.close()

    os.kill(int((home / "kafka.pid").read_text()), signal.SIGKILL)  # no controlled shutdown
    t0 = time.monotonic()
    assert _kafka("restart", str(home)) == url  # same ports, same data
    restart_s = time.monotonic() - t0

    g = open_ledgers(url)
    try:
        again = g.open("segment://t/ns/x/0000-7fff-1")
        assert again.sealed
        assert again.load_cursor("sub") == CursorState(ps[1], (ps[3],))
        assert again.first_position() == ps[2] and again.last_confirmed() == Position(ps[0].ledger_id, 6)
        assert [e.data.msg for e in again.read(EARLIEST, again.last_confirmed(), 100)] == ["m2", "m3", "m4", "m5", None]
        assert g.names("segment://") == ["segment://t/ns/x/0000-7fff-1"]
    finally:
        g.close()
    assert restart_s < 60


def test_every_client_of_a_factory_refreshes_metadata_without_the_100_ms_backoff(kafka_url: str) -> None:
    """kafka-python 3's connection manager builds its ClusterMetadata without the client's
    ``retry_backoff_ms``: without the factory's fix each new ledger's first append (or read)
    waited 65-100 ms for the producer's next metadata refresh (``benchmarks/backends.py``)."""
    from engine.kafkaledger import _METADATA_BACKOFF_MS, KafkaLedgerFactory

    f = KafkaLedgerFactory.from_url(kafka_url)
    try:
        clusters = [f._producer._metadata, f._consumer._manager.cluster, f._admin._manager.cluster]
        assert [c.config["retry_backoff_ms"] for c in clusters] == [_METADATA_BACKOFF_MS] * 3
        ml = f.open(f"fresh-{os.getpid()}-{time.monotonic_ns()}")
        first = ml.first_position()
        # the new topic's leader is learnt by the refresh the first append asks for
        assert ml.append(EntryData(size=1, publish_ts_us=0, msg="m")) == first
        f.delete(ml.name)
    finally:
        f.close()


def test_an_append_the_broker_refused_unwritten_goes_again(kafka_url: str) -> None:
    """A produce answered NotLeaderForPartition or LeaderNotAvailable was not written (a new
    ledger's topic before its broker took the partition up), so the append sends it again and
    the ledger keeps every entry once, in order; any other failure (a timeout may have written it)
    is not sent again."""
    import kafka.errors as kerrors
    from kafka.producer.future import FutureProduceResult, FutureRecordMetadata

    from engine.kafkaledger import KafkaLedgerFactory

    f = KafkaLedgerFactory.from_url(kafka_url)
    try:
        ml = f.open(f"refused-{os.getpid()}-{time.monotonic_ns()}")
        first = ml.append(EntryData(size=1, publish_ts_us=0, msg="a"))
        send, refusals = f._producer.send, [kerrors.NotLeaderForPartitionError(), kerrors.LeaderNotAvailableError()]

        def refusing(*args: object, **kw: object) -> object:
            if refusals:  # what kafka-python hands back for a produce the broker refused
                produced = FutureProduceResult(None)
                record = FutureRecordMetadata(produced, 0, -1, None, 0, 0, -1)
                produced.failure(refusals.pop(0))
                return record
            return send(*args, **kw)

        f._producer.send = refusing
        second = ml.append(EntryData(size=1, publish_ts_us=1, msg="b"))
        assert not refusals and second == ml.next_position(first)
        assert [e.data.msg for e in ml.read(first, second, 10)] == ["a", "b"]

        refusals.append(kerrors.MessageSizeTooLargeError())  # any other failure is not sent again
        with pytest.raises(LedgerError, match="MessageSizeTooLargeError"):
            ml.append(EntryData(size=1, publish_ts_us=2, msg="c"))
        assert not refusals
        f.delete(ml.name)
    finally:
        f.close()
