"""The engine registry: a new engine is its spec plus one registry entry, and everything that
lists engines (config, build, CLI, report rows, recovery kinds) picks it up."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import pytest

from bench.replay import registry
from bench.replay.config import RunConfig
from bench.replay.engines import build
from engine.errors import ConfigError
from engine.registry import EngineSpec, Opened, ReportRow, RunVariant
from engine.txn_disabled import NoOptions


def _toy(closed: list[str]) -> EngineSpec:

    def open_(metadata_url: str, namespace: str, options: Mapping[str, Any]) -> Opened:
        return Opened(None, (lambda: closed.append("store"),))

    return EngineSpec(name="toy", transactional=True, options_class=NoOptions, open=open_,
                      label=lambda o: "toy-1", describe=lambda o: "a toy design", variants=(RunVariant("toy-1", {}),),
                      option_help="a toy setting; repeatable",
                      report_rows=(ReportRow("Writes", "toy writes (toy)", "toy.writes", "writes", True),),
                      recovery_kinds={"tb-toy": "tb"})


CLOSED: list[str] = []


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> EngineSpec:
    CLOSED.clear()
    spec = _toy(CLOSED)
    monkeypatch.setitem(registry.ENGINES, spec.name, spec)
    return spec


def test_every_registered_variant_has_its_own_label_and_design_text() -> None:
    configs = registry.variant_configs()
    assert len(configs) == sum(len(s.variants) for s in registry.ENGINES.values() if s.transactional)
    for label, fields in configs.items():
        cfg = RunConfig(**fields)
        assert cfg.label == label and cfg.design
    assert registry.designs() == [n for n, s in registry.ENGINES.items() if s.transactional]


def test_a_registered_engine_is_run_listed_and_offered_by_the_cli(toy: EngineSpec) -> None:
    from bench.cli import build_parser

    cfg = RunConfig(engine="toy")
    assert (cfg.label, cfg.design) == ("toy-1", "a toy design")
    setup = build(cfg)
    assert setup.engine is None and CLOSED == []
    setup.close()
    assert CLOSED == ["store"]  # the spec's closers ran
    assert "toy" in registry.designs() and "toy-1" in registry.variant_configs()
    assert registry.kind_of("tb-toy:persistent://a/b/c") == "tb"
    args = build_parser().parse_args(["replay", "--trace", "t", "--out", "o", "--engine", "toy", "--toy-option", "x=1"])
    assert args.engine == "toy" and args.toy_option == ["x=1"]


def test_unknown_engine_and_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown engine 'nope'; expected one of"):
        RunConfig(engine="nope")
    name, variant = registry.variants()[-1]
    bad = dataclasses.replace(variant, options={"no_such_option": 1}).options
    with pytest.raises(ConfigError):
        RunConfig(engine=name, options=dict(bad))
