"""What an engine package tells the rest of txnbench about itself: one :class:`EngineSpec`.

Each engine package exports one spec (``legacy_v4.spec.SPEC``, ``metadata_v5.spec.SPEC``,
:data:`engine.txn_disabled.SPEC`); :mod:`bench.replay.registry` lists them, and the CLI, the reports,
the scenarios, the benchmarks, the streaming replay and the conformance suite loop over that list
instead of naming an engine. This module only defines the contract: ``engine`` imports neither
engine package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple

from engine.errors import ConfigError
from engine.ports import EngineFactory


class ReportRow(NamedTuple):
    """A design-specific row of ``txnbench report`` (a count only this design has a notion of);
    the report shows it in ``section`` beside the other designs' rows."""

    section: str
    metric: str
    key: str  # the counts.json key
    unit: str
    lower_better: bool
    design_specific: bool = True  # no verdict when another design has none of it (a zero)


@dataclass(frozen=True)
class CliFlag:
    """A run option the CLI offers as its own flag (``--v5-variant``), stored under ``option``
    in the engine's options."""

    flag: str
    option: str
    choices: tuple[str, ...]
    default: str
    help: str


@dataclass(frozen=True)
class Opened:
    """An engine opened for one run: the factory a broker builds its engine with (None: no
    transactions) and what to run, last first, when the run ends (close handles, purge data)."""

    factory: EngineFactory | None
    closers: tuple[Callable[[], object], ...] = ()


@dataclass(frozen=True)
class RunVariant:
    """One column a comparison can show: a label and the options that select it."""

    label: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class TestCombo:
    """A (design x backend) combination of the conformance suite. ``open`` is given the URLs of
    the real services named in ``needs`` (``{"redis": "redis://..."}``) and opens the durable
    part of the engine (a store survives broker crashes); ``ledgers`` is the ledger backend
    (``memory`` or ``kafka``)."""

    name: str
    open: Callable[[Mapping[str, str]], Opened]
    needs: tuple[str, ...] = ()
    ledgers: str = "memory"
    polling_only: bool = False  # a backend orthogonal to dispatching: one mode keeps the suite fast
    crash_safe: bool = True  # False: breaks the crash tests' promises by design (asserted as findings)


@dataclass(frozen=True)
class EngineSpec:
    """Everything txnbench needs to know about one engine design."""

    name: str  # ``--engine`` value and RunConfig.engine
    transactional: bool  # False: transactions disabled (not a design ``--engine both`` runs)
    options_class: Any  # frozen dataclass with ``from_kwargs(**options)`` raising ConfigError
    # opens the engine of one run: (metadata store URL, the run's namespace on shared backends,
    # the engine's options) -> Opened
    open: Callable[[str, str, Mapping[str, Any]], Opened]
    label: Callable[[Mapping[str, Any]], str]  # results column of a run with these options
    describe: Callable[[Mapping[str, Any]], str]  # which design that column is, for reports
    variants: tuple[RunVariant, ...]  # every column this design can show, the default first
    cli_flags: tuple[CliFlag, ...] = ()
    option_help: str = ""  # help of ``--<name>-option KEY=VALUE`` (none when empty)
    report_rows: tuple[ReportRow, ...] = ()
    recovery_kinds: Mapping[str, str] = field(default_factory=dict)  # component prefix -> tb / pending-ack / tc
    uses_metadata_store: bool = False  # its state is on the metadata URL as well as the ledgers
    # Pulsar's metric family (without _total) -> the count that means the same (bench.replay.openmetrics)
    metric_keys: Mapping[str, str] = field(default_factory=dict)
    test_combos: Callable[[], list[TestCombo]] = lambda: []

    def normalize(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` checked by the options class (a bad one is a ConfigError), values typed
        as the class types them (an enum for a variant given as its name), with the options that
        select a column (those with a CLI flag: a variant, a GC mode) always present."""
        typed = self.options_class.from_kwargs(**options)
        keys = [f.option for f in self.cli_flags] + [k for k in options if k not in {f.option for f in self.cli_flags}]
        return {k: getattr(typed, k) for k in keys}


def lookup(specs: Mapping[str, EngineSpec], name: str) -> EngineSpec:
    try:
        return specs[name]
    except KeyError:
        raise ConfigError(f"unknown engine {name!r}; expected one of {', '.join(specs)}") from None


def recovery_kind(specs: Mapping[str, EngineSpec], component: str) -> str:
    """A recovery component's kind, the same for every design: ``tb``, ``pending-ack`` or
    ``tc`` (``tb-v5:persistent://...`` -> ``tb``); an unregistered prefix is its own kind."""
    prefix = component.split(":", 1)[0]
    for spec in specs.values():
        if prefix in spec.recovery_kinds:
            return spec.recovery_kinds[prefix]
    return prefix
