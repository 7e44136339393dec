"""A run's namespace on shared real backends (issue 20): drawn fresh per run config, recorded in
its dict (hence the manifest), and applied to the Redis key prefix and the Kafka ledger names."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from bench.replay.config import RunConfig
from engine.backends import namespaced_ledger_url
from metadata_v5.store.registry import namespaced_metadata_url


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlparse(url).query)


def test_embedded_runs_have_no_namespace() -> None:
    assert RunConfig().namespace == ""
    assert RunConfig() == RunConfig()  # configs of embedded runs stay equal (determinism)


def test_real_backend_runs_each_get_their_own() -> None:
    a = RunConfig(engine="v5", metadata_url="redis://h:1")
    b = RunConfig(engine="v5", metadata_url="redis://h:1")
    assert a.namespace.startswith("run-") and b.namespace.startswith("run-") and a.namespace != b.namespace
    assert a.as_dict()["namespace"] == a.namespace
    assert a.with_engine("v4").namespace not in ("", a.namespace)  # `--engine both`: two runs
    assert RunConfig(ledger_url="kafka://h:1", namespace="mine").namespace == "mine"


def test_namespaced_urls() -> None:
    assert namespaced_metadata_url("memory://", "run-1") == "memory://"
    assert _query(namespaced_metadata_url("redis://h:1/0", "run-1"))["prefix"] == ["txnbench:run-1:"]
    url = namespaced_metadata_url("redis://h:1/0?prefix=x:&stream_maxlen=5", "run-1")
    assert _query(url) == {"prefix": ["x:run-1:"], "stream_maxlen": ["5"], "exclusive": ["1"]}
    assert urlparse(url).path == "/0"
    assert namespaced_ledger_url("memory://?max_entries_per_ledger=3", "run-1") == "memory://?max_entries_per_ledger=3"
    assert _query(namespaced_ledger_url("kafka://h:1", "run-1"))["namespace"] == ["run-1/"]
    assert _query(namespaced_ledger_url("kafka://h:1?namespace=team/", "run-1"))["namespace"] == ["team/run-1/"]
    assert namespaced_ledger_url("kafka://h:1", "") == "kafka://h:1"
