"""A store that wraps another (the emulated and degraded modes): records are read through to the
wrapped store, with the adapters' own records (under ``RESERVED_PREFIX``) kept out of listings."""

from __future__ import annotations

import builtins
from typing import Callable, Sequence

from metadata_v5.store.port import RESERVED_PREFIX, MetadataStore, Op, OpResult, Record


class WrappedStore(MetadataStore):
    inner: MetadataStore

    def get(self, key: str) -> Record | None:
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> builtins.list[Record | None]:
        return self.inner.get_many(keys)

    def list(self, prefix: str, *, limit: int | None = None) -> builtins.list[Record]:
        if RESERVED_PREFIX.startswith(prefix) or prefix.startswith(RESERVED_PREFIX):
            out = [r for r in self.inner.list(prefix) if not r.key.startswith(RESERVED_PREFIX)]
            return out if limit is None else out[:limit]
        return self.inner.list(prefix, limit=limit)

    def raw_batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        return self.inner.raw_batch(ops)

    def attach(self, call_later: Callable[[int, Callable[[], None]], object]) -> None:
        self.inner.attach(call_later)  # a remote inner store polls its own change stream
