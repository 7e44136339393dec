""":class:`TxnRecords` on a :class:`~metadata_v5.store.port.MetadataStore`: PIP-473's keys, fields
and the four indexes (plus the events and aborted-range indexes of the variants).

Key layout (``{...}`` is the partition key: a txn's records live together):

=====================================  =======================================================
``/txn/{<tc>-<seq>}``                  header: state, timeout_us, created_us[, finalized_us]
``/txn-op/{<tc>-<seq>}/<seq20>``       op record: kind, segment, position[, subscription, ack_kind]
``/txn-event/{<tc>-<seq>}/<n>``        state-events variant: segment, subscription ('' for the buffer), state
``/txn-aborted/{<segment>}/<design>-<tc>-<seq>``  GC mode not ``force``: segment, txn, design, first, last
``/txn-ids/<tc>``                      the coordinator's id block reservation (CAS)
``/txn-tc-seq/<tc>``                   shipped: the per-id sequence counter (5.0.1 ``/txn/tc-seq/<tcId>``)
``/txn-pevents/{<seg>|<sub>}/<seq20>``  shipped: a participant's event sequence (5.0.1
                                       ``/txn/segment-events/<seg>-<seq>``, ``/txn/subscription-events/...``)
``/txn-watermark/{<segment>}``         shipped: the segment's durable maxReadPosition
                                       (5.0.1 ``/txn/segment-state/watermark/<seg>``)
=====================================  =======================================================

The final-state index is numeric on ``finalized_us`` over both final states (the PIP keys it by
``(state, finalized_ms)``; one numeric range gives the GC sweep both states in one query).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from engine.errors import BadVersion, ConfigError, NoSuchKey
from engine.ids import Design, TxnID
from engine.ports import AckKind, TxnStatus
from engine.records import Position
from metadata_v5.store.port import (
    ABSENT, ChangeKind, Delete, DeleteSequence, IndexSpec, MetadataStore, OpResult, Put, PutSequential, Record,
    Watch, WatchEvent, sequential_key,
)
from metadata_v5.txnrecords import (
    AbortedRange, EventListener, Header, HeaderListener, Op, OpRecord, SweepCursor, TxnRecords,
)

T = TypeVar("T")

ID_BLOCK = 1_000  # ids reserved per CAS on the coordinator's counter (lost on a crash: gaps only)

INDEXES = (
    IndexSpec("txn-by-deadline", "/txn/", ("timeout_us",), numeric=True, where=(("state", ("open",)),)),
    IndexSpec("txn-by-final-state", "/txn/", ("finalized_us",), numeric=True,
              where=(("state", ("aborted", "committed")),)),
    IndexSpec("writes-by-segment", "/txn-op/", ("segment",), where=(("kind", ("write",)),)),
    IndexSpec("acks-by-segment-subscription", "/txn-op/", ("segment", "subscription"), where=(("kind", ("ack",)),)),
    IndexSpec("events-by-participant", "/txn-event/", ("segment", "subscription")),
    IndexSpec("aborted-by-segment", "/txn-aborted/", ("segment",)),
    # Pulsar 5.0.1's further index and its participant event sequences (TxnPaths, §1.8)
    IndexSpec("ops-by-txn", "/txn-op/", ("txn",)),
    IndexSpec("participant-events", "/txn-pevents/", ("segment", "subscription")),
)


def _tag(txn: TxnID) -> str:
    return f"{txn.most_bits}-{txn.least_bits}"


def _txn_of(tag: str, design: Design = Design.V5) -> TxnID:
    most, _, least = tag.partition("-")
    return TxnID(design, int(most), int(least))


def _aborted_key(segment: str, txn: TxnID) -> str:
    return f"/txn-aborted/{{{segment}}}/{txn.design.value}-{_tag(txn)}"


def _tag_in(key: str) -> str:
    return key[key.index("{") + 1:key.index("}")]


def header_key(txn: TxnID) -> str:
    return f"/txn/{{{_tag(txn)}}}"


def op_prefix(txn: TxnID) -> str:
    return f"/txn-op/{{{_tag(txn)}}}/"


# Enum members by value: a dict look-up, not the Enum's Python-level call (per record read)
_STATUS = {s.value: s for s in TxnStatus}
_DESIGN = {d.value: d for d in Design}
_ACK_KIND = {k.value: k for k in AckKind}


def _header(txn: TxnID, rec: Record) -> Header:
    f = rec.fields
    fin = f.get("finalized_us")
    return Header(txn, _STATUS[f["state"]], int(f["timeout_us"]), int(f["created_us"]),
                  int(fin) if fin is not None else None, rec.version)


def _op_record(rec: Record) -> OpRecord:
    f = rec.fields
    key = rec.key
    ledger, _, entry = f["position"].partition(":")
    ack_kind = f.get("ack_kind")
    op = Op(f["kind"], f["segment"], Position(int(ledger), int(entry)), f.get("subscription"),
            _ACK_KIND[ack_kind] if ack_kind is not None else None)
    txn = _txn_of(_tag_in(key), _DESIGN[f.get("design", "v5")])
    return OpRecord(txn, int(key[key.rindex("/") + 1:]), op, key)


def _final_put(header: Header, state: TxnStatus, finalized_us: int) -> Put:
    """The header's CAS from OPEN (at its version) to ``state``."""
    return Put(header_key(header.txn), {"state": state.value, "timeout_us": str(header.timeout_us),
                                        "created_us": str(header.created_us), "finalized_us": str(finalized_us)},
               header.version)


