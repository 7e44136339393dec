"""Issue 20, ``txnbench stream run``: records that ``load`` would have refused (an unknown op, an
unknown txn, a wrong-typed field) are one TraceError naming the row; ``--timeout`` bounds the
whole run."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.stream.stream import create_topics
from bench.stream.stream_app import run_stream
from engine.errors import TraceError, TxnbenchError

pytestmark = [pytest.mark.kafka, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
T = "persistent://a/b/c"


def _topic_with(url: str, records: list[dict[str, Any]]) -> str:
    from kafka import KafkaProducer

    topic = f"txnbench-hostile-{uuid.uuid4().hex[:10]}"
    create_topics(url, {topic: {}}, exist_ok=False)
    producer = KafkaProducer(bootstrap_servers=url.removeprefix("kafka://"), acks="all",
                             value_serializer=lambda v: json.dumps(v).encode())
    for rec in records:
        producer.send(topic, rec)
    producer.flush(timeout=30)
    producer.close(timeout=5)
    return topic


def _trace(*events: dict[str, Any]) -> list[dict[str, Any]]:
    rows = len(events) + 1
    return ([{"kind": "start", "rows": rows, "trace": {"rows": rows}},
             {"kind": "event", "row": 0, "ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"}]
            + [{"kind": "event", "row": i + 1, **e} for i, e in enumerate(events)]
            + [{"kind": "end", "rows": rows}])


@pytest.mark.parametrize("event, says", [
    ({"ts_us": 1, "op": "explode", "topic": T}, "unknown op 'explode'"),
    ({"ts_us": 1, "op": "commit", "txn": "nope"}, "unknown txn 'nope'"),
    ({"ts_us": "soon", "op": "publish", "topic": T, "msg": "m", "size": 1}, "ts_us must be an integer"),
])
def test_bad_records_are_refused_by_row(kafka_url: str, tmp_path: Path, event: dict[str, Any], says: str) -> None:
    topic = _topic_with(kafka_url, _trace(event))
    with pytest.raises(TraceError, match="row 1") as err:
        run_stream(kafka_url, tmp_path / "out", topic=topic, timeout_s=60)
    assert says in str(err.value)
    assert not (tmp_path / "out").exists()


def test_timeout_bounds_the_whole_run(kafka_url: str, tmp_path: Path) -> None:
    topic = _topic_with(kafka_url, _trace()[:2])  # a header and one event, never an end marker
    started = time.monotonic()
    with pytest.raises(TxnbenchError, match="within 8"):
        run_stream(kafka_url, tmp_path / "out", topic=topic, timeout_s=8)
    assert time.monotonic() - started < 8 + 10  # was 62 s for --timeout 10
    assert not (tmp_path / "out").exists()
