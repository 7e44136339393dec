"""The Pulsar client's warnings read from the trace client's log (bench.pulsar.client.log_warnings)."""

from __future__ import annotations

from pathlib import Path

from bench.pulsar.client import log_warnings

# as the 5.0.0-M1 client logs them (2026-11-27), the topic in the run's own namespace or the warm-up's
WARN = ("12:10:49.081 WARN  ProducerImpl - Got ack for msg with unexpected sequence id {channel=[id: 0x5a43b7a2], "
        "expectedSequenceId=1, gotSequenceId=3, producerId=81, queueSize=4, topic=persistent://public/NS/t0-partition-38}")


def test_out_of_order_receipts_are_counted_on_the_measured_runs_topics_only(tmp_path: Path) -> None:
    log = tmp_path / "client-v4.log"
    log.write_text("\n".join([
        "INFO: AutoConfiguredOpenTelemetrySdk found on classpath",
        WARN.replace("NS", "tb-3c1de3-v4-bench"),
        WARN.replace("NS", "tb-3c1de3-v4-bench").replace("gotSequenceId=3", "gotSequenceId=4"),
        WARN.replace("NS", "tb-999999-v4-bench"),  # the warm-up's namespace
        "12:10:49.101 WARN  ClientCnx - Failed to send to broker {send=AckResponse request}",
    ]) + "\n")
    assert log_warnings(log, {"public/tb-3c1de3-v4-bench"}) == {"client_warnings.out_of_order_receipt": 2}
    # a namespace that only shares a prefix is not the run's
    assert log_warnings(log, {"public/tb-3c1de3-v4"}) == {}
    assert log_warnings(tmp_path / "missing.log", {"public/tb-3c1de3-v4-bench"}) == {}
