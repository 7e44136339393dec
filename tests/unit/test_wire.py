"""``txnbench wire``: Pulsar requests timed on a capture of the broker's port (bench.pulsar.wire),
on pcap files written here packet by packet."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from bench.cli import main
from bench.pulsar.wire import summarize
from engine.errors import ConfigError

BROKER, CLIENT, LATE = 6650, 50000, 50001


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


def _pb(*fields: tuple[int, int | bytes]) -> bytes:
    out = b""
    for num, v in fields:
        if isinstance(v, int):
            out += _varint(num << 3) + _varint(v)
        else:
            out += _varint(num << 3 | 2) + _varint(len(v)) + v
    return out


def _frame(kind: int, *fields: tuple[int, int | bytes]) -> bytes:
    """One Pulsar frame: [total][command size][BaseCommand{type, its own message}]."""
    command = _pb((1, kind), (kind, _pb(*fields)))
    return struct.pack(">II", 4 + len(command), len(command)) + command


def _packet(ts_us: int, sport: int, dport: int, seq: int, payload: bytes = b"", syn: bool = False) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02 if syn else 0x18, 65535, 0, 0)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0, bytes(4), bytes(4))
    data = bytes(12) + b"\x08\x00" + ip + tcp + payload  # Ethernet
    return struct.pack("<IIII", ts_us // 1_000_000, ts_us % 1_000_000, len(data), len(data)) + data


class _Capture:
    def __init__(self) -> None:
        self.packets: list[bytes] = []
        self.seq = {(CLIENT, True): 1000, (CLIENT, False): 9000, (LATE, True): 300}

    def syn(self, ts: int, conn: int, to_broker: bool) -> None:
        seq = self.seq[(conn, to_broker)]
        self.packets.append(_packet(ts, *self._ports(conn, to_broker), seq, syn=True))
        self.seq[(conn, to_broker)] = seq + 1

    def send(self, ts: int, conn: int, to_broker: bool, payload: bytes) -> int:
        seq = self.seq[(conn, to_broker)]
        self.packets.append(_packet(ts, *self._ports(conn, to_broker), seq, payload))
        self.seq[(conn, to_broker)] = seq + len(payload)
        return seq

    @staticmethod
    def _ports(conn: int, to_broker: bool) -> tuple[int, int]:
        return (conn, BROKER) if to_broker else (BROKER, conn)

    def write(self, path: Path, link: int = 1) -> Path:
        path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, link) + b"".join(self.packets))
        return path


def _scenario(tmp_path: Path) -> Path:
    """A txn (id 7) adds seg-a, then its END_TXN takes 10 ms; a plain send to seg-a and one to
    seg-b wait behind it; one more plain send after."""
    c, t0 = _Capture(), 1_700_000_000_000_000
    c.syn(t0, CLIENT, True)
    c.syn(t0, CLIENT, False)
    up = lambda ms, *frames: c.send(t0 + int(ms * 1000), CLIENT, True, b"".join(frames))  # noqa: E731
    down = lambda ms, *frames: c.send(t0 + int(ms * 1000), CLIENT, False, b"".join(frames))  # noqa: E731
    up(0, _frame(5, (1, b"seg-a"), (2, 1)), _frame(5, (1, b"seg-b"), (2, 2)))  # two PRODUCERs in one packet
    up(0.1, _frame(50, (1, 1)))  # NEW_TXN
    down(1.1, _frame(51, (1, 1), (2, 7), (3, 0)))
    add = _frame(52, (1, 2), (2, 7), (3, 0), (4, b"seg-a"))
    up(1.2, add[:5])  # a frame split over two packets
    up(1.25, add[5:])
    down(1.5, _frame(53, (1, 2)))
    seq = up(2, _frame(56, (1, 3), (2, 7), (3, 0), (4, 0)))  # END_TXN commit
    c.packets.append(_packet(t0 + 2_500, CLIENT, BROKER, seq, _frame(56, (1, 3), (2, 7), (3, 0), (4, 0))))  # resent
    send_a = _frame(6, (1, 1), (2, 0))
    seq = up(5, send_a[:6])  # plain SEND to seg-a, its first bytes, then resent whole
    c.packets.append(_packet(t0 + 5_000, CLIENT, BROKER, seq, send_a))
    c.seq[(CLIENT, True)] = seq + len(send_a)
    up(6, _frame(6, (1, 2), (2, 0)))  # plain SEND to seg-b
    down(12, _frame(57, (1, 3)))
    down(13, _frame(7, (1, 2), (2, 0)))
    down(14, _frame(7, (1, 1), (2, 0)))
    up(20, _frame(6, (1, 2), (2, 1)), _frame(6, (1, 1), (2, 1), (4, 7)))  # a plain send, and a txn send
    down(21.5, _frame(7, (1, 2), (2, 1)))
    c.send(t0 + 22_000, LATE, True, _frame(18))  # a connection opened before the capture
    return c.write(tmp_path / "cap.pcap")


def test_each_request_is_timed_from_its_frame_to_its_answer(tmp_path: Path) -> None:
    s = summarize(_scenario(tmp_path), BROKER)
    assert s.latency_ms == {"new_txn": [1.0], "add_partition_to_txn": [0.25], "end_txn": [10.0],
                            "send (plain)": [7.0, 9.0, 1.5]}
    # queued behind the END_TXN: seg-a is the txn's, seg-b is not
    assert s.behind_end_txn_ms == {"to other segments": [1.0], "to its txn's segments": [2.0]}
    assert s.unanswered == {"send": 1} and s.skipped_connections == [LATE]
    assert "send (plain): n=3 p50 7.00 p90 9.00 p99 9.00 ms" in s.lines()
    later = summarize(tmp_path / "cap.pcap", BROKER, since_us=1_700_000_000_000_000 + 19_000)
    assert later.latency_ms == {"send (plain)": [1.5]} and later.behind_end_txn_ms == {}


def test_the_cli_prints_the_summary_and_writes_it_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap = _scenario(tmp_path)
    events = tmp_path / "pulsar-events-v5.jsonl"
    events.write_text('{"ev":"warmed"}\n{"ev":"ready","t0_epoch_ms":1700000000019}\n')
    assert main(["wire", "--pcap", str(cap), "--port", str(BROKER), "--events", str(events),
                 "--json", str(tmp_path / "w.json")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "send (plain): n=1 p50 1.50 p90 1.50 p99 1.50 ms"
    assert json.loads((tmp_path / "w.json").read_text())["latency"]["send (plain)"]["count"] == 1


@pytest.mark.parametrize(("content", "words"), [
    (b"\x0a\x0d\x0d\x0a" + bytes(40), "pcapng"),
    (b"not a capture at all, no", "not a pcap capture"),
])
def test_what_is_not_a_pcap_is_refused_by_name(tmp_path: Path, content: bytes, words: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.cap"
    bad.write_bytes(content)
    assert main(["wire", "--pcap", str(bad), "--port", "6650"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and words in err


def test_a_cut_packet_or_another_protocol_on_the_port_is_an_error(tmp_path: Path) -> None:
    c = _Capture()
    c.syn(0, CLIENT, True)
    c.send(1, CLIENT, True, _frame(6, (1, 1), (2, 0)))
    cut = bytearray(c.write(tmp_path / "cut.pcap").read_bytes())
    struct.pack_into("<I", cut, 24 + len(c.packets[0]) + 8, 20)  # the second packet's kept length
    (tmp_path / "cut.pcap").write_bytes(bytes(cut[:24 + len(c.packets[0]) + 16 + 20]))
    with pytest.raises(ConfigError, match="cut to 20 of .* bytes; capture with -s 0"):
        summarize(tmp_path / "cut.pcap", BROKER)
    http = _Capture()
    http.syn(0, CLIENT, True)
    http.send(1, CLIENT, True, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises(ConfigError, match="is not a Pulsar frame's size; is 6650 the broker's binary-protocol port"):
        summarize(http.write(tmp_path / "http.pcap"), BROKER)
    junk = _Capture()
    junk.syn(0, CLIENT, True)
    junk.send(1, CLIENT, True, struct.pack(">II", 7, 3) + b"\x08\xff\xff")  # a varint that runs out
    with pytest.raises(ConfigError, match="is not a Pulsar command"):
        summarize(junk.write(tmp_path / "junk.pcap"), BROKER)
    gap = _Capture()
    gap.syn(0, CLIENT, True)
    gap.seq[(CLIENT, True)] += 10  # ten bytes the capture never saw
    gap.send(1, CLIENT, True, _frame(6, (1, 1), (2, 0)))
    with pytest.raises(ConfigError, match="misses 10 bytes of the connection from port 50000"):
        summarize(gap.write(tmp_path / "gap.pcap"), BROKER)
