"""The shared core of txnbench: ids, positions, entries, errors, time, ports, ledgers, topics,
subscriptions, the shared dispatcher and the broker that wires an engine in per topic.

Nothing here imports ``legacy_v4`` or ``metadata_v5``; they plug in through :mod:`engine.ports`.
"""
