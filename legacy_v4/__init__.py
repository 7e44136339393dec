"""v4: Apache Pulsar's marker-based transactions (PIP-31), modelled faithfully.

* :mod:`legacy_v4.coordinator` — TC with a ``__transaction_log_<tcId>`` ledger, END_TXN fan-out
  with timeouts and retries, timeout tracker.
* :mod:`legacy_v4.buffer` — ``TopicTransactionBuffer`` (markers, maxReadPosition, aborted set,
  low-water marks, states, replay recovery).
* :mod:`legacy_v4.snapshot` — the per-namespace ``__transaction_buffer_snapshot`` ledger.
* :mod:`legacy_v4.pending_ack` — ``MLPendingAckStore`` on ``<topic>-<sub>__transaction_pending_ack``.
* :mod:`legacy_v4.engine` — :class:`V4Engine` and :func:`v4_engine`.
"""

from legacy_v4.engine import V4Engine, v4_engine
from legacy_v4.options import V4Options

__all__ = ["V4Engine", "V4Options", "v4_engine"]
