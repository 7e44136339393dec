"""The ``kafka://host:port`` ledger backend: managed ledgers stored in a real Kafka broker.

Layout on the broker
--------------------
* **One topic per ledger**, one partition, ``cleanup.policy=delete`` with no time or size
  retention: records leave only through :meth:`KafkaManagedLedger.trim` (delete-records).
  The topic name is derived from the ledger name deterministically (:func:`topic_for`):
  ``txnbench_<sanitised name>_<sha1 prefix>``, so ``persistent://t/ns/x`` and
  ``segment://t/ns/x/0000-7fff-1`` both become legal, distinct Kafka names (the hash keeps
  names apart that sanitise alike; no ``.`` is used, so Kafka's ``.``/``_`` collision rule
  never bites).
* **``__txnbench_ledgers``** (compacted, one partition): the registry. Key = ledger name;
  value = ``{"topic", "ledger_id", "sealed", "trimmed"}``; a tombstone when the ledger is
  deleted. This is what ``names``/``exists`` answer from and what makes seal and trim durable.
* **``__txnbench_cursors``** (compacted, one partition): key = ``[ledger name, cursor name]``
  (JSON); value = the cursor state; a tombstone when the cursor (or its ledger) is deleted. The
  latest value of a key is the cursor's state.

Positions
---------
A Kafka ledger never rolls over (``rolls_over = False``): all its entries live in one ledger
id, and ``Position(ledger_id, offset)`` uses the partition offset as entry id (offsets are
dense: no transactions, no compaction on ledger topics). The ledger id is the offset of the
registry record that created the ledger: unique on the broker, never reused, stable across
restarts; a ledger deleted and re-created gets a new id.

Trimming
--------
``trim(before)`` deletes every entry before ``before`` with Kafka's delete-records (the log start
offset moves): *entry* granularity (``trims_whole_ledgers = False``), where ``memory://`` (like
BookKeeper) deletes whole ledgers only. ``is_trimmed`` is ``offset < log start offset``. The trim
point is written to the registry first: a broker killed hard restores its log start offset from a
checkpoint written once a minute, and the next ``open`` deletes the records again.

Consistency
-----------
A factory is the only writer of the ledgers it opens, as a Pulsar broker owns its topics: it
caches registry, cursors and each ledger's start/end offsets, updated by its own acknowledged
writes. ``open``, ``exists`` and ``names`` first catch up with the registry and cursor topics, and
``open`` re-reads the ledger's offsets, so a new factory (after a crash) sees everything that was
acknowledged. An append returns once every in-sync replica has it: ``acks=all`` (idempotent
producer), or ``acks=1`` without retries on a single-broker cluster, where the leader is the only
replica (``?acks=all|1`` overrides the choice). Reads use one consumer that stays assigned to
every partition the factory reads, all paused but the one being read, with a 1 ms
``retry_backoff_ms`` (the client's idle-poll sleep). Every client refreshes its cluster metadata
1 ms after the previous refresh, not kafka-python's fixed 100 ms (:func:`_quick_metadata_refresh`):
a new ledger's first append or read waits for that refresh.

Counters: besides the port's, ``round_trips`` counts the broker requests a call waited for (a
produce acknowledgement, an offsets lookup, a fetch poll, an admin request), per handle; the
factory's ``stats`` sums those of every call, including its own registry work.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import parse_qs, urlparse

from engine.counters import Counters
from engine.errors import BackendUnavailable, ConfigError, LedgerError, LedgerNotFound, LedgerSealed, TxnbenchError
from engine.ids import Design, TxnID
from engine.ledger import CursorState, LedgerFactory, ManagedLedger, entry_kind
from engine.records import Entry, EntryData, MarkerKind, Position

with warnings.catch_warnings():
    # kafka-python 3.0 loads its protocol schemas through importlib.resources' legacy API,
    # which warns on every schema under Python 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.errors as kerrors
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, OffsetSpec

REGISTRY_TOPIC = "__txnbench_ledgers"
CURSORS_TOPIC = "__txnbench_cursors"
TOPIC_PREFIX = "txnbench_"
_MAX_TOPIC = 249  # Kafka's limit on topic-name length

DEFAULT_CONNECT_TIMEOUT_MS = 3_000
_ACKS = ("auto", "all", "1")  # auto: 1 on a single-broker cluster, else all
_CONSUMER_BACKOFF_MS = 1
_METADATA_BACKOFF_MS = 1
# How a broker refuses a produce it did not write: a ledger's topic created a moment ago, whose
# leader the client's metadata names before the broker has taken the partition up (single node:
# a few ms after creation; the first append then comes that soon, see _quick_metadata_refresh).
# Sending again cannot duplicate the entry, unlike a timeout, after which it may have been written.
_REFUSED = (kerrors.NotLeaderForPartitionError, kerrors.LeaderNotAvailableError)
_REFUSED_PAUSE_S = 0.002
DEFAULT_REQUEST_TIMEOUT_MS = 10_000

_LEDGER_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
_SYSTEM_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1 << 20),
    "min.cleanable.dirty.ratio": "0.2",
}

# kafka-python errors meaning "the broker cannot be reached or did not answer in time".
_UNREACHABLE: tuple[type[BaseException], ...] = (
    kerrors.KafkaConnectionError,
    kerrors.KafkaTimeoutError,
    kerrors.NodeNotReadyError,
    kerrors.RequestTimedOutError,
    kerrors.BrokerNotAvailableError,
    kerrors.MetadataEmptyBrokerList,
    OSError,
)


def topic_for(name: str) -> str:
    """The Kafka topic of ledger ``name``: deterministic, legal (``[A-Za-z0-9_-]``, at most 249
    characters) and distinct for distinct names (sha1 suffix)."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9-]+", "_", name).strip("_")
    room = _MAX_TOPIC - len(TOPIC_PREFIX) - len(digest) - 1
    return f"{TOPIC_PREFIX}{readable[:room]}_{digest}"


