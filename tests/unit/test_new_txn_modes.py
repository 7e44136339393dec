"""A run's new-txns split by whether they overlapped one of its end-txns (bench.report.new_txn_modes)."""

from __future__ import annotations

import statistics
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.report.new_txn_modes import NewTxnModes, new_txn_modes, note


def _row(opened: int | None, answered: int | None, asked: int | None = None, ended: int | None = None) -> dict[str, Any]:
    return {"opened_ts_us": opened, "new_txn_answered_ts_us": answered, "commit_requested_ts_us": asked,
            "end_ts_us": ended}


def test_a_new_txn_is_behind_an_end_txn_when_each_began_before_the_other_ended() -> None:
    rows = [_row(None, None, 100, 200), _row(None, None, 500, 900),  # two end-txns: 100-200, 500-900
            _row(0, 50),  # before both
            _row(40, 100),  # answered as the first was asked: no overlap
            _row(150, 180),  # inside the first
            _row(190, 260),  # began inside it
            _row(300, 420),  # between them
            _row(880, 1_000),  # began inside the second
            _row(900, 960),  # began as it was answered: no overlap
            _row(10, None),  # never answered: not a new-txn here
            _row(None, None, 950, None)]  # asked, never answered: no end-txn to wait behind
    # behind: 30, 70, 120, the last two answered after the end-txn they overlapped; the rest: 50, 60, 120, 60
    assert new_txn_modes(rows) == NewTxnModes(7, 3, 70, 60, after=2)


def test_no_answer_times_no_kinds() -> None:
    assert new_txn_modes([{"opened_ts_us": 0, "commit_requested_ts_us": 5, "end_ts_us": 9}]) is None  # written before the column
    assert new_txn_modes([]) is None
    assert new_txn_modes([_row(0, 10)]) == NewTxnModes(1, 0, None, 10)


_span = st.tuples(st.integers(0, 1_000), st.integers(1, 300)).map(lambda p: (p[0], p[0] + p[1]))


@given(st.lists(_span, min_size=1, max_size=30), st.lists(_span, max_size=30))
def test_the_split_is_every_pair_compared(news: list[tuple[int, int]], ends: list[tuple[int, int]]) -> None:
    rows = [_row(a, b) for a, b in news] + [_row(None, None, a, b) for a, b in ends]
    behind = [b - a for a, b in news if any(x < b and y > a for x, y in ends)]
    rest = [b - a for a, b in news if not any(x < b and y > a for x, y in ends)]
    after = sum(1 for a, b in news if any(x < b and y > a for x, y in ends)
                and b > max(y for x, y in ends if x < b and y > a))
    assert new_txn_modes(rows) == NewTxnModes(len(news), len(behind),
                                              statistics.median_low(behind) if behind else None,
                                              statistics.median_low(rest) if rest else None, after)


def test_the_note_needs_both_runs() -> None:
    m = NewTxnModes(10, 4, 11_000, 2_000, after=1)
    assert note("v5", m, None) == "" and note("v5", None, m) == ""
    text = note("v5", m, NewTxnModes(10, 5, 10_000, 2_500, after=4))
    assert text.startswith("v5 new-txn by kind: 5 of the broker's 10 new-txns overlapped one of the client's "
                           "end-txns (4 of 10 in the model), and 4 of those were answered after it (1 in the model). "
                           "Their median was 10,000 µs at the broker and 11,000 in the model (+10%); the others' was "
                           "2,500 and 2,000 (-20%)")
