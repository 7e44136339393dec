"""Ledger backends by URL: the one place that maps ``memory://`` and ``kafka://host:port`` to a
:class:`~engine.ledger.LedgerFactory` class. Settings are parsed once here and passed in."""

from __future__ import annotations

import importlib
from typing import Any, Callable
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

from engine.errors import ConfigError
from engine.ledger import LedgerFactory

# scheme -> "module:callable(url) -> LedgerFactory"; imported lazily so that an embedded run
# does not import a Kafka driver.
LEDGER_BACKENDS: dict[str, str] = {
    "memory": "engine.memledger:MemoryLedgerFactory.from_url",
    "kafka": "engine.kafkaledger:KafkaLedgerFactory.from_url",
}


def resolve(target: str) -> Callable[[str], Any]:
    """Import ``"module:attr.attr"`` lazily (backend registries map URL schemes to these)."""
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def open_ledgers(url: str) -> LedgerFactory:
    """A ledger factory for ``url`` (``memory://[?max_entries_per_ledger=N]``, ``kafka://host:port``)."""
    scheme = urlparse(url).scheme
    if scheme not in LEDGER_BACKENDS or "://" not in url:
        raise ConfigError(f"unknown ledger URL {url!r}; expected one of {', '.join(s + '://' for s in LEDGER_BACKENDS)}")
    try:
        factory: Callable[[str], LedgerFactory] = resolve(LEDGER_BACKENDS[scheme])
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"ledger backend {scheme}:// is not available in this build ({exc})") from None
    return factory(url)


def query_int(url: str, name: str, default: int) -> int:
    values = parse_qs(urlparse(url).query).get(name)
    if not values:
        return default
    try:
        return int(values[0])
    except ValueError:
        raise ConfigError(f"{url}: {name} must be an integer, got {values[0]!r}") from None


def with_query(url: str, name: str, value: str) -> str:
    """``url`` with query option ``name`` set to ``value`` (replacing any earlier one)."""
    parsed = urlparse(url)
    query = parse_qs(parsed.query, keep_blank_values=True)
    query[name] = [value]
    return urlunparse(parsed._replace(query=urlencode(query, doseq=True)))


def namespaced_ledger_url(url: str, namespace: str) -> str:
    """The ledger URL of a run isolated in ``namespace`` on a shared backend: on ``kafka://``
    its ledger names (hence topics, registry and cursor keys) start with ``namespace/`` after
    any namespace the URL already names; ``memory://`` is private to its process already."""
    if not namespace or urlparse(url).scheme != "kafka":
        return url
    base = parse_qs(urlparse(url).query).get("namespace", [""])[0]
    return with_query(url, "namespace", f"{base}{namespace}/")


def purge_ledgers(ledgers: LedgerFactory) -> int:
    """Delete every ledger the factory sees (with a namespaced factory: the run's own), with the
    factory's own bulk ``purge()`` where it has one (``kafka://``). Returns how many."""
    bulk = getattr(ledgers, "purge", None)
    if bulk is not None:
        return int(bulk())
    names = ledgers.names("")
    for name in names:
        ledgers.delete(name)
    return len(names)
