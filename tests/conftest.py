"""Shared test fixtures: real-service URLs and the rule that a required service must be there.

The README's test command starts redis-server (and, later, Kafka), exports their URLs and sets
``TXNBENCH_REQUIRE``. Locally, without those, service tests skip; when a service is required but
missing or unreachable they *fail*, so CI can never pass by comparing an implementation with itself.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import urlparse

import pytest


def _required() -> set[str]:
    return {s.strip() for s in os.environ.get("TXNBENCH_REQUIRE", "").split(",") if s.strip()}


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 0), timeout=2):
            return True
    except OSError:
        return False


def service_url(name: str) -> str:
    """URL of the real service ``name`` (``redis``, ``kafka``, ``pulsar``), or skip/fail as the run demands."""
    url = os.environ.get(f"TXNBENCH_{name.upper()}_URL", "")
    required = name in _required()
    if not url:
        if required:
            pytest.fail(f"{name} is required (TXNBENCH_REQUIRE) but TXNBENCH_{name.upper()}_URL is not set")
        pytest.skip(f"no {name}: set TXNBENCH_{name.upper()}_URL to run")
    if not _reachable(url):
        if required:
            pytest.fail(f"{name} is required but {url} is unreachable")
        pytest.skip(f"{name} at {url} is unreachable")
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    return service_url("redis")


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of the test's own on the Redis server, purged after it."""
    from metadata_v5.store.redis import RedisMetadataStore

    prefix = f"t{uuid.uuid4().hex[:12]}:"
    yield prefix
    purger = RedisMetadataStore(redis_url, prefix=prefix)
    purger.purge()
    purger.close()


@pytest.fixture(scope="session")
def kafka_url() -> str:
    return service_url("kafka")


@dataclass(frozen=True)
class PulsarBroker:
    """The broker ``scripts/pulsar.sh start DIR`` runs: its URLs and DIR (for ``restart``)."""

    url: str
    admin_url: str
    dir: str | None


@pytest.fixture(scope="session")
def pulsar() -> PulsarBroker:
    """The real Pulsar 5 broker (``TXNBENCH_PULSAR_URL`` / ``_ADMIN_URL`` / ``_DIR``), or skip/fail."""
    url = service_url("pulsar")
    admin = os.environ.get("TXNBENCH_PULSAR_ADMIN_URL", "")
    if not admin or not _reachable(admin):
        if "pulsar" in _required():
            pytest.fail(f"pulsar is required but its admin URL {admin or '(TXNBENCH_PULSAR_ADMIN_URL unset)'} is unreachable")
        pytest.skip("no pulsar admin: set TXNBENCH_PULSAR_ADMIN_URL to run")
    return PulsarBroker(url, admin, os.environ.get("TXNBENCH_PULSAR_DIR") or None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's loadgroup reads the marks into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``scripts/test`` runs two pytest-xdist workers (``--dist loadgroup``); tests that share one
    heavy thing stay on one worker: the Pulsar broker (and the client's compile cache), and Spark's
    JVMs (a 2 GB driver each, which on 2 cores only slow each other down)."""
    for item in items:
        for name in ("pulsar", "spark"):
            if item.get_closest_marker(name):
                item.add_marker(pytest.mark.xdist_group(name))
