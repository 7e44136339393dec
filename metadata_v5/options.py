"""Options of the v5 engine, with the defaults of Pulsar master's implementation."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from engine.errors import ConfigError

VARIANTS = ("watch", "events")
GC_MODES = ("pip", "safe")


@dataclass(frozen=True)
class V5Options:
    # watch: participants point-watch the headers they cached (the PIP); end-txn is one CAS.
    # events: after the CAS the coordinator lists the txn's ops and writes one event record per
    # segment and per (segment, subscription); participants watch those (Pulsar master).
    variant: str = "watch"
    # pip: the PIP's sweep (retention window, then force-delete leftover op records);
    # safe: never force-deletes a participant's op records, and keeps per-segment abort ranges
    # while the aborted data is retained.
    gc: str = "safe"
    tc_id: int = 0
    timeout_sweep_ms: int = 60_000  # master: sweeps every 60 s
    gc_sweep_ms: int = 300_000  # master: GC every 300 s
    retention_ms: int = 900_000  # master: retention 900 s
    sweep_limit: int = 10_000  # rows per index query of a sweep (a sweep pages through its whole range)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown v5 variant {self.variant!r}; expected one of {', '.join(VARIANTS)}")
        if self.gc not in GC_MODES:
            raise ConfigError(f"unknown v5 GC mode {self.gc!r}; expected one of {', '.join(GC_MODES)}")
        for name in ("timeout_sweep_ms", "gc_sweep_ms", "sweep_limit"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"v5 option {name} must be > 0, got {getattr(self, name)}")
        if self.retention_ms < 0:
            raise ConfigError(f"v5 option retention_ms must be >= 0, got {self.retention_ms}")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> V5Options:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown v5 options {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**kwargs)
