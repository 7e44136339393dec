"""Honest wall-time runs: comparable backends, and how well the replay kept up with the trace.

In wall time a figure is what the backends took, so two engines are comparable only if each keeps
its transaction state on the same kind of backend. v4 keeps it in the ledger (its coordinator log,
markers and snapshots are topic entries: ``MLTransactionLogImpl``, ``TopicTransactionBuffer``); v5
in the metadata store (PIP-473). ``--engine both --metadata redis://`` with an in-memory ledger
would compare v4 on a free dict with v5 on a real Redis round trip: refused unless asked for.

A wall-time replay issues each row when the wall clock reaches its ``ts_us``; a slow backend (or
a loaded machine) makes it issue rows late. The names follow the broker target's results
(:mod:`bench.pulsar.fold`): ``offered_rows_per_s`` (the trace's pace), ``achieved_rows_per_s`` (the
replay's), ``max_lag_us`` (the largest delay of a row behind its trace time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from bench.replay import registry
from bench.replay.config import RunConfig
from engine.errors import ConfigError

# A replay whose largest lag exceeds this fell behind the trace: its latencies include queueing
# that the trace's pace did not ask for. (A timer-driven loop on a shared machine is ~1 ms late.)
BEHIND_US = 100_000


def _state_urls(cfg: RunConfig) -> list[str]:
    """The backends holding a config's transaction state (and its data)."""
    return [cfg.ledger_url, cfg.metadata_url] if registry.spec(cfg.engine).uses_metadata_store else [cfg.ledger_url]


def _kind(url: str) -> str:
    return "in-memory" if url.startswith("memory://") else "real"


def mixed_backends(configs: Sequence[RunConfig]) -> str | None:
    """Why the wall-time runs of ``configs`` do not compare like with like, or None."""
    wall = [c for c in configs if c.time_mode == "wall" and registry.spec(c.engine).transactional]
    if len(wall) < 2:
        return None
    kinds = {c.label: sorted({_kind(u) for u in _state_urls(c)}) for c in wall}
    if len({tuple(k) for k in kinds.values()}) == 1 and len(next(iter(kinds.values()))) == 1:
        return None
    parts = "; ".join(f"{label} on {' + '.join(_state_urls(c))} ({'/'.join(kinds[label])})"
                      for label, c in ((c.label, c) for c in wall))
    return (f"mixed backends in wall time: {parts} — v4 keeps its transaction state in the ledger, v5 in the "
            f"metadata store, so one engine would be timed on an in-memory backend and the other on a real "
            f"service; give both --ledger and --metadata a real service, use --time virtual, or pass --allow-mixed")


def refuse_mixed(configs: Sequence[RunConfig], allow_mixed: bool) -> str | None:
    """Raise :class:`ConfigError` for mixed wall-time backends unless ``allow_mixed``; returns the
    reason when allowed (for the manifest), else None."""
    reason = mixed_backends(configs)
    if reason is not None and not allow_mixed:
        raise ConfigError(reason)
    return reason


@dataclass
class Pacing:
    """Rows issued against their trace times (wall time only)."""

    rows: int = 0
    first_ts_us: int | None = None
    last_ts_us: int = 0
    first_issue_us: int = 0
    last_issue_us: int = 0
    max_lag_us: int = 0

    def issued(self, ts_us: int, now_us: int) -> None:
        if self.first_ts_us is None:
            self.first_ts_us = ts_us
            self.first_issue_us = now_us
        self.rows += 1
        self.last_ts_us = ts_us
        self.last_issue_us = now_us
        lag = now_us - ts_us
        if lag > self.max_lag_us:
            self.max_lag_us = lag

    def rates(self) -> dict[str, Any]:
        span = self.last_ts_us - (self.first_ts_us or 0)
        issued = self.last_issue_us - self.first_issue_us
        return {
            "offered_rows_per_s": round(self.rows / (span / 1e6), 1) if span > 0 else None,
            "achieved_rows_per_s": round(self.rows / (issued / 1e6), 1) if issued > 0 else None,
            "max_lag_us": self.max_lag_us,
            "fell_behind": self.max_lag_us > BEHIND_US,
        }


def pacing_line(label: str, rates: dict[str, Any]) -> str:
    """The replay's one-line account of its pace (printed by ``replay``)."""
    line = (f"{label}: offered {rates['offered_rows_per_s']} rows/s, achieved {rates['achieved_rows_per_s']} rows/s, "
            f"largest lag behind the trace {rates['max_lag_us'] / 1000:.1f} ms")
    if rates["fell_behind"]:
        line += (f" — FELL BEHIND the trace (lag > {BEHIND_US / 1000:.0f} ms): its latencies include queueing "
                 f"the trace did not ask for")
    return line
