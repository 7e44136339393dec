"""A real Pulsar 5 broker as a replay target (issue 15).

The same trace that the models replay runs through a real broker: the v4 design on
``persistent://`` topics, the v5 (PIP-473) design on ``topic://`` scalable topics. The JVM trace
client (``jvm/``, contract in ``jvm/PROTOCOL.md``) issues the rows; this package prepares them,
drives that program, scrapes the broker's counters and writes the same result directory as a
model run (:mod:`bench.replay.results`).

- :mod:`bench.pulsar.target`: ``--target`` URL, admin URL, pacing; the broker's version and config.
- :mod:`bench.pulsar.rows`: trace rows -> protocol rows in a per-run namespace; refusals.
- :mod:`bench.pulsar.client`: starts and feeds the JVM program, reads its events.
- :mod:`bench.pulsar.metrics`: ``/metrics`` and admin stats before/after, mapped onto our count names.
- :mod:`bench.pulsar.fold`: protocol events -> deliveries, txn rows, latencies, counts, a history.
- :mod:`bench.pulsar.run`: one broker run end to end into a result directory.
- :mod:`bench.pulsar.validate_run`: ``txnbench validate``: one trace through the model and the broker.
"""
