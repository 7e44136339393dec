"""What one backend's calibration measured, shared by the Redis/Kafka measures
(:mod:`bench.calibrate.calibrate`) and the broker's (:mod:`bench.calibrate.calibrate_pulsar`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.clock import PERCENTILES, ResourceSpec
from engine.errors import ConfigError


@dataclass
class Measurement:
    """What one backend measured: distributions per kind, resources, and notes per kind."""

    backend: str
    version: str
    operations: dict[str, dict[str, int]] = field(default_factory=dict)
    resources: dict[str, ResourceSpec] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # kind (or extra measure) -> what it is
    how: dict[str, str] = field(default_factory=dict)  # measured kind -> "metric" | "probe" (default "probe")
    unmeasurable: dict[str, str] = field(default_factory=dict)  # kind -> why this backend cannot measure it
    extra: dict[str, Any] = field(default_factory=dict)  # measured but billed by no kind (e.g. delete)


def percentiles(samples_us: Sequence[int]) -> dict[str, int]:
    """p0/p50/p90/p99/p999/max of ``samples_us`` by nearest rank (no interpolation: every value
    is one that was seen)."""
    if not samples_us:
        raise ConfigError("calibrate: no samples measured")
    s = sorted(samples_us)
    n = len(s)
    return {name: s[min(n - 1, max(0, math.ceil(round(q * n, 6)) - 1))] for name, q in PERCENTILES.items()}
