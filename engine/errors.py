"""The one error hierarchy of txnbench.

Callers catch only these. Adapters (Redis, Kafka) translate driver exceptions into them at their
boundary with ``raise ... from e``, so no driver exception leaks into engine or bench code.
"""

from __future__ import annotations


class TxnbenchError(Exception):
    """Root of every error txnbench raises on purpose."""


# --- configuration and input ------------------------------------------------------------------


class ConfigError(TxnbenchError):
    """A setting, URL or option is invalid (names the setting and the value)."""


class BackendUnavailable(TxnbenchError):
    """A real backend (Redis, Kafka) cannot be reached; names the URL."""


# --- ledgers and topics -----------------------------------------------------------------------


class LedgerError(TxnbenchError):
    """A managed-ledger operation failed."""


class LedgerSealed(LedgerError):
    """Append to a sealed ledger (a sealed scalable-topic segment rejects writes)."""


class LedgerNotFound(LedgerError):
    """The named ledger does not exist and was not to be created."""


class TopicError(TxnbenchError):
    """A topic-level operation is invalid (unknown topic/subscription/segment, bad split)."""


class SegmentSealed(LedgerSealed, TopicError):
    """A scalable-topic segment was sealed by a split or merge and takes no more writes."""


# --- transactions -----------------------------------------------------------------------------


class TxnError(TxnbenchError):
    """A transactional operation failed."""


class TxnNotFound(TxnError):
    """The coordinator knows no such transaction (never created, or already forgotten)."""


class ForeignTxnId(TxnNotFound):
    """A transaction id issued by the other design's coordinator (v4 id to v5, or v5 to v4)."""


class InvalidTxnState(TxnError):
    """The transaction exists but is not in a state that allows the operation (e.g. used after
    commit/abort)."""


class TxnConflict(TxnError):
    """The operation conflicts with another transaction or with the cursor (pending-ack rules,
    a write to a txn that is no longer OPEN, an append below the low-water mark)."""


class TxnNotOpen(TxnConflict, InvalidTxnState):
    """A write or ack names a txn that is no longer OPEN. On the v5 path Pulsar replies
    TxnConflict (PIP-473 "Late-write race"); v4's coordinator replies InvalidTxnStatus. It is
    both, so callers of either design can catch what they know."""


class TxnTimeout(InvalidTxnState):
    """The transaction was aborted by its coordinator's timeout."""


class TxnClientTimeout(InvalidTxnState):
    """The client's own timer ended the transaction: the Java client's ``TransactionImpl.run``
    moves OPEN -> TIME_OUT once ``transactionTimeoutMs`` has passed, and ``checkIfOpen`` /
    ``checkIfOpenOrCommitting`` then fail every publish, ack, commit and abort with
    ``InvalidTxnStatusException``; the coordinator's timeout aborts it."""


class TxnOpFailed(TxnError):
    """A commit of a transaction one of whose publishes or acks failed: the Java client's
    ``TransactionImpl.commit`` aborts it instead and fails with
    ``TransactionHasOperationFailedException``."""


class MessageTooBig(TxnbenchError):
    """A message larger than the broker's ``maxMessageSize`` (``ServiceConfiguration``, 5 MB by
    default): the client refuses to send it (``ProducerImpl``: ``InvalidMessageException``)."""


class UnsupportedOperation(TxnbenchError):
    """The component does not take this call in its design (e.g. END_TXN on a v5 buffer)."""


# --- metadata store ---------------------------------------------------------------------------


class MetadataError(TxnbenchError):
    """A metadata-store operation failed."""


class BadVersion(MetadataError):
    """A compare-and-set found a different record version than expected."""


class KeyExists(BadVersion):
    """A create-if-absent found the key already present."""


class NoSuchKey(MetadataError):
    """The key the operation needs does not exist."""


# --- traces -----------------------------------------------------------------------------------


class TraceError(TxnbenchError):
    """A trace is malformed; the message names the file, the row and the reason."""

    def __init__(self, reason: str, *, row: int | None = None, source: str | None = None) -> None:
        where = []
        if source:
            where.append(str(source))
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{': '.join(where)}: {reason}" if where else reason)
        self.reason = reason
        self.row = row
        self.source = source
