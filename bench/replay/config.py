"""A run's configuration, read once from the CLI (or a test) and passed down."""

from __future__ import annotations

import enum
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bench.replay import registry
from engine.clock import LatencyModel
from engine.dispatcher import DispatchMode, PollingPolicy, SubscriptionType
from engine.errors import ConfigError
from engine.profile import LatencyProfile

# The latency profile (datasets/latency/NAME.json) the CLI's runs use without --latency-profile.
DEFAULT_LATENCY_PROFILE = "pulsar-standalone-5.0.0-M1"
# The standalone keeps its metadata in RocksDB, which has no native index scan or sequence keys:
# AbstractMetadataStore emulates them (pulsar-metadata M1 L624-660, L725-765); so does this store.
# A profile calibrated on a standalone (its resources) describes v5 on this store.
EMULATED_STORE = "memory://?emulated=1"
TIME_MODES = ("virtual", "wall")
PACINGS = ("trace", "asap")
SUB_TYPES = tuple(t.value for t in SubscriptionType)


@dataclass(frozen=True)
class RunConfig:
    engine: str = registry.DEFAULT  # a name in bench.replay.registry.ENGINES
    ledger_url: str = "memory://"
    metadata_url: str = "memory://"
    dispatch: DispatchMode = DispatchMode.POLLING
    polling: str = "pulsar"  # PollingPolicy preset
    time_mode: str = "virtual"
    latency: LatencyModel = field(default_factory=LatencyModel)
    # where ``latency`` came from, for the manifest (None: the built-in constants); ``latency`` is
    # this profile's model with the run's seed and --latency overrides (bench.cli)
    latency_profile: LatencyProfile | None = None
    drain_ms: int = 70_000  # after the last event: let timeouts (60 s default) and retries play out
    # then, while messages are undelivered or committed txns not visible, keep draining up to this
    # long after the last event (None: drain_ms, no extension; bench.replay.replay.Replayer.steps)
    drain_max_ms: int | None = None
    # the engine's own settings (its spec's options class), a design's variant among them;
    # typed once here (an enum for a variant given by name)
    options: dict[str, Any] = field(default_factory=dict)
    # A run on a shared real backend (Redis, Kafka) lives in its own namespace there (key prefix,
    # ledger-name prefix) and is deleted after it (bench.replay.engines); a fresh one is drawn when
    # none is given. Empty on embedded backends, which are private to the run anyway.
    namespace: str = ""
    # "asap": the rows go out one microsecond apart in the trace's order, as fast as the model can
    # take them under the client's in-flight bound (virtual time only): the broker target's
    # --pacing asap, for throughput at saturation
    pacing: str = "trace"
    # with "asap": how many new_txn/publish/commit/abort requests may be unanswered at once, as the
    # trace client bounds them (jvm TraceRunner's semaphore, --max-in-flight, default 1,000): a row
    # that would exceed it waits for an answer (bench.replay.replay.Replayer._slot); None: no bound
    asap_in_flight: int | None = 1_000
    # (topic, subscription, type): the type a subscription the trace leaves untyped takes, as the
    # client the run stands for makes it (validate: v5's trace client on the V5 SDK,
    # bench.pulsar.rows.v5_sdk_sub_types); any other untyped subscription is Failover
    sub_types: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.namespace and not (self.ledger_url.startswith("memory:")
                                       and self.metadata_url.startswith("memory:")):
            object.__setattr__(self, "namespace", "run-" + uuid.uuid4().hex[:12])
        object.__setattr__(self, "options", registry.spec(self.engine).normalize(self.options))
        if self.time_mode not in TIME_MODES:
            raise ConfigError(f"unknown time mode {self.time_mode!r}; expected virtual or wall")
        PollingPolicy.preset(self.polling)  # raises ConfigError on a bad name
        if self.pacing not in PACINGS:
            raise ConfigError(f"unknown pacing {self.pacing!r}; expected {' or '.join(PACINGS)}")
        if self.pacing == "asap" and self.time_mode != "virtual":
            raise ConfigError("pacing asap is a virtual-time replay (the rows one microsecond apart)")
        if self.asap_in_flight is not None and self.asap_in_flight < 1:
            raise ConfigError(f"asap_in_flight must be >= 1 (or None: no bound), got {self.asap_in_flight}")
        for topic, sub, sub_type in self.sub_types:
            if sub_type not in SUB_TYPES:
                raise ConfigError(f"sub_types: {topic} {sub}: unknown subscription type {sub_type!r}; "
                                  f"expected one of {', '.join(SUB_TYPES)}")
        if self.drain_ms < 0:
            raise ConfigError(f"drain_ms must be >= 0, got {self.drain_ms}")
        if self.drain_max_ms is not None and self.drain_max_ms < self.drain_ms:
            raise ConfigError(f"drain_max_ms ({self.drain_max_ms}) must be >= drain_ms ({self.drain_ms})")

    @property
    def label(self) -> str:
        """The engine column of results, one per registered variant (``bench.replay.registry.variants``)."""
        return registry.spec(self.engine).label(self.options)

    @property
    def design(self) -> str:
        """Which design the column is, for reports: the released one or a model of another."""
        return registry.spec(self.engine).describe(self.options)

    def polling_policy(self) -> PollingPolicy:
        return PollingPolicy.preset(self.polling)

    def with_engine(self, engine: str, options: dict[str, Any] | None = None) -> RunConfig:
        """Another run (another namespace) of ``engine``, with ``options`` (default: none)."""
        return replace(self, engine=engine, options=options or {}, namespace="")

    def with_history(self, history: int, ops: int = 1, listeners: int = 0) -> RunConfig:
        """This run with v5's store starting as one that has run ``history`` txns of ``ops`` op
        records each (``V5Options.history``, ``history_ops``: a broker's, so that its scans walk
        what the broker's walked) and holds ``listeners`` watches of topics loaded before
        (``V5Options.history_listeners``); another design's run, or no history, as it is."""
        if self.engine != "v5" or not (history or listeners):
            return self
        return replace(self, options={**self.options, **({"history": history} if history else {}),
                                      **({"history_ops": ops} if history and ops != 1 else {}),
                                      **({"history_listeners": listeners} if listeners else {})})

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dispatch"] = self.dispatch.value
        d["options"] = {k: v.value if isinstance(v, enum.Enum) else v for k, v in self.options.items()}
        d["design"] = self.design
        d["latency"] = dict(self.latency.latencies_us)
        d["latency_profile"] = (self.latency_profile or LatencyProfile.constants()).record(self.latency)
        d["label"] = self.label
        d["sub_types"] = [list(t) for t in self.sub_types]  # as JSON reads it back
        return d
