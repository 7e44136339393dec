"""The history checker's historical import path; it lives in :mod:`bench.check` (history,
index, one rule per violation kind, summary)."""

from __future__ import annotations

from bench.check import (CAUSE_FAULTS, KINDS, CheckSummary, History, Violation, ambiguous_outcomes,
                         check)
from bench.check.history import Ack as _Ack
from bench.check.history import Pub as _Pub

__all__ = ["CAUSE_FAULTS", "KINDS", "CheckSummary", "History", "Violation", "_Ack", "_Pub", "ambiguous_outcomes", "check"]
