"""What a capture of the broker's port shows: the Pulsar binary protocol's requests and their
answers, timed on the wire (``txnbench wire``).

The trace client times an operation from its call to its future's completion; a capture of the
connection (``tcpdump -i lo -w FILE "tcp port PORT"``) times the same request from the frame
that leaves the client to the frame that answers it, so the two set apart what the broker takes
from what the client adds. It settled that a v5 plain send queued behind an END_TXN is answered
late by the broker, not read late by the client (datasets/validation/README.md, session 41).

Frames follow ``PulsarApi.proto``: ``[total size][command size][BaseCommand]`` and, for a
message, its checksum, metadata and payload inside the total size. Only connections whose
opening (SYN) the capture holds are decoded: a stream joined mid-way has no frame boundary.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from engine.errors import ConfigError

# BaseCommand.Type (PulsarApi.proto): request -> its answers, and the field of the answer's key
SEND, SEND_RECEIPT, SEND_ERROR, PRODUCER = 6, 7, 8, 5
NEW_TXN, ADD_PARTITION, ADD_SUBSCRIPTION, END_TXN = 50, 52, 54, 56
REQUESTS = {NEW_TXN: "new_txn", ADD_PARTITION: "add_partition_to_txn", ADD_SUBSCRIPTION: "add_subscription_to_txn",
            END_TXN: "end_txn"}  # each answered by type + 1, matched by request_id (field 1)
MAX_FRAME = 64 << 20  # far above any frame (Pulsar's default maxMessageSize is 5 MB)
_LINK_HEADER = {1: 14, 113: 16, 276: 20, 101: 0, 0: 4}  # Ethernet, Linux SLL, SLL2, raw IP, BSD loopback
_PCAP_MAGIC = {0xA1B2C3D4: ("<", False), 0xD4C3B2A1: (">", False), 0xA1B23C4D: ("<", True), 0x4D3CB2A1: (">", True)}


class Frame(NamedTuple):
    ts_us: int
    to_broker: bool
    conn: int  # the client's port
    type: int
    fields: dict[int, list[int | bytes]]  # the command's own message (BaseCommand's field for it)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    r = s = 0
    while True:
        if i >= len(b):
            raise ValueError("a varint runs past its message")
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return r, i


def _fields(b: bytes) -> dict[int, list[int | bytes]]:
    """A protobuf message's fields: varints as ints, length-delimited ones as bytes."""
    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        wire = key & 7
        v: int | bytes
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"protobuf wire type {wire}")
        out.setdefault(key >> 3, []).append(v)
    return out


