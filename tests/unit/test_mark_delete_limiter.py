"""The cursor's mark-delete limiter (``ManagedCursorImpl.markDeleteLimiter``): Guava's
``RateLimiter.create(1.0)`` asked with ``tryAcquire()``, worked through by hand from Guava's
``SmoothBursty``: ``resync`` stores the idle time's permits (one second's at most), and a permit
taken with none stored pushes the next free instant one interval ahead."""

from __future__ import annotations

from engine.cursor import MarkDeleteLimiter

S = 1_000_000


def test_the_first_permit_is_free_at_creation_then_one_a_second() -> None:
    lim = MarkDeleteLimiter(1.0, now_us=5 * S)
    assert lim.try_acquire(5 * S)  # nothing stored: borrowed, the next free at 6 s
    assert not lim.try_acquire(5 * S + 999_999)
    assert lim.try_acquire(6 * S)
    assert not lim.try_acquire(6 * S + 1)


def test_an_idle_second_stores_one_permit_and_one_more_is_borrowed() -> None:
    lim = MarkDeleteLimiter(1.0, now_us=0)
    assert lim.try_acquire(0)  # next free at 1 s
    # at 10 s: 9 idle seconds store min(1, 9) = 1 permit; the first take spends it (the next free
    # instant stays at 10 s), the second borrows (next free 11 s), the third finds none
    assert lim.try_acquire(10 * S)
    assert lim.try_acquire(10 * S)
    assert not lim.try_acquire(10 * S + 500_000)
    assert lim.try_acquire(11 * S)


def test_a_faster_rate_shortens_the_interval() -> None:
    lim = MarkDeleteLimiter(4.0, now_us=0)
    assert lim.try_acquire(0)
    assert not lim.try_acquire(249_999)
    assert lim.try_acquire(250_000)
