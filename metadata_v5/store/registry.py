"""Metadata stores by URL: the one place that maps a URL to a :class:`MetadataStore` class.

* ``memory://`` — embedded, on sortedcontainers (:mod:`metadata_v5.store.memory`); each call opens a
  new, empty store (use :meth:`MetadataStore.reopen` for another handle on the same data).
* ``redis://host:port[/db][?prefix=P&stream_maxlen=N&reply_spin_us=US]`` — a real redis-server
  (:mod:`metadata_v5.store.redis`).
* any of them with ``emulated=1`` in the query (``memory://?emulated=1``) — the same data seen
  through :class:`~metadata_v5.store.emulated.EmulatedMetadataStore`: Pulsar's ``AbstractMetadataStore``
  fallback, which the standalone (RocksDB) and ZooKeeper run (index scans list the prefix and GET
  every child; sequence keys through a counter record).
* any of them with ``degraded=1`` — :class:`~metadata_v5.store.degraded.DegradedMetadataStore`: the
  PIP text's idea of a ZooKeeper backend (client-maintained index records, re-lists instead of
  range watches), which no release ships.

Settings are parsed once here; adapters never read the environment.
"""

from __future__ import annotations

from typing import Callable
from urllib.parse import parse_qs, parse_qsl, urlencode, urlparse, urlunparse

from engine.backends import resolve, with_query
from engine.errors import ConfigError
from metadata_v5.store.port import MetadataStore

# scheme -> "module:callable(url) -> MetadataStore"; imported lazily so that an embedded run
# does not import the Redis driver.
METADATA_BACKENDS: dict[str, str] = {
    "memory": "metadata_v5.store.memory:MemoryMetadataStore.from_url",
    "redis": "metadata_v5.store.redis:RedisMetadataStore.from_url",
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def backend_for(url: str) -> Callable[[str], MetadataStore]:
    """The constructor ``open_metadata`` would use for ``url`` (``ConfigError`` if unknown)."""
    scheme = urlparse(url).scheme
    if scheme not in METADATA_BACKENDS or "://" not in url:
        raise ConfigError(f"unknown metadata store URL {url!r}; expected one of "
                          f"{', '.join(s + '://' for s in METADATA_BACKENDS)}")
    try:
        factory: Callable[[str], MetadataStore] = resolve(METADATA_BACKENDS[scheme])
        return factory
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"metadata backend {scheme}:// is not available in this build ({exc})") from None


def _flag(url: str, name: str) -> bool:
    values = parse_qs(urlparse(url).query, keep_blank_values=True).get(name)
    if not values:
        return False
    value = values[-1].lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{url}: {name} must be 0 or 1, got {values[-1]!r}")


def _without(url: str, name: str) -> str:
    """``url`` minus the query option ``name`` (a wrapper's, not the backend's)."""
    parsed = urlparse(url)
    query = [(k, v) for k, v in parse_qsl(parsed.query, keep_blank_values=True) if k != name]
    return urlunparse(parsed._replace(query=urlencode(query)))


def is_degraded(url: str) -> bool:
    return _flag(url, "degraded")


def is_emulated(url: str) -> bool:
    return _flag(url, "emulated")


def open_metadata(url: str, *, degraded: bool | None = None) -> MetadataStore:
    """A handle on the metadata store at ``url`` (see the module docstring); ``degraded``
    overrides the URL's ``degraded=`` option. Raises ``ConfigError`` for a bad URL and
    ``BackendUnavailable`` when a real backend cannot be reached."""
    factory = backend_for(url)
    wrap = is_degraded(url) if degraded is None else degraded
    if wrap and is_emulated(url):
        raise ConfigError(f"{url}: emulated=1 and degraded=1 are two different stores; give one")
    emulate = is_emulated(url)
    store = factory(_without(url, "emulated"))
    if emulate:
        from metadata_v5.store.emulated import EmulatedMetadataStore

        return EmulatedMetadataStore(store)
    if wrap:
        from metadata_v5.store.degraded import DegradedMetadataStore

        return DegradedMetadataStore(store)
    return store


def namespaced_metadata_url(url: str, namespace: str) -> str:
    """The metadata URL of a run isolated in ``namespace`` on a shared backend: on ``redis://``
    every key goes under ``<prefix><namespace>:`` (the URL's prefix, default ``txnbench:``), and
    the handles are ``exclusive`` (only this process writes there: reads may be answered locally);
    ``memory://`` is private to its process already."""
    if not namespace or urlparse(url).scheme != "redis":
        return url
    from metadata_v5.store.redis import DEFAULT_PREFIX

    base = parse_qs(urlparse(url).query).get("prefix", [DEFAULT_PREFIX])[0]
    # the run owns its namespace: every writer is a handle of this process (see the redis module)
    return with_query(with_query(url, "prefix", f"{base}{namespace}:"), "exclusive", "1")


def purge_metadata(url: str) -> int:
    """Delete everything under the store at ``url`` (a namespaced Redis URL: the run's keys).
    An in-process store is gone with its handles: nothing to do."""
    if urlparse(url).scheme != "redis":
        return 0
    store = backend_for(url)(url)
    try:
        return store.purge()  # type: ignore[attr-defined, no-any-return]
    finally:
        store.close()
