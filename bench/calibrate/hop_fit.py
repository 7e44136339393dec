"""``rpc`` from the client's plain publishes: the hop distribution that, drawn as the model draws
it, gives the measured publishes.

The model bills a plain publish as ``rpc + ledger.append + rpc`` (engine/broker.py), three
independent draws, each by inverse CDF with linear interpolation between a kind's percentiles and
clamped outside them (engine.clock.Distribution). Taking ``rpc = (publish - append) / 2`` per
percentile (what calibrate did until 2026-11-27) is a quantile of a difference approximated by a
difference of quantiles, and with only p50 and p99 points every hop drew at least its p50: on the
broker of 2026-11-27 02:34 (publish p50 1,987 µs 10 ms apart, append p50 1,629) it gave rpc p50 350 /
p99 1,428 and a model publish p50 of 2,955 µs on small-slow-2000, against the broker's 2,197.

:func:`fit_hops` instead searches the hop's percentiles
until the model's sum of draws has the publishes' percentiles, p0 to p99: each round draws the same uniform
numbers (a fixed seed), computes the sum's percentiles by nearest rank as calibrate computes the
publishes' (bench.calibrate.calibrate.percentiles), and moves each hop percentile by its share
of the miss.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from bench.calibrate.measurement import percentiles
from engine.clock import PERCENTILES, Distribution

DRAWS = 20_000
ROUNDS = 60
DAMPING = 0.7  # of each round's correction: the sum's percentiles move with neighbouring hop ones too
SEED = 1
# the highest percentile fitted: a few hundred probes' p999 and max are their one or two slowest
# calls, and a hop drawn up to them lifts the sum's p99 (the hop is clamped above its p99 instead)
TOP = 0.99


def as_distribution(percentiles: Mapping[str, int]) -> Distribution:
    """Percentiles by name (those of :data:`engine.clock.PERCENTILES`, non-decreasing) as the
    model samples them."""
    return Distribution(tuple((q, int(percentiles[n])) for n, q in PERCENTILES.items() if n in percentiles))


def _sampled(points: list[tuple[float, int]], u: np.ndarray) -> np.ndarray:
    """Distribution.at over an array: interpolated between the points, clamped outside them."""
    if len(points) == 1:
        return np.full(u.shape, float(points[0][1]))
    qs, vs = zip(*points)
    return np.floor(np.interp(u, qs, vs) + 0.5)


def fit_hops(publish: Mapping[str, int], append: Distribution, hops: int = 2, draws: int = DRAWS,
             rounds: int = ROUNDS, seed: int = SEED) -> dict[str, int]:
    """The hop's percentiles (the names of :data:`engine.clock.PERCENTILES` up to :data:`TOP` that
    ``publish`` has), non-decreasing and at least 1 µs, such that ``hops`` hop draws plus one ``append`` draw
    have ``publish``'s percentiles, as near as the draws allow; {} when ``publish`` has no p50."""
    names = [n for n in PERCENTILES if n in publish and PERCENTILES[n] <= TOP]
    if "p50" not in names:
        return {}
    qs = [PERCENTILES[n] for n in names]
    target = np.array([float(publish[n]) for n in names])
    rng = np.random.default_rng(seed)
    u_hops = rng.random((hops, draws))
    base = _sampled(list(append.points), rng.random(draws))
    hop = np.maximum(1.0, (target - np.array([append.at(q) for q in qs])) / hops)
    for _ in range(rounds):
        points = list(zip(qs, np.maximum.accumulate(np.round(hop)).astype(int).tolist()))
        got_all = percentiles((base + sum(_sampled(points, u) for u in u_hops)).tolist())
        got = np.array([float(got_all[n]) for n in names])
        hop = np.maximum(1.0, hop + DAMPING * (target - got) / hops)
    final = np.maximum.accumulate(np.round(hop)).astype(int)
    return {n: int(v) for n, v in zip(names, final)}
