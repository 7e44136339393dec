"""Readiness probe for scripts/kafka.sh: one Kafka Metadata request (v1) over a plain socket.

Exit 0 when the broker at 127.0.0.1:PORT answers with itself in the broker list (it is then
registered and unfenced, and serves metadata), 1 otherwise. Standard library only, so the
script works before any virtualenv exists.
"""

from __future__ import annotations

import socket
import struct
import sys


def _string(buf: bytes, at: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", buf, at)
    at += 2
    if n < 0:
        return None, at
    return buf[at : at + n].decode(), at + n


def brokers(host: str, port: int, timeout: float) -> list[tuple[int, str, int]]:
    client = b"txnbench-probe"
    # Metadata v1: api_key 3, version 1, correlation id 7, client id; topics = [] (none).
    body = struct.pack(">hhih", 3, 1, 7, len(client)) + client + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(body)) + body)
        head = _recv(sock, 4)
        (size,) = struct.unpack(">i", head)
        buf = _recv(sock, size)
    (corr, count) = struct.unpack_from(">ii", buf, 0)
    if corr != 7:
        raise ValueError(f"correlation id {corr}")
    at, out = 8, []
    for _ in range(count):
        (node,) = struct.unpack_from(">i", buf, at)
        h, at = _string(buf, at + 4)
        (p,) = struct.unpack_from(">i", buf, at)
        _rack, at = _string(buf, at + 4)
        out.append((node, h or "", p))
    return out


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def main() -> int:
    port = int(sys.argv[1])
    try:
        found = brokers("127.0.0.1", port, 2.0)
    except (OSError, ValueError, struct.error):
        return 1
    return 0 if any(p == port for _node, _host, p in found) else 1


if __name__ == "__main__":
    sys.exit(main())
