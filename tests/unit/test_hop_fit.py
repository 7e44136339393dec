"""``rpc`` from the client's plain publishes (bench/calibrate/hop_fit.py): the hop distribution
whose model publish, two hop draws and an append draw as the model samples them, has the measured
publish percentiles."""

from __future__ import annotations

import numpy as np

from bench.calibrate.measurement import percentiles
from bench.calibrate.hop_fit import as_distribution, fit_hops
from engine.clock import Distribution


def _model_publishes(hop: Distribution, append: Distribution, n: int, seed: int) -> list[int]:
    """n publishes billed as the model bills one: rpc + ledger.append + rpc, independent draws."""
    rng = np.random.default_rng(seed)
    return [hop.at(a) + append.at(b) + hop.at(c) for a, b, c in rng.random((n, 3))]


def test_the_fitted_hop_gives_back_the_publishes_p50_and_p99() -> None:
    # a skewed hop the fit does not see (its tail the publishes' own, not the append's), and the
    # broker's append of 2026-11-27 02:34
    hop = as_distribution({"p0": 60, "p50": 180, "p90": 420, "p99": 2_500})
    append = as_distribution({"p0": 1_202, "p50": 1_629, "p95": 2_262, "p99": 2_978})
    measured = percentiles(_model_publishes(hop, append, 20_000, seed=5))
    fitted = fit_hops(measured, append)
    assert list(fitted) == ["p0", "p50", "p90", "p95", "p99"]  # up to p99: a probe's p999 is one or two calls
    again = percentiles(_model_publishes(as_distribution(fitted), append, 20_000, seed=9))
    for p in ("p50", "p99"):
        assert abs(again[p] - measured[p]) <= 0.03 * measured[p], (p, again[p], measured[p])
    # a difference of percentiles, halved (calibrate's rpc until 2026-11-27), puts the model's
    # publish p50 far above the measured one and its p99 below
    halved = {p: max(1, (measured[p] - append.at(q)) // 2) for p, q in (("p50", 0.5), ("p99", 0.99))}
    naive = percentiles(_model_publishes(as_distribution(halved), append, 20_000, seed=9))
    assert naive["p50"] > 1.1 * measured["p50"] and naive["p99"] < 0.9 * measured["p99"]


def test_a_constant_hop_and_append_fit_exactly() -> None:
    append = Distribution.constant(1_500)
    fitted = fit_hops({"p0": 1_900, "p50": 1_900, "p99": 1_900}, append)
    assert set(fitted.values()) <= {199, 200, 201}


def test_publishes_faster_than_the_append_give_the_smallest_hop_and_no_p50_gives_none() -> None:
    append = as_distribution({"p0": 1_200, "p50": 1_600})
    assert fit_hops({"p0": 1_100, "p50": 1_700}, append)["p0"] == 1
    assert fit_hops({"p90": 3_000}, append) == {}
