"""A run's configuration, read once from the CLI (or a test) and passed down."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from engine.clock import LatencyModel
from engine.dispatcher import DispatchMode, PollingPolicy
from engine.errors import ConfigError

ENGINES = ("v4", "v5", "none")
V5_VARIANTS = ("watch", "events")
V5_GC = ("pip", "safe")
TIME_MODES = ("virtual", "wall")


@dataclass(frozen=True)
class RunConfig:
    engine: str = "v4"
    ledger_url: str = "memory://"
    metadata_url: str = "memory://"
    dispatch: DispatchMode = DispatchMode.POLLING
    polling: str = "pulsar"  # PollingPolicy preset
    v5_variant: str = "watch"
    v5_gc: str = "safe"
    time_mode: str = "virtual"
    latency: LatencyModel = field(default_factory=LatencyModel)
    drain_ms: int = 70_000  # after the last event: let timeouts (60 s default) and retries play out
    options: dict[str, Any] = field(default_factory=dict)  # engine-specific extras
    # A run on a shared real backend (Redis, Kafka) lives in its own namespace there (key prefix,
    # ledger-name prefix) and is deleted after it (bench.engines); a fresh one is drawn when
    # none is given. Empty on embedded backends, which are private to the run anyway.
    namespace: str = ""

    def __post_init__(self) -> None:
        if not self.namespace and not (self.ledger_url.startswith("memory:")
                                       and self.metadata_url.startswith("memory:")):
            object.__setattr__(self, "namespace", "run-" + uuid.uuid4().hex[:12])
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; expected one of {', '.join(ENGINES)}")
        if self.v5_variant not in V5_VARIANTS:
            raise ConfigError(f"unknown v5 variant {self.v5_variant!r}; expected watch or events")
        if self.v5_gc not in V5_GC:
            raise ConfigError(f"unknown v5 GC {self.v5_gc!r}; expected pip or safe")
        if self.time_mode not in TIME_MODES:
            raise ConfigError(f"unknown time mode {self.time_mode!r}; expected virtual or wall")
        PollingPolicy.preset(self.polling)  # raises ConfigError on a bad name
        if self.drain_ms < 0:
            raise ConfigError(f"drain_ms must be >= 0, got {self.drain_ms}")

    @property
    def label(self) -> str:
        """The engine column of results: ``v4``, ``v5-watch``, ``v5-events`` or ``none``."""
        return f"v5-{self.v5_variant}" if self.engine == "v5" else self.engine

    def polling_policy(self) -> PollingPolicy:
        return PollingPolicy.preset(self.polling)

    def with_engine(self, engine: str) -> RunConfig:
        return replace(self, engine=engine, namespace="")  # another run: another namespace

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dispatch"] = self.dispatch.value
        d["latency"] = dict(self.latency.latencies_us)
        d["label"] = self.label
        return d
