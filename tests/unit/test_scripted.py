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


@pytest.mark.parametrize("combo", ["v4/memory", "v5-shipped/memory", "v5-pip/memory"])
def test_an_end_txn_a_crash_cut_off_fails_after_the_operation_timeout(combo: str) -> None:
    """TransactionMetaStoreHandler.run: no answer within operationTimeoutMs (30 s) fails the
    request at the client; a late answer is dropped, and an answered one never times out."""
    from engine.ports import TxnAction
    from engine.scripted import OPERATION_TIMEOUT_US
    from tests.combos import COMBOS

    s = System(next(c for c in COMBOS if c.name == combo), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    answered = s.new_txn()
    s.end(answered, TxnAction.COMMIT)
    s.run(1_000_000)
    assert answered in s.outcomes and answered not in s.timed_out
    cut = s.new_txn()
    s.publish(T, "m0", txn=cut)
    sent = s.end(cut, TxnAction.COMMIT)
    s.crash()  # before the coordinator's answer reaches the client
    s.run(OPERATION_TIMEOUT_US - 1_000)
    assert cut not in s.outcomes and cut not in s.timed_out  # still pending at the client
    s.run(1_000_000)
    assert s.timed_out == {cut: sent + OPERATION_TIMEOUT_US} and cut not in s.outcomes
    s.run(OPERATION_TIMEOUT_US)
    assert answered not in s.timed_out  # its timer was cancelled by the answer
