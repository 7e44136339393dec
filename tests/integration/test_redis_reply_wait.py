"""How a Redis handle waits for a reply (``metadata_v5.store.redis._await_reply``): it polls for up
to ``reply_spin_us`` before the blocking read, and a reply slower than that still arrives whole, on
one command and on a pipeline, with the next command getting its own reply."""

from __future__ import annotations

import os

import pytest

import metadata_v5.store.redis as module
from metadata_v5.store.redis import RedisMetadataStore

pytestmark = pytest.mark.redis

# busy in the server for ARGV[1] microseconds, then answers ARGV[2]
_SLOW = """local t = redis.call('TIME'); local start = t[1] * 1000000 + t[2]
repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - start >= tonumber(ARGV[1])
return ARGV[2]"""


def _yields(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    real = os.sched_yield

    def counted() -> None:
        count[0] += 1
        real()

    monkeypatch.setattr(module.os, "sched_yield", counted)
    return count


@pytest.mark.parametrize("spin_us", [0, 50, 200])
def test_a_reply_slower_than_the_spin_arrives_whole(redis_url: str, redis_prefix: str, spin_us: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = RedisMetadataStore.from_url(f"{redis_url}/0?prefix={redis_prefix}&reply_spin_us={spin_us}")
    try:
        again = store.reopen()
        assert store.reply_spin_us == again.reply_spin_us == spin_us
        again.close()
        yields = _yields(monkeypatch)
        conn = store.client.connection
        # one command, 50 ms in the server: longer than any spin here, and than this process is
        # likely kept off the CPU between its send and its first peek on a loaded machine (at
        # 5 ms, a clean clone's run once found every slow reply already there: no poll to count)
        assert module._call(conn, ("EVAL", _SLOW, 0, 50_000, "slow"), store._spin_s) == "slow"
        assert module._call(conn, ("EVAL", _SLOW, 0, 0, "next"), store._spin_s) == "next"
        # a pipeline whose first reply is slow: every reply read, in order
        assert store._pipeline([("EVAL", _SLOW, 0, 50_000, "a"), ("EVAL", _SLOW, 0, 0, "b")]) == ["a", "b"]
        store.put("/k", {"v": "1"})
        assert store.get("/k").fields == {"v": "1"}  # type: ignore[union-attr]
        # polling happened only where asked for, and then for the slow replies at least
        assert (yields[0] == 0) == (spin_us == 0)
    finally:
        store.close()


def test_a_default_handle_polls_and_a_zero_spin_never_does(redis_url: str, redis_prefix: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    default = RedisMetadataStore.from_url(f"{redis_url}/0?prefix={redis_prefix}")
    off = RedisMetadataStore(redis_url, prefix=redis_prefix, reply_spin_us=0)
    try:
        assert default.reply_spin_us == module.DEFAULT_REPLY_SPIN_US > 0
        yields = _yields(monkeypatch)
        for i in range(20):
            off.put(f"/off/{i}", {"v": str(i)})
        assert yields[0] == 0
        for i in range(20):  # a 5 ms reply: more than 200 us of polling, then the blocking read
            module._call(default.client.connection, ("EVAL", _SLOW, 0, 5000, "x"), default._spin_s)
        assert yields[0] > 0
        assert [r.key for r in default.list("/off/")] == sorted(f"/off/{i}" for i in range(20))
    finally:
        default.close()
        off.close()
