"""The registered engines: one line per engine package (:class:`engine.registry.EngineSpec`).

Everything in ``bench`` (and the conformance suite) that runs, lists or reports engines loops over
:data:`ENGINES`; to add an engine, write its package's ``spec.py`` and add it here.
"""

from __future__ import annotations

from typing import Any, Mapping

from engine import txn_disabled
from engine.registry import EngineSpec, RunVariant, lookup, recovery_kind
from legacy_v4 import spec as v4_spec
from metadata_v5 import spec as v5_spec

ENGINES: dict[str, EngineSpec] = {s.name: s for s in (v4_spec.SPEC, v5_spec.SPEC, txn_disabled.SPEC)}

DEFAULT = next(iter(ENGINES))  # RunConfig's engine when none is given


def spec(name: str) -> EngineSpec:
    """The spec registered as ``name`` (a ConfigError naming the known ones otherwise)."""
    return lookup(ENGINES, name)


def designs() -> list[str]:
    """The transactional designs: what ``--engine both`` runs."""
    return [name for name, s in ENGINES.items() if s.transactional]


def variants(*, transactional: bool = True) -> list[tuple[str, RunVariant]]:
    """Every column the registered designs can show, as (engine name, variant), in registry order."""
    return [(name, v) for name, s in ENGINES.items() if s.transactional or not transactional for v in s.variants]


def variant_configs() -> dict[str, dict[str, Any]]:
    """label -> the RunConfig fields that select that column (``engine=..., options=...``)."""
    return {v.label: {"engine": name, "options": dict(v.options)} for name, v in variants()}


def kind_of(component: str) -> str:
    """A RecoveryStats component's kind (``tb``, ``pending-ack``, ``tc``) whatever the design."""
    return recovery_kind(ENGINES, component)


def option_of(options: Mapping[str, Any], engine: str, key: str) -> Any:
    """An engine option's value with the options class's default filled in."""
    return getattr(spec(engine).options_class, key, None) if key not in options else options[key]


def cli_args(engine: str, variant: RunVariant) -> list[str]:
    """The ``txnbench replay`` arguments that run ``variant`` of ``engine``."""
    args = ["--engine", engine]
    for flag in spec(engine).cli_flags:
        if flag.option in variant.options:
            args += [flag.flag, str(getattr(variant.options[flag.option], "value", variant.options[flag.option]))]
    return args
