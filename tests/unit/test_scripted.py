"""The scripted client itself: a crash without reconnecting, and bad scripts."""

from __future__ import annotations

import pytest

from engine.dispatcher import DispatchMode
from engine.errors import ConfigError
from engine.scripted import CrashAt, play
from legacy_v4 import v4_engine
from tests.harness import Combo, System, memory_durable

T = "persistent://public/default/sc"


def _system() -> System:
    return System(Combo("v4", True, memory_durable, lambda d: v4_engine()), DispatchMode.NOTIFY)


def test_a_crash_without_reconnecting_delivers_nothing_until_the_consumer_is_back() -> None:
    s = _system()
    s.subscribe(T, "sub")
    s.publish(T, "m0")
    s.run(100_000)
    s.ack("sub", "m0")
    s.crash(reconnect=False)
    s.publish(T, "m1")
    s.run(1_000_000)
    assert s.msgs(T, "sub") == ["m0"] and s.crashes == 1
    s.reconnect()
    s.run(100_000)
    assert s.msgs(T, "sub") == ["m0", "m1"]  # m0's ack was saved before the crash


def test_a_bad_script_step_or_crash_point_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="script step 1: unknown op 'publish'"):
        play(_system(), [("pub", T, "m0"), ("publish", T, "m1")], [(T, "sub")])
    with pytest.raises(ConfigError, match="broker or coordinator"):
        CrashAt(3, 0, "tc")
