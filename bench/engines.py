"""Builds the durable stores and the engine of a run from its :class:`RunConfig`. The bench
layer is the only one that knows both engine packages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.backends import namespaced_ledger_url, open_ledgers, purge_ledgers
from engine.ledger import LedgerFactory
from engine.ports import EngineFactory
from metadata_v5.store.registry import namespaced_metadata_url, purge_metadata
from bench.config import RunConfig


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
    if cfg.engine == "v4":
        from legacy_v4.engine import v4_engine

        setup.engine = v4_engine(**cfg.options)
    elif cfg.engine == "v5":
        from metadata_v5.engine import open_v5

        url = namespaced_metadata_url(cfg.metadata_url, cfg.namespace)
        try:
            engine, close = open_v5(url, variant=cfg.v5_variant, gc=cfg.v5_gc, **cfg.options)
        except BaseException:
            setup.close()
            raise
        setup.engine = engine
        if cfg.namespace and not cfg.metadata_url.startswith("memory:"):
            setup.closers.append(lambda: purge_metadata(url))
        setup.closers.append(close)  # closers run in reverse: the store's handle, then the purge
    return setup