def _finalized(header: Header, state: TxnStatus, finalized_us: int, result: OpResult) -> Header:
    """The header after :func:`_final_put` applied as ``result``."""
    assert result.version is not None
    return Header(header.txn, state, header.timeout_us, header.created_us, finalized_us, result.version)


def _ops_of(records: list[Record], txn: TxnID) -> list[OpRecord]:
    """The ops-by-txn scan's records of ``txn``: the index's key is the tag, which a v4 id
    migrated in shares only by accident of numbers."""
    return [o for o in map(_op_record, records) if o.txn == txn]


def _of_txn(records: list[Record], txn: TxnID | None) -> list[Record]:
    """The scanned records of ``txn`` (all with None), filtered on the client by the key's tag
    before decoding: a cleanup scan reads the whole segment but keeps one txn's records."""
    if txn is None:
        return records
    tag = f"{{{_tag(txn)}}}"
    return [r for r in records if tag in r.key and _op_record(r).txn == txn]


class StoreTxnRecords(TxnRecords):
    def __init__(self, store: MetadataStore, notify: Callable[[Callable[[], None]], None]) -> None:
        self.store = store
        self._notify = notify
        store.define_indexes(INDEXES)
        self._watches: dict[tuple[object, object], Watch] = {}
        self._ids: dict[int, tuple[int, int]] = {}  # tc -> (next, end of reserved block)

    # -- headers ----------------------------------------------------------------------------------

    def next_txn_seq(self, tc_id: int) -> int:
        nxt, end = self._ids.get(tc_id, (0, 0))
        if nxt >= end:
            key = f"/txn-ids/{tc_id}"
            while True:
                rec = self.store.get(key)
                start = int(rec.fields["next"]) if rec else 0
                try:
                    self.store.put(key, {"next": str(start + ID_BLOCK)}, rec.version if rec else ABSENT)
                    break
                except BadVersion:  # another coordinator instance reserved a block first
                    continue
            nxt, end = start, start + ID_BLOCK
        self._ids[tc_id] = (nxt + 1, end)
        return nxt

    def create_header(self, txn: TxnID, timeout_us: int, created_us: int) -> Header:
        fields = {"state": TxnStatus.OPEN.value, "timeout_us": str(timeout_us), "created_us": str(created_us)}
        version = self.store.batch([Put(header_key(txn), fields, ABSENT)])[0].version  # create(), minus its Record copy
        assert version is not None
        return Header(txn, TxnStatus.OPEN, timeout_us, created_us, None, version)

    def get_header(self, txn: TxnID) -> Header | None:
        rec = self.store.get(header_key(txn))
        return _header(txn, rec) if rec is not None else None

    def finalize(self, header: Header, state: TxnStatus, finalized_us: int) -> Header | None:
        try:
            result = self.store.batch([_final_put(header, state, finalized_us)])[0]
        except (BadVersion, NoSuchKey):
            return None
        return _finalized(header, state, finalized_us, result)

    def delete_header(self, txn: TxnID, keep_sequence: bool = False) -> None:
        self.store.batch([Delete(header_key(txn))] + ([] if keep_sequence else [DeleteSequence(op_prefix(txn))]))

    def expired(self, now_us: int, limit: int, after: SweepCursor | None = None) -> tuple[list[TxnID], SweepCursor | None]:
        return self._scan(lambda: self._page("txn-by-deadline", now_us, limit, after))

    def finalized_before(self, before_us: int, limit: int,
                         after: SweepCursor | None = None) -> tuple[list[TxnID], SweepCursor | None]:
        return self._scan(lambda: self._page("txn-by-final-state", before_us, limit, after))

    def _page(self, index: str, maximum: int, limit: int,
              after: SweepCursor | None) -> tuple[list[TxnID], SweepCursor | None]:
        """Entries ordered by (score, key) up to ``maximum``, the first ``limit`` past ``after``."""
        while True:
            got = self.store.query(index, minimum=after[0] if after else None, maximum=maximum, limit=limit)
            entries = [e for e in got if after is None or (e.sort_key, e.key) > after]
            if entries or len(got) < limit:
                break
            limit *= 2  # a whole page shared the cursor's score and was seen: look further
        cursor = (int(got[-1].sort_key), got[-1].key) if len(got) == limit else None  # type: ignore[arg-type]
        return [_txn_of(_tag_in(e.key)) for e in entries], cursor

    def count_headers(self) -> int:
        return len(self.store.list_keys("/txn/"))

    def count_finished(self) -> int:
        return len(self.store.query("txn-by-final-state"))

    # -- op records -------------------------------------------------------------------------------

    def add_op(self, txn: TxnID, op: Op) -> OpRecord:
        fields = {"kind": op.kind, "segment": op.segment, "position": str(op.position), "txn": _tag(txn)}
        if op.subscription is not None:
            fields["subscription"] = op.subscription
        if op.ack_kind is not None:
            fields["ack_kind"] = op.ack_kind.value
        if txn.design is not Design.V5:  # a txn migrated from v4 keeps its v4 id in the entries
            fields["design"] = txn.design.value
        # the batch, not put_sequential: only the assigned key is needed, not a Record copy
        key = self.store.batch([PutSequential(op_prefix(txn), fields)])[0].key
        return OpRecord(txn, int(key[key.rindex("/") + 1:]), op, key)

    def ops_of_txn(self, txn: TxnID) -> list[OpRecord]:
        return [_op_record(r) for r in self.store.list(op_prefix(txn))]

    def writes_on(self, segment: str) -> list[OpRecord]:
        return [_op_record(r) for r in self.store.query_records("writes-by-segment", prefix=(segment,))]

    def acks_on(self, segment: str, subscription: str) -> list[OpRecord]:
        return [_op_record(r) for r in
                self.store.query_records("acks-by-segment-subscription", prefix=(segment, subscription))]

    def delete_ops(self, records: list[OpRecord]) -> None:
        if records:
            self.store.batch([Delete(r.key or sequential_key(op_prefix(r.txn), r.seq)) for r in records])

    def count_ops(self) -> int:
        return len(self.store.list_keys("/txn-op/"))

    def seed_history(self, tc_id: int, txns: int, ops: int = 1, chunk: int = 1_000) -> None:
        """Make this store one that has run ``txns`` txns of coordinator ``tc_id`` before: each
        one's ``ops`` op records written one after another and collected, which leaves its
        sequence counter on a store without native sequences (5.0.1 never deletes one:
        ``TxnMetadataStore.deleteHeader`` L98-100) and, on an emulated store, the memtable entries
        of every write and delete, and both id counters past them. Their headers are not kept,
        though a broker keeps a finished one for ``retention_ms`` (900 s) and its sweeps walk and
        GET it meanwhile: here a sweep walks this run's headers only. Refused where coordinator
        ``tc_id`` has run a txn."""
        seq_key, ids_key = f"/txn-tc-seq/{tc_id}", f"/txn-ids/{tc_id}"
        if self.store.get(seq_key) is not None or self.store.get(ids_key) is not None:
            raise ConfigError(f"v5 option history={txns}: the store has run txns of coordinator {tc_id} already; "
                              "history seeds a store that has not")
        for start in range(0, txns, chunk):
            seqs = range(start, min(txns, start + chunk))
            made = []
            for _ in range(ops):  # a batch per op: each moves every txn's counter once, as appendOp does
                made += self.store.batch([
                    PutSequential(op_prefix(TxnID(Design.V5, tc_id, seq)),
                                  {"kind": "write", "segment": "history", "position": "0:0",
                                   "txn": _tag(TxnID(Design.V5, tc_id, seq))})
                    for seq in seqs])
            self.store.batch([Delete(r.key) for r in made])
        self.store.batch([Put(seq_key, {"next": str(txns)}, ABSENT), Put(ids_key, {"next": str(txns)}, ABSENT)])

    # -- watches ------------------------------------------------------------------------------------

    def watch_header(self, txn: TxnID, owner: object, listener: HeaderListener) -> None:
        self.unwatch_header(txn, owner)

        def changed(event: WatchEvent) -> None:
            if event.kind is ChangeKind.DELETE or event.fields is None:
                listener(None)
            else:
                listener(_header(txn, Record(event.key, event.fields, event.version or 0)))

        watch = self.store.watch(header_key(txn), changed)
        self._watches[(txn, owner)] = watch
        initial = watch.initial
        if initial is None or initial.fields.get("state") != TxnStatus.OPEN.value:
            # Changed between the caller's read and the registration: deliver the snapshot.
            snapshot = _header(txn, initial) if initial is not None else None
            def deliver() -> None:
                if watch.active:
                    listener(snapshot)

            self._notify(deliver)

    def unwatch_header(self, txn: TxnID, owner: object) -> None:
        watch = self._watches.pop((txn, owner), None)
        if watch is not None:
            watch.cancel()

    # -- state-events variant -----------------------------------------------------------------------

    def put_events(self, txn: TxnID, state: TxnStatus, participants: list[tuple[str, str | None]]) -> None:
        ops = []
        for i, (segment, sub) in enumerate(participants):
            ops.append(Put(f"/txn-event/{{{_tag(txn)}}}/{i:06d}",
                           {"segment": segment, "subscription": sub or "", "state": state.value, "txn": _tag(txn)}))
        self.store.batch(ops)

    def watch_events(self, segment: str, subscription: str | None, owner: object, listener: EventListener) -> None:
        def changed(event: WatchEvent) -> None:
            if event.kind is ChangeKind.PUT and event.fields is not None:
                listener(_txn_of(event.fields["txn"]), _STATUS[event.fields["state"]])

        key = (("events", segment, subscription), owner)
        old = self._watches.pop(key, None)
        if old is not None:
            old.cancel()
        self._watches[key] = self.store.watch_range("events-by-participant", changed, prefix=(segment, subscription or ""))

    def events_for(self, segment: str, subscription: str | None) -> list[tuple[TxnID, TxnStatus]]:
        recs = self.store.query_records("events-by-participant", prefix=(segment, subscription or ""))
        return [(_txn_of(r.fields["txn"]), _STATUS[r.fields["state"]]) for r in recs]

    def delete_event(self, segment: str, subscription: str | None, txn: TxnID) -> None:
        keys = [e.key for e in self.store.query("events-by-participant", prefix=(segment, subscription or ""))
                if _tag_in(e.key) == _tag(txn)]
        if keys:
            self.store.batch([Delete(k) for k in keys])

    # -- aborted ranges -----------------------------------------------------------------------------

    def put_aborted(self, segment: str, ranges: list[AbortedRange]) -> None:
        # The id keeps its design: a topic migrated from v4 holds v4-issued ids in its entries.
        self.store.batch([
            Put(_aborted_key(segment, r.txn),
                {"segment": segment, "txn": _tag(r.txn), "design": r.txn.design.value,
                 "first": str(r.first), "last": str(r.last)})
            for r in ranges
        ])

    def aborted_on(self, segment: str) -> list[AbortedRange]:
        return [AbortedRange(_txn_of(r.fields["txn"], Design(r.fields.get("design", "v5"))),
                             Position.parse(r.fields["first"]), Position.parse(r.fields["last"]))
                for r in self.store.query_records("aborted-by-segment", prefix=(segment,))]

    def delete_aborted(self, segment: str, txns: list[TxnID]) -> None:
        if txns:
            self.store.batch([Delete(_aborted_key(segment, t)) for t in txns])

    # -- the shipped design ---------------------------------------------------------------------------

    def _scan(self, fn: Callable[[], T]) -> T:
        """Run one index scan, noting the GETs it issued one by one and the keys its listing
        iterated on a store without native indexes (the shipped design's time depends on them)."""
        if self.store.capabilities.native_indexes:
            self.last_scan_gets = self.last_scan_keys = self.last_scan_entries = 0
            return fn()
        before = self.store.stats()
        out = fn()
        after = self.store.stats()
        self.last_scan_gets = after["scan_reads"] - before["scan_reads"]
        self.last_scan_keys = after["scan_keys"] - before["scan_keys"]
        self.last_scan_entries = after["scan_entries"] - before["scan_entries"]
        return out

    def store_native_sequences(self) -> bool:
        return self.store.capabilities.native_sequences

    def next_txn_seq_each(self, tc_id: int) -> int:
        key = f"/txn-tc-seq/{tc_id}"
        while True:
            rec = self.store.get(key)
            seq = int(rec.fields["next"]) if rec else 0
            try:
                self.store.put(key, {"next": str(seq + 1)}, rec.version if rec else ABSENT)
                return seq
            except BadVersion:  # another coordinator took this one: re-read (L569-585)
                continue

    def ops_by_txn(self, txn: TxnID) -> list[OpRecord]:
        return _ops_of(self._scan(lambda: self.store.query_records("ops-by-txn", prefix=(_tag(txn),))), txn)

    def finalize_then_list_ops(self, header: Header, state: TxnStatus,
                               finalized_us: int) -> tuple[Header | None, list[OpRecord]]:
        try:
            results, recs = self._scan(lambda: self.store.batch_then_query_records(
                [_final_put(header, state, finalized_us)], "ops-by-txn", prefix=(_tag(header.txn),)))
        except (BadVersion, NoSuchKey):
            return None, []
        return _finalized(header, state, finalized_us, results[0]), _ops_of(recs, header.txn)

    def writes_scan(self, segment: str, txn: TxnID | None = None) -> list[OpRecord]:
        recs = self._scan(lambda: self.store.query_records("writes-by-segment", prefix=(segment,)))
        return [_op_record(r) for r in _of_txn(recs, txn)]

    def acks_scan(self, segment: str, subscription: str, txn: TxnID | None = None) -> list[OpRecord]:
        recs = self._scan(
            lambda: self.store.query_records("acks-by-segment-subscription", prefix=(segment, subscription)))
        return [_op_record(r) for r in _of_txn(recs, txn)]

    def aborted_scan(self, segment: str) -> list[AbortedRange]:
        recs = self._scan(lambda: self.store.query_records("aborted-by-segment", prefix=(segment,)))
        return [AbortedRange(_txn_of(r.fields["txn"], Design(r.fields.get("design", "v5"))),
                             Position.parse(r.fields["first"]), Position.parse(r.fields["last"])) for r in recs]

    def put_participant_events(self, participants: list[tuple[str, str | None]], txn: TxnID,
                               state: TxnStatus) -> None:
        # one store batch per event, as Pulsar's appends are (one round trip on Redis: a pipeline)
        self.store.batches([[PutSequential(f"/txn-pevents/{{{segment}|{subscription or ''}}}/",
                                           {"segment": segment, "subscription": subscription or "",
                                            "txn": _tag(txn), "state": state.value})]
                            for segment, subscription in participants])

    def watch_participant_events(self, segment: str, subscription: str | None, owner: object,
                                 listener: Callable[[], None]) -> None:
        def changed(event: WatchEvent) -> None:
            if event.kind is ChangeKind.PUT:
                listener()

        key = (("pevents", segment, subscription), owner)
        old = self._watches.pop(key, None)
        if old is not None:
            old.cancel()
        self._watches[key] = self.store.watch_range("participant-events", changed,
                                                    prefix=(segment, subscription or ""))

    def get_watermark(self, segment: str) -> tuple[Position | None, int]:
        rec = self.store.get(f"/txn-watermark/{{{segment}}}")
        return (Position.parse(rec.fields["position"]), rec.version) if rec else (None, ABSENT)

    def cas_watermark(self, segment: str, position: Position, version: int) -> int | None:
        try:
            rec = self.store.put(f"/txn-watermark/{{{segment}}}", {"position": str(position)}, version)
        except (BadVersion, NoSuchKey):
            return None
        return rec.version

    def delete_op(self, record: OpRecord) -> None:
        self.store.batch([Delete(record.key or sequential_key(op_prefix(record.txn), record.seq))])

    def delete_op_each(self, records: list[OpRecord]) -> None:
        # one store batch per record, as Pulsar's calls are (one round trip on Redis: a pipeline)
        self.store.batches([[Delete(r.key or sequential_key(op_prefix(r.txn), r.seq))] for r in records])

    def count_events(self) -> int:
        return len(self.store.list_keys("/txn-pevents/"))

    @property
    def listeners(self) -> int:
        return len(self._watches)

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        self.store.close()

    def stats(self) -> dict[str, int]:
        return self.store.stats()
