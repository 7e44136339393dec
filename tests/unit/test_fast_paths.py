"""Every fast path that bypasses a constructor or a generic path, against its slow twin
(property tests): the records built with ``tuple.__new__``, the cursor's single in-order ack
fold, the embedded ledger's shortcuts on the current ledger, and the virtual scheduler's and
scopes' inlined timer pushes."""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import broker, cursor, dispatcher, memledger
from engine.clock import Scheduler, Scope, VirtualScheduler
from engine.cursor import Cursor
from engine.dispatcher import Delivery
from engine.ids import Design, TxnID
from engine.ledger import CursorState
from engine.memledger import MemoryLedgerFactory
from engine.records import Entry, EntryData, MarkerKind, MessageId, Position

FAST = settings(max_examples=40, deadline=None)
FEW = settings(max_examples=25, deadline=None)  # plain data: few examples cover it

positions = st.builds(Position, st.integers(0, 2**40), st.integers(-1, 2**40))
txn_ids = st.none() | st.builds(TxnID, st.sampled_from(list(Design)), st.integers(0, 3), st.integers(0, 2**31))
entry_data = st.builds(EntryData, st.integers(0, 5_000_000), st.integers(0, 2**50), st.none() | st.text(max_size=5), txn_ids,
                       st.none() | st.sampled_from(list(MarkerKind)), st.none() | st.text(max_size=3),
                       st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


# -- records built without the named tuples' __new__ ----------------------------------------------


def _same(fast: Callable[[tuple[Any, ...]], Any], cls: Any, values: tuple[Any, ...]) -> None:
    got, want = fast(values), cls(*values)
    assert type(got) is cls and got == want and got._asdict() == want._asdict()


@FEW
@given(positions, st.lists(positions, max_size=4).map(tuple), entry_data, st.text(max_size=8), st.integers(0, 2**50),
       st.integers(0, 2**50), st.booleans())
def test_records_built_by_tuple_new_equal_their_constructors(pos: Position, acked: tuple[Position, ...], data: EntryData,
                                                            ledger: str, a: int, b: int, flag: bool) -> None:
    _same(memledger._position, Position, (a, b))
    _same(memledger._entry, Entry, (pos, data))
    _same(cursor._cursor_state, CursorState, (pos, acked))
    _same(broker._entry_data, EntryData, tuple(data))
    _same(broker._message_id, MessageId, (ledger, pos))
    _same(dispatcher._message_id, MessageId, (ledger, pos))
    _same(dispatcher._delivery, Delivery, (MessageId(ledger, pos), data.msg, a, b, flag))


# -- the cursor's single in-order ack fast path ---------------------------------------------------

# ops on a ledger of up to 40 entries rolling over every 7: ("i", k) acks entry k individually,
# ("c", k) cumulatively up to entry k
cursor_ops = st.lists(st.tuples(st.sampled_from("iic"), st.integers(0, 39)), max_size=40)


def _cursor(entries: int) -> tuple[Cursor, list[Position]]:
    ledger = MemoryLedgerFactory(max_entries_per_ledger=7).open("persistent://t/ns/c")
    stored = [ledger.append(EntryData(1, 0)) for _ in range(entries)]
    return Cursor(ledger, "sub"), stored


@FAST
@given(st.integers(1, 40), cursor_ops)
def test_cursor_single_ack_fast_path_matches_the_generic_path_and_a_set_model(entries: int, ops: list[tuple[str, int]]) -> None:
    fast, stored = _cursor(entries)  # single-position lists: the fast path when nothing is pending
    slow, _ = _cursor(entries)  # tuples: never the fast path (it requires a list)
    acked: set[Position] = set()
    for kind, k in ops:
        pos = stored[k % entries]
        if kind == "c":
            fast.ack_cumulative(pos)
            slow.ack_cumulative(pos)
            acked.update(p for p in stored if p <= pos)
        else:
            fast.ack_individual([pos])
            slow.ack_individual((pos,))
            acked.add(pos)
        assert fast.state() == slow.state()
        fast._check()
        slow._check()
        assert [p for p in stored if fast.is_acked(p)] == [p for p in stored if p in acked]
    # mark-delete is the end of the longest acked prefix
    prefix = next((i for i, p in enumerate(stored) if p not in acked), entries)
    assert fast.mark_delete == (stored[prefix - 1] if prefix else Position(stored[0].ledger_id, -1))


# -- the embedded ledger's shortcuts ---------------------------------------------------------------


@FAST
@given(st.integers(1, 6), st.integers(0, 30), st.integers(0, 30), st.data())
def test_ledger_shortcuts_match_a_walk_of_the_stored_positions(per_ledger: int, entries: int, trim_at: int, data: st.DataObject) -> None:
    """``next_position`` (shortcut inside the current ledger), ``last_confirmed`` (shortcut on
    the current list) and ``read`` (starting index shortcut) against the flat list of stored
    positions, before and after a trim."""
    ml = MemoryLedgerFactory(max_entries_per_ledger=per_ledger).open("persistent://t/ns/l")
    written = [ml.append(EntryData(1, i)) for i in range(entries)]
    if written and trim_at < len(written):
        ml.trim(written[trim_at])
    ml._check()
    stored = [e.position for e in ml.read(Position(0, 0), Position(2**62, 0), 10**6)]
    assert stored == [p for p in written if not ml.is_trimmed(p)]
    for i, p in enumerate(stored[:-1]):
        assert ml.next_position(p) == stored[i + 1]
    if stored:
        assert ml.last_confirmed() == stored[-1]
        assert ml.next_position(stored[-1]) == Position(stored[-1].ledger_id, stored[-1].entry_id + 1)
        i = data.draw(st.integers(0, len(stored) - 1))
        j = data.draw(st.integers(i, len(stored) - 1))
        n = data.draw(st.integers(1, 8))
        assert [e.position for e in ml.read(stored[i], stored[j], n)] == stored[i:j + 1][:n]


# -- the virtual scheduler's and scopes' inlined pushes --------------------------------------------


class _GenericScheduler(VirtualScheduler):
    """The slow twin: :class:`Scheduler`'s own ``call_at``/``call_later``, not the inlined ones."""

    call_at = Scheduler.call_at
    call_later = Scheduler.call_later


# (delay_us, via "later"/"at", in a scope?, cancel it?, children to schedule when it runs)
timer_plans = st.lists(st.tuples(st.integers(-5, 50), st.sampled_from(["later", "at"]), st.booleans(), st.booleans(),
                                 st.integers(0, 2)), min_size=1, max_size=25)


def _trace(sched: VirtualScheduler, scope: Scheduler, plan: list[tuple[int, str, bool, bool, int]], close_scope_at: int) -> list[tuple[int, int]]:
    ran: list[tuple[int, int]] = []

    def schedule(i: int) -> None:
        delay, how, scoped, cancel, children = plan[i % len(plan)]
        target = scope if scoped else sched
        fire = (lambda: fired(i, children))
        t = target.call_later(delay, fire) if how == "later" else target.call_at(sched.now_us() + delay, fire)
        if cancel and i % 3 == 0:
            t.cancel()

    def fired(i: int, children: int) -> None:
        ran.append((sched.now_us(), i))
        if len(ran) < 60:
            for c in range(children):
                schedule(i * 3 + c + 1)

    for i in range(len(plan)):
        schedule(i)
    sched.run_until(close_scope_at)
    if isinstance(scope, Scope):
        scope.close()
    sched.run_until(10_000)
    sched._check()
    return ran


@FAST
@given(timer_plans, st.integers(0, 60))
def test_inlined_timer_pushes_match_the_generic_scheduler(plan: list[tuple[int, str, bool, bool, int]], close_at: int) -> None:
    fast = VirtualScheduler()
    slow = _GenericScheduler()
    assert _trace(fast, Scope(fast), plan, close_at) == _trace(slow, _slow_scope(slow), plan, close_at)


def _slow_scope(parent: VirtualScheduler) -> Scheduler:
    """A scope whose pushes go through :meth:`Scheduler.call_at` then get the scope attached:
    the generic path the inlined ``Scope.call_at``/``call_later`` stand for."""
    scope = Scope(parent)

    def call_at(when_us: int, fn: Callable[..., Any], *args: Any) -> Any:
        timer = Scheduler.call_at(parent, when_us, fn, *args)
        timer.scope = scope
        return timer

    def call_later(delay_us: int, fn: Callable[..., Any], *args: Any) -> Any:
        return call_at(parent.now_us() + delay_us, fn, *args)

    scope.call_at = call_at  # type: ignore[method-assign]
    scope.call_later = call_later  # type: ignore[method-assign]
    return scope
