from __future__ import annotations

import pytest

from engine.clock import LatencyModel, Scope, VirtualScheduler
from engine.errors import ConfigError


def test_virtual_time_orders_by_time_then_scheduling_order() -> None:
    s = VirtualScheduler()
    log: list[tuple[int, str]] = []
    s.call_later(20, lambda: log.append((s.now_us(), "b")))
    s.call_later(10, lambda: log.append((s.now_us(), "a")))
    s.call_later(20, lambda: log.append((s.now_us(), "c")))
    s.call_later(0, lambda: s.call_later(0, lambda: log.append((s.now_us(), "nested"))))
    s.run_until(15)
    assert log == [(0, "nested"), (10, "a")] and s.now_us() == 15
    s.run_until_idle()
    assert log[2:] == [(20, "b"), (20, "c")]


def test_cancel_and_closed_scope_drop_timers() -> None:
    s = VirtualScheduler()
    scope = Scope(s)
    log: list[str] = []
    t = s.call_later(5, log.append, "cancelled")
    scope.call_later(5, log.append, "scoped")
    s.call_later(5, log.append, "kept")
    t.cancel()
    scope.close()
    assert s.run_until_idle() == 1
    assert log == ["kept"]


def test_run_until_idle_respects_a_horizon() -> None:
    s = VirtualScheduler()

    def tick() -> None:
        s.call_later(100, tick)

    tick()
    ran = s.run_until_idle(max_us=1_000)
    assert ran == 10 and s.now_us() == 1_000


def test_latency_model_rejects_unknown_kinds() -> None:
    model = LatencyModel().with_overrides(ledger_append=7)
    assert model.of("ledger.append") == 7
    with pytest.raises(ConfigError, match="no operation kind 'bogus'"):
        model.of("bogus")
    with pytest.raises(ConfigError):
        LatencyModel().with_overrides(nope_x=1)
    assert set(LatencyModel.zero().latencies_us.values()) == {0}