@contextmanager
def translated(url: str, action: str, failure: type[TxnbenchError] = LedgerError) -> Iterator[None]:
    """The one place where kafka-python exceptions become txnbench errors: an unreachable
    broker is BackendUnavailable, any other driver error ``failure``."""
    try:
        yield
    except _UNREACHABLE as exc:
        raise BackendUnavailable(f"kafka at {url} is unreachable ({action}: {exc})") from exc
    except kerrors.KafkaError as exc:
        raise failure(f"kafka at {url}: {action} failed: {type(exc).__name__}: {exc}") from exc


# --- record encoding -----------------------------------------------------------------------------


def _encode_entry(data: EntryData) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) of a ledger record: fields in headers, the payload as JSON value."""
    headers = [("size", str(data.size).encode()), ("ts", str(data.publish_ts_us).encode())]
    if data.msg is not None:
        headers.append(("msg", data.msg.encode()))
    if data.txn is not None:
        t = data.txn
        headers.append(("txn", f"{t.design.value}:{t.most_bits}:{t.least_bits}".encode()))
    if data.marker is not None:
        headers.append(("marker", data.marker.value.encode()))
    key = data.key.encode() if data.key is not None else None
    # Kafka wants a key or a value; an empty value means "no payload" (JSON is never empty).
    value = json.dumps(data.payload, separators=(",", ":")).encode() if data.payload is not None else b""
    return key, value, headers


def _decode_entry(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> EntryData:
    h = {k: v.decode() for k, v in headers}
    txn = None
    if "txn" in h:
        design, most, least = h["txn"].split(":")
        txn = TxnID(Design(design), int(most), int(least))
    return EntryData(
        size=int(h["size"]),
        publish_ts_us=int(h["ts"]),
        msg=h.get("msg"),
        txn=txn,
        marker=MarkerKind(h["marker"]) if "marker" in h else None,
        key=key.decode() if key is not None else None,
        payload=json.loads(value) if value else None,
    )


def _pos(p: Position) -> list[int]:
    return [p.ledger_id, p.entry_id]


def _encode_cursor(state: CursorState) -> bytes:
    doc = {"mark_delete": _pos(state.mark_delete), "acked": [_pos(p) for p in state.individually_acked]}
    return json.dumps(doc, separators=(",", ":")).encode()


def _decode_cursor(value: bytes) -> CursorState:
    doc = json.loads(value)
    return CursorState(Position(*doc["mark_delete"]), tuple(Position(*p) for p in doc["acked"]))


def _cursor_key(ledger: str, cursor: str) -> bytes:
    return json.dumps([ledger, cursor], separators=(",", ":")).encode()


# --- factory ----------------------------------------------------------------------------------------


@dataclass(eq=False)
class _LedgerState:
    """What the factory knows of one ledger: registry fields (durable on the broker) and cached
    offsets, cursors and listeners (volatile, rebuilt by the next factory)."""

    topic: str
    ledger_id: int
    sealed: bool
    trimmed: int  # durable trim point: every offset below it is deleted
    start: int | None = None  # log start offset; None until a handle is opened
    end: int | None = None  # log end offset (next offset)
    deleted: bool = False
    cursors: dict[str, CursorState] = field(default_factory=dict)
    listeners: dict[int, list[Callable[[Position], None]]] = field(default_factory=dict)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, 0)


def _quick_metadata_refresh(*clients: Any) -> None:
    """Let each client refresh its cluster metadata 1 ms after the last refresh instead of 100.

    Opening a ledger creates its topic, and the first append to it (or read of it) waits for the
    client to learn the topic's leader: kafka-python 3.0.12's connection manager builds its
    ``ClusterMetadata`` without the client's ``retry_backoff_ms``, so that refresh waits out the
    default 100 ms since the previous one (65-100 ms per new ledger, 6.4 s of a 15.8 s v4 replay
    of the many-participants sample). Failed refreshes still back off exponentially (KIP-580,
    ``connection_delay``). A client without the attribute (another kafka-python) is left as is."""
    for client in clients:
        cluster = getattr(client, "_metadata", None) or getattr(getattr(client, "_manager", None), "cluster", None)
        config = getattr(cluster, "config", None)
        if isinstance(config, dict) and "retry_backoff_ms" in config:
            config["retry_backoff_ms"] = _METADATA_BACKOFF_MS


class KafkaLedgerFactory(LedgerFactory):
    """Managed ledgers in a Kafka broker reached at ``bootstrap`` (``host:port[,host:port]``)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        namespace: str = "",
        acks: str = "auto",
    ) -> None:
        if acks not in _ACKS:
            raise ConfigError(f"kafka://{bootstrap}: acks must be one of {', '.join(_ACKS)}, got {acks!r}")
        self.url = f"kafka://{bootstrap}"
        # Ledger names are stored as ``namespace + name``: runs (or tests) sharing a broker
        # each see only their own ledgers.
        self._ns = namespace
        self.stats = Counters()
        self._timeout_s = request_timeout_ms / 1000
        self._states: dict[str, _LedgerState] = {}
        self._next_read: dict[TopicPartition, int] = {
            TopicPartition(REGISTRY_TOPIC, 0): 0,
            TopicPartition(CURSORS_TOPIC, 0): 0,
        }
        # offsets of the records this factory wrote to each system topic, not yet caught up with
        self._own: dict[TopicPartition, set[int]] = {tp: set() for tp in self._next_read}
        self._handles = itertools.count(1)
        self._closed = False
        # The consumer stays assigned to every partition this factory has read (system topics and
        # ledgers), all paused but the one being read: re-assigning it for each read would make
        # kafka-python refresh metadata and sleep ``retry_backoff_ms`` before the first fetch.
        self._assigned: set[TopicPartition] = set()
        self._active: TopicPartition | None = None
        self._gone: set[TopicPartition] = set()  # deleted ledgers' partitions, still assigned
        self._admin: Any = None
        self._producer: Any = None
        self._consumer: Any = None
        common = {
            "bootstrap_servers": bootstrap.split(","),
            "client_id": "txnbench-ledgers",
            "bootstrap_timeout_ms": connect_timeout_ms,
            "request_timeout_ms": request_timeout_ms,
            "reconnect_backoff_max_ms": 1_000,
        }
        try:
            with self._driver("connect"):
                self._admin = KafkaAdminClient(**common)
                # The ledger contract: an append is durable once it returns, i.e. on every
                # in-sync replica (acks=all, as BookKeeper's ack quorum in a Pulsar ledger). On
                # a single broker the leader is the only replica, so acks=1 is the same guarantee
                # without the delayed-produce purgatory (measured: ~40% faster per append); it
                # needs idempotence off in kafka-python 3, and then retries stay off too (a
                # retried append could land twice: a lost reply may mean "appended").
                self._rt()
                single = acks == "auto" and len(self._admin.describe_cluster().get("brokers", ())) == 1
                self.acks = "1" if single or acks == "1" else "all"
                durable: dict[str, Any] = {"acks": "all"} if self.acks == "all" else {
                    "acks": 1, "enable_idempotence": False, "retries": 0}
                self._producer = KafkaProducer(
                    **common,
                    **durable,
                    linger_ms=0,
                    allow_auto_create_topics=False,
                    max_block_ms=request_timeout_ms,
                    delivery_timeout_ms=request_timeout_ms + 5_000,
                )
                self._consumer = KafkaConsumer(
                    **common,
                    group_id=None,
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",
                    allow_auto_create_topics=False,
                    # Reads ask only for offsets known to exist; a fetch must never park on the
                    # broker, or the next read (after a seek) waits for it.
                    fetch_max_wait_ms=0,
                    # KafkaConsumer._poll_once sleeps retry_backoff_ms whenever a poll finds no
                    # fetch in flight, which a seek followed by a fast (fetch_max_wait_ms=0)
                    # response makes the rule: 100 ms per read by default. Our reads are bounded
                    # by their own deadline, so back off 1 ms.
                    retry_backoff_ms=_CONSUMER_BACKOFF_MS,
                )
                _quick_metadata_refresh(self._producer, self._consumer, self._admin)
                self._ensure_system_topics()
            self._catch_up()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: str) -> KafkaLedgerFactory:
        """``kafka://host:port[,host:port...][?connect_timeout_ms=N&request_timeout_ms=N&namespace=P&acks=A]``."""
        parsed = urlparse(url)
        hosts = parsed.netloc.split(",") if parsed.netloc else []
        if parsed.scheme != "kafka" or not hosts or any(not re.fullmatch(r"[^:/]+:\d+", h) for h in hosts):
            raise ConfigError(f"bad Kafka URL {url!r}; expected kafka://host:port")
        query = parse_qs(parsed.query)
        unknown = set(query) - {"connect_timeout_ms", "request_timeout_ms", "namespace", "acks"}
        if unknown:
            raise ConfigError(f"{url}: unknown option(s) {', '.join(sorted(unknown))}")
        from engine.backends import query_int

        return cls(
            ",".join(hosts),
            connect_timeout_ms=query_int(url, "connect_timeout_ms", DEFAULT_CONNECT_TIMEOUT_MS),
            request_timeout_ms=query_int(url, "request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS),
            namespace=query.get("namespace", [""])[0],
            acks=query.get("acks", ["auto"])[0],
        )

    # --- LedgerFactory ---

    def open(self, name: str) -> KafkaManagedLedger:
        self._catch_up()
        external, name = name, self._ns + name
        st = self._states.get(name)
        if st is not None and not self._load_offsets(st):
            # Registered but its topic is gone: a delete was interrupted by a crash. Finish it;
            # the name then gets a new ledger (and ledger id), as after a completed delete.
            self._forget(name, st)
            st = None
        if st is None:
            topic = topic_for(name)
            # A topic that exists already is the (empty) leftover of a crash before its registry
            # record; it is adopted, with the new ledger id.
            fresh = self._create_topic(topic, _LEDGER_TOPIC_CONFIG)
            value = self._registry_value(topic, None)
            meta = self._send(REGISTRY_TOPIC, name.encode(), value, f"create ledger {name}")
            st = self._apply_registry(name, value, meta.offset)
            assert st is not None
            if fresh:
                st.start = st.end = 0
            elif not self._load_offsets(st):
                raise LedgerError(f"kafka at {self.url}: topic {topic} of ledger {name} vanished while opening it")
        with self._driver(f"assign {st.topic}"):
            # assigned (paused) now: the client fetches its metadata before the first read needs it
            self._add(st.tp, paused=True)
        return KafkaManagedLedger(external, st, self, next(self._handles), key=name)

    def exists(self, name: str) -> bool:
        self._catch_up()
        return self._ns + name in self._states

    def names(self, prefix: str = "") -> list[str]:
        self._catch_up()
        start = self._ns + prefix
        return sorted(n[len(self._ns):] for n in self._states if n.startswith(start))

    def delete(self, name: str) -> None:
        self._catch_up()
        name = self._ns + name
        st = self._states.get(name)
        if st is None:
            return
        # Topic first, registry tombstone last: a crash in between leaves a registered ledger
        # without a topic, and the next ``open`` finishes the delete.
        with self._driver(f"delete ledger {name}"):
            self._rt()
            self._unassign(st.tp)
            try:
                self._admin.delete_topics([st.topic])
            except kerrors.UnknownTopicOrPartitionError:
                pass
        self._forget(name, st)

    def purge(self) -> int:
        """Delete every ledger of this factory's namespace (a run's cleanup) in a few requests:
        one topic deletion for all, then every cursor tombstone, then every registry tombstone
        (each batch sent at once and waited for; the order is :meth:`delete`'s). Returns how many."""
        self._catch_up()
        mine = {n: st for n, st in self._states.items() if n.startswith(self._ns)}
        if not mine:
            return 0
        with self._driver("delete ledgers"):
            for st in mine.values():
                self._unassign(st.tp)
            self._rt()
            try:
                self._admin.delete_topics([st.topic for st in mine.values()])
            except kerrors.UnknownTopicOrPartitionError:  # one was gone: the rest one by one
                for name in list(mine):
                    self.delete(name[len(self._ns):])
                return len(mine)
            for topic, keys in ((CURSORS_TOPIC, [_cursor_key(n, c) for n, st in mine.items() for c in st.cursors]),
                                (REGISTRY_TOPIC, [n.encode() for n in mine])):
                futures = [self._producer.send(topic, value=None, key=k, partition=0) for k in keys]
                self._rt(1 if futures else 0)
                for future in futures:
                    self._mine(topic, future.get(timeout=self._timeout_s + 5).offset)
        for name, st in mine.items():
            st.deleted = True
            st.listeners.clear()
            self._states.pop(name, None)
        return len(mine)

    def _forget(self, name: str, st: _LedgerState) -> None:
        """Tombstone the cursors, then the registry record, of a ledger whose topic is gone."""
        pending = [self._send(CURSORS_TOPIC, _cursor_key(name, c), None, "delete cursor", wait=False) for c in st.cursors]
        with self._driver(f"delete cursors of {name}"):
            for future in pending:
                self._rt()
                self._mine(CURSORS_TOPIC, future.get(timeout=self._timeout_s + 5).offset)
        self._send(REGISTRY_TOPIC, name.encode(), None, f"delete ledger {name}")
        st.deleted = True
        st.listeners.clear()
        self._states.pop(name, None)

    def close(self) -> None:
        for client in (self._consumer, self._producer, self._admin):
            if client is not None:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        client.close()
                except Exception:  # noqa: BLE001 - closing a broken client must not mask the cause
                    pass
        self._consumer = self._producer = self._admin = None
        self._closed = True

    # --- driver calls (every kafka-python call goes through these) ---

    @contextmanager
    def _driver(self, action: str) -> Iterator[None]:
        if self._closed:
            raise LedgerError(f"kafka ledgers at {self.url}: {action} after the factory was closed")
        with translated(self.url, action):
            yield

    def _rt(self, n: int = 1, handle: ManagedLedger | None = None) -> None:
        self.stats["round_trips"] += n
        if handle is not None:
            handle.stats["round_trips"] += n

    def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        action: str,
        *,
        headers: list[tuple[str, bytes]] | None = None,
        wait: bool = True,
        handle: ManagedLedger | None = None,
    ) -> Any:
        """Produce one record to partition 0 of ``topic``; with ``wait``, return its
        RecordMetadata once acknowledged (a later waited send also flushes unwaited ones). A waited
        send the broker refused unwritten (:data:`_REFUSED`) goes again, until the request timeout."""
        with self._driver(action):
            deadline = time.monotonic() + self._timeout_s
            while True:
                future = self._producer.send(topic, value=value, key=key, headers=headers or [], partition=0)
                if not wait:
                    return future
                self._rt(1, handle)
                try:
                    meta = future.get(timeout=self._timeout_s + 5)
                    break
                except _REFUSED:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(_REFUSED_PAUSE_S)  # the failed send asked for fresh metadata: let it come
        self._mine(topic, meta.offset)
        return meta

    def _mine(self, topic: str, offset: int) -> None:
        """Note a registry or cursor record this factory wrote (and applied to its cache as it
        did): catching up need not read it back."""
        own = self._own.get(TopicPartition(topic, 0))
        if own is not None:
            own.add(offset)

    def _create_topic(self, topic: str, config: Mapping[str, str], *, wait: bool = False) -> bool:
        """Create ``topic`` with one partition (``wait``: until its leader is known); False if it
        already existed."""
        spec = {topic: {"num_partitions": 1, "replication_factor": -1, "configs": dict(config)}}
        with self._driver(f"create topic {topic}"):
            self._rt()
            try:
                self._admin.create_topics(spec, wait_for_metadata=wait)
            except kerrors.TopicAlreadyExistsError:
                # another process (a second run or test worker on this broker) is creating it:
                # its leader may not be known yet, and a read before then fails
                if wait:
                    self._rt()
                    self._admin.wait_for_topics([topic], timeout_ms=int(self._timeout_s * 1000))
                return False
        return True

    def _ensure_system_topics(self) -> None:
        self._rt()
        existing = set(self._admin.list_topics())
        for topic in (REGISTRY_TOPIC, CURSORS_TOPIC):
            if topic not in existing:
                self._create_topic(topic, _SYSTEM_TOPIC_CONFIG, wait=True)

    def _load_offsets(self, st: _LedgerState) -> bool:
        """Read the ledger's start and end offsets from the broker; False if its topic is gone.
        Re-applies a durable trim the broker lost (a hard-killed broker restores its log start
        offset from a checkpoint written only every minute)."""
        with self._driver(f"list offsets of {st.topic}"):
            self._rt(2)
            try:
                # The admin client reports a missing topic at once; the consumer would retry.
                start = self._admin.list_partition_offsets({st.tp: OffsetSpec.EARLIEST})[st.tp].offset
                end = self._admin.list_partition_offsets({st.tp: OffsetSpec.LATEST})[st.tp].offset
            except kerrors.UnknownTopicOrPartitionError:
                return False
        st.start, st.end = start, end
        if start < min(st.trimmed, end):
            st.start = self._delete_records(st, min(st.trimmed, end), None)
        return True

    def _delete_records(self, st: _LedgerState, before: int, handle: ManagedLedger | None) -> int:
        """Kafka delete-records below offset ``before``; returns the new log start offset."""
        with self._driver(f"delete records of {st.topic}"):
            self._rt(1, handle)
            result = self._admin.delete_records({st.tp: before})
        low = result.get(st.tp, {}).get("low_watermark", before)
        return int(low)

    def _fetch(self, tp: TopicPartition, first: int, last: int, handle: ManagedLedger | None = None) -> list[Any]:
        """Records of ``tp`` with ``first <= offset <= last`` (``last`` < end offset)."""
        out: list[Any] = []
        if first > last:
            return out
        c = self._consumer
        with self._driver(f"read {tp.topic}"):
            self._activate(tp)
            c.seek(tp, first)
            deadline = time.monotonic() + self._timeout_s
            nxt = first
            while nxt <= last:
                remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
                batch = c.poll(timeout_ms=remaining_ms, max_records=min(last - nxt + 1, 100_000))
                self._rt(1, handle)
                records = batch.get(tp, [])
                for r in records:
                    if r.offset > last:
                        break
                    out.append(r)
                    nxt = r.offset + 1
                if not records:
                    # Compacted topics have gaps: the consumer may already be past ``last``.
                    if c.position(tp) > last:
                        break
                    if time.monotonic() >= deadline:
                        raise kerrors.KafkaTimeoutError(f"no records from {tp.topic} at offset {nxt} (up to {last})")
        return out

    def _activate(self, tp: TopicPartition) -> None:
        """Make ``tp`` the one unpaused partition of the consumer's assignment (added to it the
        first time: that read alone waits for the topic's metadata)."""
        c = self._consumer
        if not self._add(tp) and tp != self._active:  # a partition added now starts unpaused
            c.resume(tp)
        if self._active is not None and self._active != tp and self._active in self._assigned:
            c.pause(self._active)
        self._active = tp

    def _add(self, tp: TopicPartition, paused: bool = False) -> bool:
        """Add ``tp`` to the consumer's assignment (False if it is in it already). Growing the
        assignment is the one moment it changes: deleted ledgers' partitions leave it here
        (kafka-python stops fetching the kept ones after an assign that only shrinks it,
        measured: reads time out); kept ones keep their state (paused, position)."""
        self._gone.discard(tp)  # a ledger deleted and re-created keeps its topic name
        if tp in self._assigned:
            return False
        self._assigned -= self._gone
        self._gone.clear()
        self._assigned.add(tp)
        self._consumer.assign(sorted(self._assigned))
        if paused:
            self._consumer.pause(tp)
        return True

    def _unassign(self, tp: TopicPartition) -> None:
        """A deleted ledger's partition: paused now, out of the assignment at its next change."""
        if tp in self._assigned:
            if self._active == tp:
                self._active = None
            self._consumer.pause(tp)
            self._gone.add(tp)

    # --- registry and cursors ---

    @staticmethod
    def _registry_value(topic: str, ledger_id: int | None, sealed: bool = False, trimmed: int = 0) -> bytes:
        doc = {"topic": topic, "ledger_id": ledger_id, "sealed": sealed, "trimmed": trimmed}
        return json.dumps(doc, separators=(",", ":")).encode()

    def _write_registry(self, name: str, st: _LedgerState, action: str, handle: ManagedLedger | None) -> None:
        value = self._registry_value(st.topic, st.ledger_id, st.sealed, st.trimmed)
        self._send(REGISTRY_TOPIC, name.encode(), value, action, handle=handle)

    def _apply_registry(self, name: str, value: bytes | None, offset: int) -> _LedgerState | None:
        if value is None:
            st = self._states.pop(name, None)
            if st is not None:
                st.deleted = True
            return None
        doc = json.loads(value)
        ledger_id = doc["ledger_id"] if doc["ledger_id"] is not None else offset
        st = self._states.get(name)
        if st is None or st.ledger_id != ledger_id:
            if st is not None:
                st.deleted = True
            st = self._states[name] = _LedgerState(doc["topic"], ledger_id, doc["sealed"], doc.get("trimmed", 0))
        else:
            st.sealed, st.trimmed = doc["sealed"], doc.get("trimmed", 0)
        return st

    def _apply_cursor(self, key: bytes, value: bytes | None) -> None:
        ledger, cursor = json.loads(key)
        st = self._states.get(ledger)
        if st is None:  # its ledger was deleted (the delete tombstones cursors first)
            return
        if value is None:
            st.cursors.pop(cursor, None)
        else:
            st.cursors[cursor] = _decode_cursor(value)

    def _catch_up(self) -> None:
        """Apply the registry and cursor records written since the last catch-up."""
        tps = list(self._next_read)
        with self._driver("read ledger registry"):
            self._rt()
            ends = {tp: o.offset for tp, o in self._admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST)).items()}
        for tp in tps:
            start, end = self._next_read[tp], ends[tp]
            own = self._own[tp]
            mine = sum(1 for o in own if start <= o < end)
            own.difference_update([o for o in own if o < end])
            if start >= end or mine == end - start:  # nothing new, or only our own writes
                self._next_read[tp] = max(start, end)
                continue
            for r in self._fetch(tp, start, end - 1):
                if tp.topic == REGISTRY_TOPIC:
                    self._apply_registry(r.key.decode(), r.value, r.offset)
                else:
                    self._apply_cursor(r.key, r.value)
            self._next_read[tp] = end


