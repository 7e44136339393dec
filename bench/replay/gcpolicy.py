"""The cyclic garbage collector's settings during a replay.

A replay allocates millions of short-lived tuples and dicts that reference counting frees, and
keeps a large, slowly churning heap (ledger entries, metadata records). With CPython's default
thresholds (700, 10, 10) the collector ran thousands of young and dozens of full collections per
million events, each full one walking every object of the process (imported modules included),
and took a quarter to a third of a replay's time while finding almost nothing to free (a few
hundred objects per million events: the engines make little cyclic garbage).

:func:`replay_gc` freezes what exists when the replay starts (modules, the trace reader; never
garbage) and raises the young-generation threshold, so collections stay rare and small. Cycles
are still collected, just later.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

YOUNG_THRESHOLD = 100_000  # allocations (net of frees) between young collections; CPython's is 700

_depth = 0  # replay_gc bodies running in this process (gc.freeze/unfreeze are process-wide)


@contextmanager
def replay_gc(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Run the body with the pre-existing heap frozen and a young threshold of ``young``; put
    the thresholds back on exit. ``gc.unfreeze`` thaws the whole permanent generation, so only the
    outermost of nested bodies freezes and unfreezes: an inner one's exit leaves the outer's heap
    frozen (successive and nested replays compose)."""
    global _depth
    before = gc.get_threshold()
    if _depth == 0:
        gc.freeze()
    _depth += 1
    gc.set_threshold(young, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
