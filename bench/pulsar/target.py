"""Where the broker is and how to pace it: the ``--target`` settings, read once and passed down."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from engine.errors import BackendUnavailable, ConfigError

PACINGS = ("trace", "asap")
# The client's drain after the last row: at most this long, ended by a quiet spell of half of it
# (2-5 s). On this 2-core machine under load, v5 answered commits seconds late (end-txn p50 5 s)
# and its last committed messages arrived 10 s after the rows were issued, past a 10 s drain.
DRAIN_MS = 30_000
DESIGNS = ("v4", "v5")
# Broker settings that decide what a run measures (names of ServiceConfiguration fields).
CONFIG_KEYS = (
    "transactionCoordinatorEnabled", "transactionCoordinatorScalableTopicsEnabled",
    "transactionCoordinatorScalableTopicsParallelism", "scalableTopicsEnabled", "scalableTopicAutoScaleEnabled",
    "transactionBufferSnapshotMaxTransactionCount", "transactionBufferSnapshotMinTimeInMillis",
    "transactionBufferSegmentedSnapshotEnabled", "transactionPendingAckLogIndexMinLag",
    "transactionLogBatchedWriteEnabled", "transactionPendingAckBatchedWriteEnabled",
    "transactionBufferClientMaxConcurrentRequests", "transactionMetadataStoreProviderClassName",
    "transactionBufferProviderClassName", "transactionPendingAckStoreProviderClassName",
    "metadataStoreUrl", "configurationMetadataStoreUrl", "managedLedgerDefaultEnsembleSize",
    "managedLedgerMaxEntriesPerLedger", "brokerDeleteInactiveTopicsEnabled", "systemTopicEnabled",
    "topicLevelPoliciesEnabled", "dispatcherMaxReadBatchSize", "maxPendingPublishRequestsPerConnection",
)


@dataclass(frozen=True)
class PulsarTarget:
    service_url: str  # pulsar://HOST:PORT
    host: str
    port: int
    admin_url: str  # http://HOST:PORT, no trailing slash
    pacing: str = "trace"
    pulsar_dir: Path | None = None  # the broker's DIR when scripts/pulsar.sh started it: it can be restarted
    drain_ms: int = 30_000  # the longest the client waits for deliveries after the last row
    quiet_ms: int = 5_000  # ... or until none came for this long
    # the trace client first runs the trace's rows in a namespace of their own, unmeasured, so that
    # its JIT has compiled its paths before the measured rows (bench.pulsar.run: the warm-up)
    client_warm_up: bool = False

    @property
    def restartable(self) -> bool:
        return self.pulsar_dir is not None


def parse_target(url: str, admin_url: str | None = None, pacing: str = "trace",
                 pulsar_dir: str | Path | None = None, drain_ms: int | None = None) -> PulsarTarget:
    """``--target pulsar://HOST:PORT`` with its ``--admin-url`` (default
    ``$TXNBENCH_PULSAR_ADMIN_URL``, else ``http://HOST:8080``) and ``--pulsar-dir`` (default
    ``$TXNBENCH_PULSAR_DIR``). Bad values are one ConfigError naming the option."""
    parsed = urlparse(url)
    if parsed.scheme != "pulsar" or not parsed.hostname or parsed.path not in ("", "/"):
        raise ConfigError(f"--target {url!r}: expected pulsar://HOST:PORT")
    try:
        port = parsed.port or 6650
    except ValueError:
        raise ConfigError(f"--target {url!r}: bad port") from None
    if pacing not in PACINGS:
        raise ConfigError(f"--pacing {pacing!r}: expected one of {', '.join(PACINGS)}")
    admin = admin_url or os.environ.get("TXNBENCH_PULSAR_ADMIN_URL") or f"http://{parsed.hostname}:8080"
    ap = urlparse(admin)
    if ap.scheme not in ("http", "https") or not ap.hostname:
        raise ConfigError(f"--admin-url {admin!r}: expected http://HOST:PORT")
    directory = pulsar_dir if pulsar_dir is not None else os.environ.get("TXNBENCH_PULSAR_DIR") or None
    if drain_ms is not None and drain_ms < 0:
        raise ConfigError(f"--drain-ms {drain_ms}: must not be negative")
    return PulsarTarget(
        service_url=f"pulsar://{parsed.hostname}:{port}", host=parsed.hostname, port=port,
        admin_url=admin.rstrip("/"), pacing=pacing,
        pulsar_dir=Path(directory) if directory else None,
        drain_ms=DRAIN_MS if drain_ms is None else drain_ms,
        quiet_ms=max(2_000, min(5_000, (DRAIN_MS if drain_ms is None else drain_ms) // 2)),
    )


def http_get(target: PulsarTarget, path: str, timeout: float = 5.0) -> bytes:
    """GET ``admin_url + path``; an unreachable broker or an error status is BackendUnavailable."""
    url = target.admin_url + path
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - the user's admin URL
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as exc:
        raise BackendUnavailable(f"Pulsar admin {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BackendUnavailable(f"Pulsar admin {url} is unreachable ({reason})") from exc


def http_json(target: PulsarTarget, path: str, timeout: float = 5.0) -> Any:
    body = http_get(target, path, timeout)
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise BackendUnavailable(f"Pulsar admin {target.admin_url + path}: not JSON ({exc})") from exc


def probe(target: PulsarTarget) -> dict[str, Any]:
    """Check that the broker answers on both ports (before anything is written) and return what
    the manifest records: its version and the settings of :data:`CONFIG_KEYS`."""
    try:
        with socket.create_connection((target.host, target.port), timeout=3):
            pass
    except OSError as exc:
        raise BackendUnavailable(f"Pulsar broker {target.service_url} is unreachable ({exc})") from exc
    http_get(target, "/admin/v2/brokers/health")
    version = http_get(target, "/admin/v2/brokers/version").decode().strip().strip('"')
    try:
        runtime = http_json(target, "/admin/v2/brokers/configuration/runtime")
    except BackendUnavailable:
        runtime = {}
    config = {k: runtime[k] for k in CONFIG_KEYS if k in runtime}
    return {"version": version, "config": config}
