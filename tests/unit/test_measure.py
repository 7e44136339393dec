"""Batched HdrHistogram recording gives exactly what one record_value per sample gives."""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings, strategies as st

from bench.replay.measure import HIGHEST_US, LOWEST_US, SIGNIFICANT_DIGITS, Histograms, _counts_indexes, values_at_percentiles


@given(st.lists(st.integers(-5, HIGHEST_US + 10**6), min_size=1, max_size=300))
@settings(max_examples=200, deadline=None)
def test_batched_recording_matches_one_call_per_sample(values: list[int]) -> None:
    hist = Histograms()
    hist._FLUSH_AT = 7  # several flushes on the way
    reference = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
    for v in values:
        hist.record("x", v)
        reference.record_value(min(HIGHEST_US, max(LOWEST_US, v)))
    s = hist.summary()["x"]
    assert s["count"] == len(values) and s["sum_us"] == sum(values)
    assert s["min_us"] == reference.get_min_value() and s["max_us"] == reference.get_max_value()
    for p in (50.0, 90.0, 99.0, 99.9):
        assert s[f"p{p:g}_us"] == reference.get_value_at_percentile(p)
    assert hist.clamped == sum(1 for v in values if v > HIGHEST_US)


@given(st.lists(st.integers(LOWEST_US, HIGHEST_US), max_size=200),
       st.lists(st.floats(0.0, 120.0, allow_nan=False), min_size=1, max_size=12))
@settings(max_examples=300, deadline=None)
def test_values_at_percentiles_are_hdrhistograms_own(values: list[int], percentiles: list[float]) -> None:
    h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
    for v in values:
        h.record_value(v)
    # p0 (the lowest equivalent value), above 100, and an empty histogram (0) included
    qs = [0.0, 100.0, *percentiles]
    assert values_at_percentiles(h, qs) == [h.get_value_at_percentile(q) for q in qs]


def test_counts_index_matches_hdrhistogram_at_every_bucket_edge() -> None:
    h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
    edges = sorted({v for k in range(37) for v in (2**k - 1, 2**k, 2**k + 1) if LOWEST_US <= v <= HIGHEST_US})
    assert _counts_indexes(h, np.array(edges, dtype=np.int64)).tolist() == [h._counts_index_for(v) for v in edges]


def test_replay_gc_raises_young_threshold_and_restores_everything() -> None:
    import gc

    from bench.replay.gcpolicy import YOUNG_THRESHOLD, replay_gc

    before = gc.get_threshold()
    with replay_gc():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0  # the heap that existed at entry is frozen
        frozen = gc.get_freeze_count()
        with replay_gc(young=5_000):  # nested: the inner one puts the outer's settings back
            assert gc.get_threshold()[0] == 5_000
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        # ... and leaves the outer's heap frozen, freezing nothing more (a frozen object freed by its
        # refcount leaves the permanent generation, so the count may drop by a few)
        assert frozen - 1_000 < gc.get_freeze_count() <= frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