def _packets(path: Path) -> Iterator[tuple[int, int, int, int, int, bytes]]:
    """(ts µs, source port, destination port, TCP flags, sequence number, payload) of each TCP
    packet over IPv4 in a pcap file."""
    try:
        f = path.open("rb")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the capture ({e.strerror})") from None
    with f:
        head = f.read(24)
        magic = struct.unpack("<I", head[:4])[0] if len(head) == 24 else None
        if magic == 0x0A0D0D0A:
            raise ConfigError(f"{path}: a pcapng file; write the capture as pcap (tcpdump -w does by default)")
        if magic not in _PCAP_MAGIC:
            raise ConfigError(f"{path}: not a pcap capture (tcpdump -i lo -w FILE \"tcp port PORT\")")
        order, nanos = _PCAP_MAGIC[magic]
        link = struct.unpack(order + "I", head[20:24])[0]
        if link not in _LINK_HEADER:
            raise ConfigError(f"{path}: link type {link} is not one this reads (Ethernet, Linux cooked, raw IP, loopback)")
        skip = _LINK_HEADER[link]
        n = 0
        while len(rec := f.read(16)) == 16:
            n += 1
            sec, frac, kept, size = struct.unpack(order + "IIII", rec)
            data = f.read(kept)
            if kept < size:
                raise ConfigError(f"{path}: packet {n} was cut to {kept} of {size} bytes; capture with -s 0")
            ip = data[skip:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue  # not TCP over IPv4
            ihl = (ip[0] & 15) * 4
            tcp = ip[ihl:struct.unpack(">H", ip[2:4])[0]]
            sport, dport, seq = struct.unpack(">HHI", tcp[:8])
            ts = sec * 1_000_000 + (frac // 1000 if nanos else frac)
            yield ts, sport, dport, tcp[13], seq, tcp[(tcp[12] >> 4) * 4:]


@dataclass
class _Stream:
    next_seq: int
    buf: bytes = b""


def frames(path: str | Path, port: int, skipped: list[int] | None = None) -> Iterator[Frame]:
    """The Pulsar frames on ``port``'s connections in ``path``, in capture order; the client
    ports of connections opened before the capture (no SYN seen) go to ``skipped``."""
    streams: dict[tuple[int, bool], _Stream] = {}
    unseen: set[int] = set()
    for ts, sport, dport, flags, seq, payload in _packets(Path(path)):
        if port not in (sport, dport):
            continue
        to_broker = dport == port
        conn = sport if to_broker else dport
        key = (conn, to_broker)
        if flags & 0x02:  # SYN: the stream's data starts one past it
            streams[key] = _Stream((seq + 1) % (1 << 32))
            continue
        st = streams.get(key)
        if st is None:
            if payload:
                unseen.add(conn)
            continue
        if not payload:
            continue  # a bare ack (or a FIN, which takes a sequence number of its own)
        ahead = (seq - st.next_seq) % (1 << 32)
        if ahead >= 1 << 31:  # it starts before what was read: a retransmission, maybe with new bytes
            payload = payload[(1 << 32) - ahead:]
            if not payload:
                continue
        elif ahead:
            raise ConfigError(f"{path}: the capture misses {ahead:,} bytes of the connection from port {conn} "
                              f"before {ts} µs (packets dropped by the capture?)")
        st.next_seq = (st.next_seq + len(payload)) % (1 << 32)
        buf = st.buf + payload
        i = 0
        while len(buf) - i >= 8:
            total, size = struct.unpack(">II", buf[i:i + 8])
            if total > MAX_FRAME or size + 4 > total:
                raise ConfigError(f"{path}: connection from port {conn}: {buf[i:i + 8]!r} at {ts} µs is not a Pulsar "
                                  f"frame's size; is {port} the broker's binary-protocol port?")
            if len(buf) - i < 4 + total:
                break
            try:
                command = _fields(buf[i + 8:i + 8 + size])
                kind = int(command[1][0])
                own = next((v[0] for k, v in command.items() if k != 1 and isinstance(v[0], bytes)), b"")
                body = _fields(own) if isinstance(own, bytes) else {}
            except (ValueError, KeyError, IndexError) as e:
                raise ConfigError(f"{path}: connection from port {conn}: a frame at {ts} µs is not a Pulsar "
                                  f"command ({e}); is {port} the broker's binary-protocol port?") from None
            yield Frame(ts, to_broker, conn, kind, body)
            i += 4 + total
        st.buf = buf[i:]
    if skipped is not None:
        skipped.extend(sorted(unseen - {c for c, _ in streams}))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


@dataclass
class WireSummary:
    """Each request kind's times on the wire (ms), and the plain sends queued behind an END_TXN
    of their connection: their receipts' times after its answer, to the txn's segments or not."""

    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    behind_end_txn_ms: dict[str, list[float]] = field(default_factory=dict)
    unanswered: dict[str, int] = field(default_factory=dict)
    skipped_connections: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        def stats(xs: list[float]) -> str:
            return f"n={len(xs):,} p50 {_pct(xs, .5):.2f} p90 {_pct(xs, .9):.2f} p99 {_pct(xs, .99):.2f} ms"

        out = [f"{kind}: {stats(xs)}" for kind, xs in sorted(self.latency_ms.items()) if xs]
        out += [f"plain send queued behind an end_txn, its receipt after the end_txn's answer, {where}: {stats(xs)}"
                for where, xs in sorted(self.behind_end_txn_ms.items()) if xs]
        out += [f"{kind}: {n:,} unanswered in the capture" for kind, n in sorted(self.unanswered.items()) if n]
        if self.skipped_connections:
            out.append(f"{len(self.skipped_connections)} connection(s) opened before the capture, not decoded "
                       f"(client ports {', '.join(map(str, self.skipped_connections))})")
        return out or ["no Pulsar requests in the capture"]

    def to_json(self) -> dict[str, object]:
        def stats(xs: list[float]) -> dict[str, float | int]:
            return {"count": len(xs), "p50_ms": _pct(xs, .5), "p90_ms": _pct(xs, .9), "p99_ms": _pct(xs, .99)}

        return {"latency": {k: stats(v) for k, v in sorted(self.latency_ms.items()) if v},
                "plain_send_behind_end_txn": {k: stats(v) for k, v in sorted(self.behind_end_txn_ms.items()) if v},
                "unanswered": dict(sorted(self.unanswered.items())), "skipped_connections": self.skipped_connections}


def run_start_us(events: str | Path) -> int:
    """When a replay's measured run started (epoch µs): the ``ready`` event's ``t0_epoch_ms`` in
    the trace client's events (``pulsar-events-DESIGN.jsonl``, jvm/PROTOCOL.md)."""
    import json

    try:
        with Path(events).open() as f:
            for n, line in enumerate(f, 1):
                try:
                    e = json.loads(line)
                except ValueError:
                    raise ConfigError(f"{events}: line {n} is not JSON") from None
                if isinstance(e, dict) and e.get("ev") == "ready" and isinstance(e.get("t0_epoch_ms"), int):
                    return int(e["t0_epoch_ms"]) * 1000
    except OSError as e:
        raise ConfigError(f"{events}: cannot read the client's events ({e.strerror})") from None
    raise ConfigError(f"{events}: no ready event with t0_epoch_ms (a trace client's pulsar-events-DESIGN.jsonl?)")


def summarize(path: str | Path, port: int, since_us: int = 0) -> WireSummary:
    """What the capture shows from ``since_us`` (epoch µs; every frame before it is decoded but
    not counted)."""
    skipped: list[int] = []
    out = WireSummary()
    topic_of: dict[tuple[int, int], str] = {}  # (conn, producer id) -> topic
    sends: dict[tuple[int, int, int], tuple[int, bool]] = {}  # (conn, producer, sequence) -> (ts, in a txn)
    answered_sends: list[tuple[tuple[int, int, int], int]] = []
    asked: dict[tuple[int, int], tuple[int, int, tuple[int, int]]] = {}  # (conn, request id) -> (ts, type, txn)
    segments: dict[tuple[int, int], set[str]] = {}  # txn id -> the partitions it added
    ends: dict[int, list[tuple[int, int, tuple[int, int]]]] = {}  # conn -> END_TXN (sent, answered, txn)
    for fr in frames(path, port, skipped):
        b = fr.fields
        if fr.ts_us < since_us and fr.type != PRODUCER:  # a producer made before still names its topic
            continue
        if fr.to_broker and fr.type == PRODUCER and 1 in b and 2 in b:
            topic_of[(fr.conn, int(b[2][0]))] = bytes(b[1][0]).decode()  # type: ignore[arg-type]
        elif fr.to_broker and fr.type == SEND:
            sends[(fr.conn, int(b[1][0]), int(b[2][0]))] = (fr.ts_us, 4 in b)  # txnid_least_bits: a txn send
        elif not fr.to_broker and fr.type in (SEND_RECEIPT, SEND_ERROR):
            answered_sends.append(((fr.conn, int(b[1][0]), int(b[2][0])), fr.ts_us))
        elif fr.to_broker and fr.type in REQUESTS:
            txn = (int(b.get(2, [0])[0]), int(b.get(3, [0])[0]))
            asked[(fr.conn, int(b[1][0]))] = (fr.ts_us, fr.type, txn)
            if fr.type == ADD_PARTITION:
                segments.setdefault(txn, set()).update(bytes(p).decode() for p in b.get(4, []))  # type: ignore[arg-type]
        elif not fr.to_broker and fr.type - 1 in REQUESTS:
            sent = asked.pop((fr.conn, int(b[1][0])), None)
            if sent is not None and sent[1] == fr.type - 1:
                out.latency_ms.setdefault(REQUESTS[sent[1]], []).append((fr.ts_us - sent[0]) / 1000)
                if sent[1] == END_TXN:
                    ends.setdefault(fr.conn, []).append((sent[0], fr.ts_us, sent[2]))
    for _, kind, _ in asked.values():
        out.unanswered[REQUESTS[kind]] = out.unanswered.get(REQUESTS[kind], 0) + 1
    for key, answered in answered_sends:
        send = sends.pop(key, None)
        if send is None:
            continue
        ts, in_txn = send
        out.latency_ms.setdefault("send (txn)" if in_txn else "send (plain)", []).append((answered - ts) / 1000)
        if in_txn:
            continue
        during = [e for e in ends.get(key[0], ()) if e[0] <= ts <= e[1]]
        if during:
            _, end_answered, txn = max(during, key=lambda e: e[1])
            where = "to its txn's segments" if topic_of.get(key[:2]) in segments.get(txn, ()) else "to other segments"
            out.behind_end_txn_ms.setdefault(where, []).append((answered - end_answered) / 1000)
    if sends:
        out.unanswered["send"] = len(sends)
    out.skipped_connections = skipped
    return out
