"""Topic names, and the hash-range segments of scalable topics.

* ``persistent://tenant/ns/name`` (optionally ``-partition-N``): one ledger of the same name.
* ``topic://tenant/ns/name``: a scalable topic made of segments ``segment://tenant/ns/name/<desc>``
  with ``<desc> = <start:04x>-<end:04x>-<id>``: the inclusive hash range ``[start, end]`` of
  ``0..0xffff`` it serves and a per-topic id. A split seals the segment and creates two children
  with the two halves of its range; a merge seals two adjacent segments and creates one child
  with the union. Keys route by ``crc32(key) & 0xffff``. A child is dispatched only after all its
  parents are drained, so per-key order holds across splits and merges.

The layout (segments, parents, which are sealed) is durable: an append-only ``__layout`` ledger
per scalable topic whose records are replayed when a broker opens the topic.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from engine.errors import TopicError

HASH_SPACE = 0x10000


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode()) & 0xFFFF


@dataclass(frozen=True, slots=True)
class TopicName:
    scheme: str  # "persistent" or "topic"
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, text: str) -> TopicName:
        return _parse(text)

    @classmethod
    def _parse_uncached(cls, text: str) -> TopicName:
        scheme, sep, rest = text.partition("://")
        parts = rest.split("/")
        if not sep or scheme not in ("persistent", "topic") or len(parts) != 3 or not all(parts):
            raise TopicError(
                f"bad topic name {text!r}: expected persistent://tenant/ns/name or topic://tenant/ns/name"
            )
        return cls(scheme, *parts)

    @property
    def scalable(self) -> bool:
        return self.scheme == "topic"

    @property
    def namespace_path(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.tenant}/{self.namespace}/{self.local}"

    def layout_ledger(self) -> str:
        return f"{self}/__layout"

    def segment_ledger(self, seg: Segment) -> str:
        return f"segment://{self.tenant}/{self.namespace}/{self.local}/{seg.descriptor}"


@dataclass(slots=True)
class Segment:
    id: int
    start: int
    end: int  # inclusive
    parents: tuple[int, ...] = ()
    sealed: bool = False
    ledger: str = field(default="", compare=False)

    @property
    def descriptor(self) -> str:
        return f"{self.start:04x}-{self.end:04x}-{self.id}"

    def covers(self, h: int) -> bool:
        return self.start <= h <= self.end

    def to_record(self) -> dict[str, object]:
        return {"id": self.id, "start": self.start, "end": self.end, "parents": list(self.parents)}


class SegmentLayout:
    """The segments of one scalable topic. Pure bookkeeping; the broker persists each change."""

    def __init__(self, name: TopicName) -> None:
        self.name = name
        self.segments: dict[int, Segment] = {}
        self._active: list[Segment] | None = None  # sorted by start; rebuilt after a change
        self._starts: list[int] = []

    def _add(self, seg: Segment) -> Segment:
        seg.ledger = self.name.segment_ledger(seg)
        self.segments[seg.id] = seg
        self._active = None
        return seg

    def initial(self) -> Segment:
        return self._add(Segment(0, 0, HASH_SPACE - 1))

    def active(self) -> list[Segment]:
        if self._active is None:
            self._active = sorted((s for s in self.segments.values() if not s.sealed), key=lambda s: s.start)
            self._starts = [s.start for s in self._active]
        return self._active

    def route(self, h: int) -> Segment:
        active = self.active()
        i = bisect_right(self._starts, h) - 1
        if i >= 0 and active[i].covers(h):
            return active[i]
        raise TopicError(f"{self.name}: no active segment covers hash {h:#06x}")  # layout invariant broken

    def find(self, descriptor: str) -> Segment:
        for seg in self.segments.values():
            if seg.descriptor == descriptor or seg.ledger == descriptor:
                return seg
        raise TopicError(f"{self.name}: no segment {descriptor!r}")

    def split(self, seg: Segment) -> list[Segment]:
        if seg.sealed:
            raise TopicError(f"{self.name}: segment {seg.descriptor} is sealed; cannot split it")
        if seg.start == seg.end:
            raise TopicError(f"{self.name}: segment {seg.descriptor} covers one hash; cannot split it")
        mid = (seg.start + seg.end) // 2
        seg.sealed = True
        self._active = None
        base = max(self.segments) + 1
        return [
            self._add(Segment(base, seg.start, mid, (seg.id,))),
            self._add(Segment(base + 1, mid + 1, seg.end, (seg.id,))),
        ]

    def merge(self, a: Segment, b: Segment) -> Segment:
        a, b = sorted((a, b), key=lambda s: s.start)
        if a.sealed or b.sealed:
            raise TopicError(f"{self.name}: cannot merge sealed segments {a.descriptor}, {b.descriptor}")
        if a.end + 1 != b.start:
            raise TopicError(f"{self.name}: segments {a.descriptor} and {b.descriptor} are not adjacent")
        a.sealed = b.sealed = True
        self._active = None
        return self._add(Segment(max(self.segments) + 1, a.start, b.end, (a.id, b.id)))

    def apply(self, record: Mapping[str, Any]) -> None:
        """Replay one durable layout record."""
        for sid in record.get("sealed", []):
            self.segments[int(sid)].sealed = True
        self._active = None
        for s in record.get("created", []):
            self._add(Segment(int(s["id"]), int(s["start"]), int(s["end"]), tuple(s["parents"])))


@lru_cache(maxsize=65_536)
def _parse(text: str) -> TopicName:
    return TopicName._parse_uncached(text)
