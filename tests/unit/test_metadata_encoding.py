"""Index sort-key encoding and range bounds: the encoded order is Python's tuple order, and every
adapter's bound arithmetic (``Bounds``) selects exactly what a plain Python filter would."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_v5.store.port import (
    Bounds, IndexEntry, IndexSpec, MAX_SCORE, partition_key, sequence_of, sequential_key,
)

LEX = IndexSpec("acks", "/op/", ("segment", "n", "txn"), int_fields=("n",), where={"kind": "ack"})
NUM = IndexSpec("deadline", "/txn/", ("timeout_ms",), numeric=True, where={"state": ("OPEN",)})

text = st.text(st.characters(blacklist_characters="\x00\x01", blacklist_categories=("Cs",)), max_size=4)
ints = st.integers(-(2**63) + 1, 2**63 - 1) | st.integers(-3, 3)
full = st.tuples(text, ints, text)
partial = st.integers(0, 3).flatmap(lambda n: full.map(lambda t: t[:n]))


def _cmp_ok(sk: tuple[Any, ...], lo: tuple[Any, ...] | None, hi: tuple[Any, ...] | None,
            inc: tuple[bool, bool]) -> bool:
    if lo is not None and (sk < lo or (sk == lo and not inc[0])):
        return False
    if hi is not None and (sk > hi or (sk == hi and not inc[1])):
        return False
    return True


@settings(max_examples=150)
@given(a=full, b=full)
def test_encoding_preserves_tuple_order(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    ea, eb = LEX.encode(a) + "\x00/k", LEX.encode(b) + "\x00/k"
    assert (a < b) == (ea < eb) and (a == b) == (ea == eb)
    # and Redis compares UTF-8 bytes: the same order
    assert (ea.encode() < eb.encode()) == (ea < eb)
    assert LEX.decode(ea, 0) == IndexEntry("acks", a, "/k")


@settings(max_examples=200)
@given(sks=st.lists(full, max_size=6), lo=st.none() | partial, hi=st.none() | partial,
       inc=st.tuples(st.booleans(), st.booleans()))
def test_lex_bounds_match_python_filter(sks: list[tuple[Any, ...]], lo: Any, hi: Any, inc: tuple[bool, bool]) -> None:
    bounds = Bounds.of(LEX, lo, hi, inc)
    for i, sk in enumerate(sks):
        member = LEX.encode(sk) + "\x00" + f"/op/{i}"
        assert bounds.contains(member, 0) == _cmp_ok(sk, lo, hi, inc), (sk, lo, hi, inc)


@settings(max_examples=150)
@given(sks=st.lists(full, max_size=6), prefix=partial)
def test_lex_prefix_matches_python_filter(sks: list[tuple[Any, ...]], prefix: tuple[Any, ...]) -> None:
    bounds = Bounds.of(LEX, prefix=prefix)
    for sk in sks + [prefix + sk[len(prefix):] for sk in sks]:
        member = LEX.encode(sk) + "\x00/op/x"
        assert bounds.contains(member, 0) == (sk[:len(prefix)] == prefix)


@given(scores=st.lists(st.integers(-MAX_SCORE, MAX_SCORE), max_size=6), lo=st.none() | st.integers(-5, 5),
       hi=st.none() | st.integers(-5, 5), inc=st.tuples(st.booleans(), st.booleans()))
def test_numeric_bounds(scores: list[int], lo: int | None, hi: int | None, inc: tuple[bool, bool]) -> None:
    bounds = Bounds.of(NUM, lo, hi, inc)
    for s in scores + [-5, 0, 5]:
        assert bounds.contains("/txn/x", s) == _cmp_ok((s,), None if lo is None else (lo,),
                                                        None if hi is None else (hi,), inc)
    if bounds.empty():
        assert not any(bounds.contains("/txn/x", s) for s in range(-6, 7))


def test_sort_keys_and_where() -> None:
    assert NUM.entry("/txn/{1}", {"state": "OPEN", "timeout_ms": "42"}) == ("/txn/{1}", 42)
    assert NUM.entry("/txn/{1}", {"state": "COMMITTED", "timeout_ms": "42"}) is None
    assert NUM.entry("/other/{1}", {"state": "OPEN", "timeout_ms": "42"}) is None
    assert NUM.entry("/txn/{1}", {"state": "OPEN"}) is None  # a missing key field: not indexed
    with pytest.raises(ValueError):
        NUM.entry("/txn/{1}", {"state": "OPEN", "timeout_ms": "x"})
    with pytest.raises(ValueError):
        NUM.entry("/txn/{1}", {"state": "OPEN", "timeout_ms": str(MAX_SCORE + 1)})
    with pytest.raises(ValueError):
        LEX.entry("/op/1", {"kind": "ack", "segment": "a\x00", "n": "1", "txn": "t"})
    assert LEX.sort_key({"kind": "ack", "segment": "s", "n": "-7", "txn": "t"}) == ("s", -7, "t")


def test_spec_validation_and_json() -> None:
    for spec in (LEX, NUM):
        assert IndexSpec.from_json(spec.to_json()) == spec
    assert IndexSpec("a", "/", ("f",), where={"k": "v"}) == IndexSpec("a", "/", ("f",), where=[("k", ("v",))])
    with pytest.raises(ValueError):
        IndexSpec("a/b", "/", ("f",))
    with pytest.raises(ValueError):
        IndexSpec("a", "/", ())
    with pytest.raises(ValueError):
        IndexSpec("a", "/", ("f", "g"), numeric=True)
    with pytest.raises(ValueError):
        IndexSpec("a", "/", ("f",), int_fields=("g",))
    with pytest.raises(ValueError):
        Bounds.of(NUM, prefix=("x",))
    with pytest.raises(ValueError):
        Bounds.of(LEX, ("a",), prefix=("a",))


def test_partition_and_sequence_keys() -> None:
    assert partition_key("/txn/{abc}") == "abc"
    assert partition_key("/txn-op/{abc}/{x}") == "abc"  # the first tag, as Redis Cluster
    assert partition_key("/a/{}") is None and partition_key("/a/{") is None and partition_key("/a") is None
    key = sequential_key("/op/{1}/", 12)
    assert key == "/op/{1}/00000000000000000012" and sequence_of("/op/{1}/", key) == 12
    assert sequence_of("/op/{1}/", "/op/{1}/12") is None and sequence_of("/op/{2}/", key) is None
    assert sequential_key("/p/", 9) < sequential_key("/p/", 10)
