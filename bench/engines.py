"""Builds the durable stores and the engine of a run from its :class:`RunConfig`. The bench
layer is the only one that knows both engine packages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.backends import open_ledgers
from engine.ledger import LedgerFactory
from engine.ports import EngineFactory
from bench.config import RunConfig


@dataclass
class Setup:
    """Durable stores of one run (they survive broker crashes) and the engine to build per broker."""

    ledgers: LedgerFactory
    engine: EngineFactory | None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.ledgers.close()


def build(cfg: RunConfig) -> Setup:
    ledgers = open_ledgers(cfg.ledger_url)
    if cfg.engine == "none":
        return Setup(ledgers, None)
    if cfg.engine == "v4":
        from legacy_v4.engine import v4_engine

        return Setup(ledgers, v4_engine(**cfg.options))
    from metadata_v5.engine import open_v5

    engine, close = open_v5(cfg.metadata_url, variant=cfg.v5_variant, gc=cfg.v5_gc, **cfg.options)
    return Setup(ledgers, engine, [close])