class KafkaManagedLedger(ManagedLedger):
    """A handle on one Kafka-backed ledger. Differs from the port's general wording in two
    documented ways: it never rolls over, and :meth:`trim` works per entry."""

    rolls_over = False
    trims_whole_ledgers = False

    def __init__(self, name: str, state: _LedgerState, factory: KafkaLedgerFactory, handle: int,
                 key: str | None = None) -> None:
        self.name = name
        self._key = key if key is not None else name  # the registry / cursor key (namespaced)
        self.stats = Counters()
        self._st = state
        self._f = factory
        self._handle = handle

    def _live(self) -> _LedgerState:
        if self._st.deleted:
            raise LedgerNotFound(f"ledger {self.name} was deleted")
        return self._st

    def _offset_range(self, p: Position) -> int:
        """Map a position onto this ledger's offsets: earlier ledger ids sort before every
        offset, later ones after."""
        lid = self._st.ledger_id
        if p.ledger_id == lid:
            return p.entry_id
        return -1 if p.ledger_id < lid else 1 << 62

    def append(self, data: EntryData) -> Position:
        st = self._live()
        if st.sealed:
            raise LedgerSealed(f"ledger {self.name} is sealed; append refused")
        key, value, headers = _encode_entry(data)
        meta = self._f._send(st.topic, key, value, f"append to {self.name}", headers=headers, handle=self)
        pos = Position(st.ledger_id, meta.offset)
        assert st.end is not None
        st.end = max(st.end, meta.offset + 1)
        self.stats["appends"] += 1
        self.stats["appends." + entry_kind(data)] += 1
        for listeners in list(st.listeners.values()):
            for listener in listeners:
                listener(pos)
        return pos

    def read(self, start: Position, end: Position, max_entries: int) -> list[Entry]:
        st = self._live()
        assert st.start is not None and st.end is not None
        first = max(self._offset_range(start), 0, st.start)
        last = min(self._offset_range(end), st.end - 1)
        if max_entries < 1:
            last = first - 1
        last = min(last, first + max_entries - 1)
        records = self._f._fetch(st.tp, first, last, handle=self)
        out = [
            Entry(Position(st.ledger_id, r.offset), _decode_entry(r.key, r.value, r.headers))
            for r in records
        ]
        self.stats["reads"] += 1
        self.stats["entries_read"] += len(out)
        return out

    def last_confirmed(self) -> Position:
        assert self._st.end is not None
        return Position(self._st.ledger_id, self._st.end - 1)

    def first_position(self) -> Position:
        assert self._st.start is not None
        return Position(self._st.ledger_id, self._st.start)

    def next_position(self, position: Position) -> Position:
        st = self._st
        assert st.start is not None and st.end is not None
        if position.ledger_id == st.ledger_id:
            return Position(st.ledger_id, position.entry_id + 1)
        if position.ledger_id < st.ledger_id:
            return self.first_position()
        return Position(st.ledger_id, st.end)

    def seal(self) -> None:
        st = self._live()
        if st.sealed:
            return
        st.sealed = True
        try:
            self._f._write_registry(self._key, st, f"seal {self.name}", self)
        except BaseException:
            st.sealed = False
            raise

    @property
    def sealed(self) -> bool:
        return self._st.sealed

    def trim(self, before: Position) -> int:
        """Delete every entry before ``before`` (Kafka delete-records; entry granularity)."""
        st = self._live()
        assert st.start is not None and st.end is not None
        target = min(max(self._offset_range(before), 0), st.end)
        if target <= st.start:
            return 0
        if target > st.trimmed:  # the trim point first, durably: a later open re-applies it
            previous, st.trimmed = st.trimmed, target
            try:
                self._f._write_registry(self._key, st, f"trim {self.name}", self)
            except BaseException:
                st.trimmed = previous
                raise
        low = self._f._delete_records(st, target, self)
        removed = low - st.start
        st.start = low
        self.stats["trimmed_entries"] += removed
        return removed

    def is_trimmed(self, position: Position) -> bool:
        st = self._st
        assert st.start is not None
        return position.ledger_id == st.ledger_id and 0 <= position.entry_id < st.start

    def entry_count(self) -> int:
        assert self._st.start is not None and self._st.end is not None
        return self._st.end - self._st.start

    def add_listener(self, listener: Callable[[Position], None]) -> None:
        self._st.listeners.setdefault(self._handle, []).append(listener)

    def save_cursor(self, name: str, state: CursorState) -> None:
        st = self._live()
        self._f._send(CURSORS_TOPIC, _cursor_key(self._key, name), _encode_cursor(state), "save cursor", handle=self)
        st.cursors[name] = state
        self.stats["cursor_writes"] += 1

    def load_cursor(self, name: str) -> CursorState | None:
        return self._st.cursors.get(name)

    def delete_cursor(self, name: str) -> None:
        st = self._live()
        if name not in st.cursors:
            return
        self._f._send(CURSORS_TOPIC, _cursor_key(self._key, name), None, "delete cursor", handle=self)
        del st.cursors[name]

    def cursor_names(self) -> list[str]:
        return sorted(self._st.cursors)

    def close(self) -> None:
        self._st.listeners.pop(self._handle, None)
