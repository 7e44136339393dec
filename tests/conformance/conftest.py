from __future__ import annotations

import pytest

from engine.dispatcher import DispatchMode
from tests.combos import COMBOS
from tests.harness import Combo, System


def _params(transactional_only: bool) -> list:
    out = []
    for combo in COMBOS:
        if transactional_only and not combo.transactional:
            continue
        for mode in combo.modes or tuple(DispatchMode):
            marks = [getattr(pytest.mark, need) for need in combo.needs]
            out.append(pytest.param((combo, mode), id=f"{combo.name}-{mode.value}", marks=marks))
    return out


def _make(request: pytest.FixtureRequest, combo: Combo, mode: DispatchMode) -> System:
    for need in combo.needs:  # resolves the URL or skips/fails per TXNBENCH_REQUIRE
        request.getfixturevalue(f"{need}_url")
    system = System(combo, mode)
    request.addfinalizer(lambda: combo.close_durable(system.durable))
    return system


@pytest.fixture(params=_params(False))
def system(request: pytest.FixtureRequest) -> System:
    """Any combination, transactions enabled or not."""
    combo, mode = request.param
    return _make(request, combo, mode)


@pytest.fixture(params=_params(True))
def txn_system(request: pytest.FixtureRequest) -> System:
    """Combinations whose engine serves transactions."""
    combo, mode = request.param
    return _make(request, combo, mode)
