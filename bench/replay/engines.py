"""Builds the durable stores and the engine of a run from its :class:`RunConfig`; the engine
is opened by its registered spec (:mod:`bench.replay.registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.backends import namespaced_ledger_url, open_ledgers, purge_ledgers
from engine.ledger import LedgerFactory
from engine.ports import EngineFactory
from bench.replay import registry
from bench.replay.config import RunConfig


@dataclass
class Setup:
    """Durable stores of one run (they survive broker crashes) and the engine to build per broker."""

    ledgers: LedgerFactory
    engine: EngineFactory | None
    closers: list[Callable[[], object]] = field(default_factory=list)

    def close(self) -> None:
        """Run every closer (the last added first) even if one fails, then close the ledgers;
        the first failure is raised after."""
        error: BaseException | None = None
        for close in reversed(self.closers):
            try:
                close()
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the rest ran
                error = error or exc
        self.closers.clear()
        self.ledgers.close()
        if error is not None:
            raise error


def build(cfg: RunConfig) -> Setup:
    """The run's stores, in its namespace on shared real backends; :meth:`Setup.close` deletes
    what the run wrote there (a second run on the same Redis or Kafka must not see it)."""
    ledgers = open_ledgers(namespaced_ledger_url(cfg.ledger_url, cfg.namespace))
    setup = Setup(ledgers, None)
    if cfg.namespace and not cfg.ledger_url.startswith("memory:"):
        setup.closers.append(lambda: purge_ledgers(ledgers))
    try:
        opened = registry.spec(cfg.engine).open(cfg.metadata_url, cfg.namespace, cfg.options)
    except BaseException:
        setup.close()
        raise
    setup.engine = opened.factory
    setup.closers.extend(opened.closers)  # closers run in reverse: e.g. the store's handle, then its purge
    return setup
