"""Transaction ids that carry the design (v4 or v5) of the coordinator that issued them.

Pulsar's TxnID is (mostSigBits, leastSigBits): v4 puts the coordinator id in the high part and a
per-coordinator sequence in the low part. A v5 id has the same shape, so a bare pair could be handed
to the wrong coordinator unnoticed; here the design is part of the id and coordinators refuse a
foreign one with :class:`engine.errors.ForeignTxnId`.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from engine.errors import ForeignTxnId


class Design(str, Enum):
    V4 = "v4"
    V5 = "v5"


class TxnID(NamedTuple):
    """Immutable and ordered by ``(design, most_bits, least_bits)``; a named tuple so that the
    dict and set look-ups a replay does per transactional entry hash in C (see
    :mod:`engine.records`)."""

    design: Design
    most_bits: int  # v4: coordinator id
    least_bits: int  # v4: sequence within that coordinator

    def __str__(self) -> str:
        return f"{self.design.value}:({self.most_bits},{self.least_bits})"

    def require(self, design: Design) -> TxnID:
        """Return self if issued by ``design``'s coordinator, else raise ForeignTxnId."""
        if self.design is not design:
            raise ForeignTxnId(
                f"txn {self} was issued by a {self.design.value} coordinator; "
                f"the {design.value} coordinator refuses it"
            )
        return self
