"""A run's configuration, read once from the CLI (or a test) and passed down."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from engine.clock import LatencyModel
from engine.dispatcher import DispatchMode, PollingPolicy
from engine.errors import ConfigError
from engine.profile import LatencyProfile
from metadata_v5.options import GcMode, Variant

ENGINES = ("v4", "v5", "none")
# The latency profile (datasets/latency/NAME.json) the CLI's runs use without --latency-profile.
DEFAULT_LATENCY_PROFILE = "constants"
TIME_MODES = ("virtual", "wall")


@dataclass(frozen=True)
class RunConfig:
    engine: str = "v4"
    ledger_url: str = "memory://"
    metadata_url: str = "memory://"
    dispatch: DispatchMode = DispatchMode.POLLING
    polling: str = "pulsar"  # PollingPolicy preset
    v5_variant: Variant = Variant.SHIPPED  # what Pulsar 5.0.1 ships
    v5_gc: GcMode = GcMode.REPAIR
    time_mode: str = "virtual"
    latency: LatencyModel = field(default_factory=LatencyModel)
    # where ``latency`` came from, for the manifest (None: the built-in constants); ``latency`` is
    # this profile's model with the run's seed and --latency overrides (bench.cli)
    latency_profile: LatencyProfile | None = None
    drain_ms: int = 70_000  # after the last event: let timeouts (60 s default) and retries play out
    # then, while messages are undelivered or committed txns not visible, keep draining up to this
    # long after the last event (None: drain_ms, no extension; bench.replay.Replayer.steps)
    drain_max_ms: int | None = None
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
        for name, cls in (("v5_variant", Variant), ("v5_gc", GcMode)):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, cls(value))
            except ValueError:
                raise ConfigError(f"unknown {name.replace('_', ' ')} {value!r}; expected one of "
                                  f"{', '.join(m.value for m in cls)}") from None
        if self.time_mode not in TIME_MODES:
            raise ConfigError(f"unknown time mode {self.time_mode!r}; expected virtual or wall")
        PollingPolicy.preset(self.polling)  # raises ConfigError on a bad name
        if self.drain_ms < 0:
            raise ConfigError(f"drain_ms must be >= 0, got {self.drain_ms}")
        if self.drain_max_ms is not None and self.drain_max_ms < self.drain_ms:
            raise ConfigError(f"drain_max_ms ({self.drain_max_ms}) must be >= drain_ms ({self.drain_ms})")

    @property
    def label(self) -> str:
        """The engine column of results: ``v4``, ``v5-shipped``, ``v5-pip``, ``v5-state-events``
        or ``none``."""
        return f"v5-{self.v5_variant.value}" if self.engine == "v5" else self.engine

    @property
    def design(self) -> str:
        """Which design the column is, for reports: the released one or a model of another."""
        if self.engine == "v4":
            return "v4 as Pulsar 4.x/5.0.1 ships it (persistent:// topics)"
        if self.engine != "v5":
            return "transactions disabled"
        return {Variant.SHIPPED: "v5 as Pulsar 5.0.1 ships it (the released design)",
                Variant.PIP: "v5 as PIP-473's text describes it (header watches; not in any release)",
                Variant.STATE_EVENTS: "v5 with state-carrying events, no reconcile (an ablation; not in any release)",
                }[self.v5_variant]

    def polling_policy(self) -> PollingPolicy:
        return PollingPolicy.preset(self.polling)

    def with_engine(self, engine: str) -> RunConfig:
        return replace(self, engine=engine, namespace="")  # another run: another namespace

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dispatch"] = self.dispatch.value
        d["v5_variant"] = self.v5_variant.value
        d["v5_gc"] = self.v5_gc.value
        d["design"] = self.design
        d["latency"] = dict(self.latency.latencies_us)
        d["latency_profile"] = (self.latency_profile or LatencyProfile.constants()).record(self.latency)
        d["label"] = self.label
        return d
