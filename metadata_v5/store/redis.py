"""``redis://host:port[/db][?prefix=P&stream_maxlen=N&reply_spin_us=US]``: the MetadataStore on a
real redis-server (>= 7.0) with redis-py.

Layout under the key prefix ``P`` (default ``txnbench:``):

* ``P r:<key>`` — a record: a hash of its fields plus ``$v`` (version) and ``$ix`` (its index
  entries as JSON, so an update or delete removes them without knowing the old fields). Keys
  carrying a ``{txnId}`` hash tag keep a txn's records in one cluster slot.
* ``P keys`` — every record key in one sorted set (score 0) for ordered prefix listing (ZRANGEBYLEX).
* ``P i:<index>`` — a sorted set per index: numeric indexes use the score (ZRANGEBYSCORE),
  lexicographic ones encoded members at score 0 (ZRANGEBYLEX).
* ``P s:<prefix>`` — sequence counters; ``P rev`` — the store revision; ``P specs`` and
  ``P schema`` — declared indexes and their version.
* ``P log`` — the change stream: one XADD per applied batch (``MAXLEN ~ stream_maxlen``) written
  by the same Lua script as the records, so no change is ever missing from it.

Every write is ONE Lua script that evaluates all its conditions and reads before its first write
(a Lua error after a write would not roll back). The global ``rev``, ``keys``, index and stream
keys make it a single-node (or single-shard) design: Redis Cluster would reject the cross-slot
script; the hash tags still document the co-location PIP-473 relies on.

Watches read the stream from the last entry seen, so a dropped connection loses nothing: the next
read resumes where it stopped. A watching handle's write script also returns the stream after its
cursor (its own entry included) in the same reply, and a non-blocking :meth:`poll_watches` right
after it delivers that without a round trip of its own; a poll with no write since uses XREAD. Revisions in the stream are
consecutive, so a reader that fell behind the MAXLEN cap notices the gap and raises.

With ``exclusive=1`` (what a run's own namespace gets: :func:`~metadata_v5.store.registry.namespaced_metadata_url`)
every writer of the prefix is a handle in this process, so a handle keeps the records it read,
wrote or saw on the change stream, valid while it knows of every revision this process has seen
(:data:`_LATEST`): a :meth:`get` (or a point watch) of such a record is answered without a round
trip. That removes the engine's header reads that precede a write in the same request (the
ownership read and the buffer's header read before a transactional publish, the two reads before
END_TXN's CAS), so each costs one round trip. Pulsar's store cannot do this (each of those reads
goes to the store there), so the meters (``reads``) still count every read the model issues, as
the embedded store does; only ``round_trips`` shows what went to the server.

Independent batches the engine issues at once (:meth:`RedisMetadataStore.batches`, e.g. the
buffer's one delete per op record) go as one pipeline on the held connection: one round trip,
each batch still its own script, counted as if sent one by one.

A command polls for its reply for up to ``reply_spin_us`` (default 200) before the blocking read
(:func:`_await_reply`): a process asleep in ``recv`` pays a wake-up from another CPU on every
round trip, more than the server's own work on this machine.

Driver exceptions are translated in one place (:meth:`RedisMetadataStore._rt`), which also counts
round trips. Writes are never retried (a lost reply could mean "applied"); reads are retried once
on a fresh connection.
"""

from __future__ import annotations

import builtins

import json
import os
import select
import socket
import struct
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import redis as redislib
from hiredis import pack_command as _pack_command
from redis.backoff import NoBackoff
from redis.retry import Retry

from engine.errors import BackendUnavailable, ConfigError, MetadataError
from metadata_v5.store.port import (
    ABSENT, Bounds, Capabilities, ChangeKind, Check, Delete, DeleteSequence, IndexEntry,
    IndexSpec, MetadataStore, Op, OpResult, each_batch, Put, PutSequential, Record, Watch, condition_error, conditions, count_partitions, new_counters, validate_fields, validate_ops,
    validate_user_key, _Bound, Callback, RESERVED_PREFIX,
)
from metadata_v5.store.watches import Change, WatchHub

DEFAULT_PREFIX = "txnbench:"
DEFAULT_STREAM_MAXLEN = 100_000
_XREAD_COUNT = 1000
_CACHE_MAX = 100_000  # records an exclusive handle keeps; beyond, it starts again empty
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # json.dumps builds one per call

# (url, prefix) -> the highest store revision any handle of this process has seen: an exclusive
# handle's cache is current only while it has applied every change up to this revision
_LATEST: dict[tuple[str, str], int] = {}

# ARGV: prefix, schema version, request JSON, stream maxlen, change-stream cursor ('' = none), count
# -> {'ok', rev, changes, index writes, {stream entries after the cursor}, this batch's stream id ('' if
# nothing changed), key, version, ...} or an error tuple
_BATCH = r"""
local P = ARGV[1]
if (redis.call('GET', P .. 'schema') or '0') ~= ARGV[2] then return {'schema'} end
local req = cjson.decode(ARGV[3])
-- 1. conditions (no writes yet)
for _, c in ipairs(req.c) do
  local v = redis.call('HGET', P .. 'r:' .. c[1], '$v')
  if c[2] == '0' then
    if v then return {'conflict', c[1], c[2], v} end
  elseif v ~= c[2] then
    return {'conflict', c[1], c[2], v or ''}
  end
end
-- 2. reads: sequence numbers, old versions and index entries (still no writes)
local seqs, seqtouched, olds, written = {}, {}, {}, {}
local issued = {}  -- prefix -> the highest seq this batch assigned (it outlives a forgetting)
local dropped = false  -- a sequence counter that existed is dropped: a change (takes a revision)
for i, op in ipairs(req.o) do
  if op.t == 'q' or op.t == 'ds' then
    if seqs[op.p] == nil then
      local cur = redis.call('GET', P .. 's:' .. op.p)
      if cur then seqs[op.p] = tonumber(cur) else seqs[op.p] = false end
    end
    seqtouched[op.p] = true
    if op.t == 'q' then
      if seqs[op.p] == false then
        -- no counter: continue after the highest sequential key under the prefix, or the
        -- highest this batch assigned there before forgetting the counter
        local top = redis.call('ZREVRANGEBYLEX', P .. 'keys', '(' .. op.p .. '\255', '[' .. op.p, 'LIMIT', 0, 1)
        local n = issued[op.p] or 0
        if #top > 0 then
          local rest = string.sub(top[1], #op.p + 1)
          if #rest == 20 and string.match(rest, '^%d+$') and tonumber(rest) > n then n = tonumber(rest) end
        end
        seqs[op.p] = n
      end
      seqs[op.p] = seqs[op.p] + 1
      issued[op.p] = seqs[op.p]
      op.k = op.p .. string.format('%020d', seqs[op.p])
    else
      if seqs[op.p] ~= false then dropped = true end
      seqs[op.p] = false
    end
  end
  if op.t == 'p' or op.t == 'q' or op.t == 'd' then
    if written[op.k] then return {'dup', op.k} end
    written[op.k] = true
    local h = redis.call('HMGET', P .. 'r:' .. op.k, '$v', '$ix')
    local old = {v = h[1], ix = {}}
    if h[2] then old.ix = cjson.decode(h[2]) end
    olds[i] = old
  end
end
local changed = dropped
for i, op in ipairs(req.o) do
  if op.t == 'p' or op.t == 'q' or (op.t == 'd' and olds[i].v) then changed = true end
end
-- 3. writes
local rev = ''
if changed then rev = tostring(redis.call('INCR', P .. 'rev')) end
local out = {'ok', rev, 0, 0, {}, ''}
local log = {}
local nchanges, nindex = 0, 0
for i, op in ipairs(req.o) do
  if op.t == 'c' then
    table.insert(out, op.k)
    table.insert(out, redis.call('HGET', P .. 'r:' .. op.k, '$v') or '')
  elseif op.t == 'ds' then
    table.insert(out, op.p)
    table.insert(out, '')
  elseif op.t == 'd' and not olds[i].v then
    table.insert(out, op.k)
    table.insert(out, '')
  else
    local rk = P .. 'r:' .. op.k
    local old = olds[i]
    local oldby, newby, names, newix = {}, {}, {}, {}
    for _, e in ipairs(old.ix) do oldby[e[1]] = e; table.insert(names, e[1]) end
    if op.t ~= 'd' then
      for _, x in ipairs(op.x) do
        local e = {x[1], x[2] .. op.k, x[3]}
        newby[x[1]] = e
        table.insert(newix, e)
        if not oldby[x[1]] then table.insert(names, x[1]) end
      end
    end
    local ixlog = {}
    for _, name in ipairs(names) do
      local o, n = oldby[name], newby[name]
      local same = o and n and o[2] == n[2] and o[3] == n[3]
      if o and not same then redis.call('ZREM', P .. 'i:' .. name, o[2]); nindex = nindex + 1 end
      if n and not same then redis.call('ZADD', P .. 'i:' .. name, n[3], n[2]); nindex = nindex + 1 end
      table.insert(ixlog, {name, o and o[2] or false, o and o[3] or false, n and n[2] or false, n and n[3] or false})
    end
    redis.call('DEL', rk)
    nchanges = nchanges + 1
    if op.t == 'd' then
      redis.call('ZREM', P .. 'keys', op.k)
      table.insert(out, op.k)
      table.insert(out, old.v)
      table.insert(log, {op.k, 'd', false, ixlog})
    else
      redis.call('HSET', rk, '$v', rev, '$ix', cjson.encode(newix), unpack(op.f))
      redis.call('ZADD', P .. 'keys', 0, op.k)
      table.insert(out, op.k)
      table.insert(out, rev)
      table.insert(log, {op.k, 'p', op.f, ixlog})
    end
  end
end
for p, _ in pairs(seqtouched) do
  if seqs[p] == false then redis.call('DEL', P .. 's:' .. p) else redis.call('SET', P .. 's:' .. p, seqs[p]) end
end
if changed then
  out[6] = redis.call('XADD', P .. 'log', 'MAXLEN', '~', ARGV[4], '*', 'r', rev, 'c', cjson.encode(log))
end
out[3] = nchanges
out[4] = nindex
-- 4. the change stream after the caller's cursor (this batch's entry included), in the same reply:
-- the poll that follows a write needs no round trip of its own
if ARGV[5] ~= '' then
  out[5] = redis.call('XRANGE', P .. 'log', '(' .. ARGV[5], '+', 'COUNT', ARGV[6])
end
return out
"""

# ARGV: prefix, key -> {rev, last stream id, flat hash} (get and watch)
_GET_WATCH = r"""
local P = ARGV[1]
local last = redis.call('XREVRANGE', P .. 'log', '+', '-', 'COUNT', 1)
local id = '0-0'
if #last > 0 then id = last[1][1] end
return {redis.call('GET', P .. 'rev') or '0', id, redis.call('HGETALL', P .. 'r:' .. ARGV[2])}
"""

# ARGV: prefix, index, numeric(0/1), reverse(0/1), lo, hi, limit(-1 = all), with records(0/1)
# -> {rev, last stream id, {member, score, ...}, {flat hash per entry} or {}}
_RANGE = r"""
local P = ARGV[1]
local ik = P .. 'i:' .. ARGV[2]
local items
if ARGV[3] == '1' then
  if ARGV[4] == '1' then
    items = redis.call('ZREVRANGEBYSCORE', ik, ARGV[6], ARGV[5], 'WITHSCORES', 'LIMIT', 0, ARGV[7])
  else
    items = redis.call('ZRANGEBYSCORE', ik, ARGV[5], ARGV[6], 'WITHSCORES', 'LIMIT', 0, ARGV[7])
  end
else
  local raw
  if ARGV[4] == '1' then
    raw = redis.call('ZREVRANGEBYLEX', ik, ARGV[6], ARGV[5], 'LIMIT', 0, ARGV[7])
  else
    raw = redis.call('ZRANGEBYLEX', ik, ARGV[5], ARGV[6], 'LIMIT', 0, ARGV[7])
  end
  items = {}
  for _, m in ipairs(raw) do table.insert(items, m); table.insert(items, '0') end
end
local recs = {}
if ARGV[8] == '1' then
  for i = 1, #items, 2 do
    local m = items[i]
    local key = m
    if ARGV[3] ~= '1' then key = string.sub(m, string.find(m, '\0', 1, true) + 1) end
    table.insert(recs, redis.call('HGETALL', P .. 'r:' .. key))
  end
end
local last = redis.call('XREVRANGE', P .. 'log', '+', '-', 'COUNT', 1)
local id = '0-0'
if #last > 0 then id = last[1][1] end
return {redis.call('GET', P .. 'rev') or '0', id, items, recs}
"""

# ARGV: prefix, key prefix, limit(-1 = all) -> {key, flat hash, key, flat hash, ...}
_LIST = r"""
local P = ARGV[1]
local keys = redis.call('ZRANGEBYLEX', P .. 'keys', '[' .. ARGV[2], '(' .. ARGV[2] .. '\255', 'LIMIT', 0, ARGV[3])
local out = {}
for _, k in ipairs(keys) do
  table.insert(out, k)
  table.insert(out, redis.call('HGETALL', P .. 'r:' .. k))
end
return out
"""

# ARGV: prefix, then (name, spec JSON, index prefix) per index, defined in order; stops at the
# first that is defined differently or whose prefix holds records ({status, detail, schema}).
_DEFINE = r"""
local P = ARGV[1]
local schema = redis.call('GET', P .. 'schema') or '0'
for i = 2, #ARGV, 3 do
  local name, spec, prefix = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local cur = redis.call('HGET', P .. 'specs', name)
  if cur then
    if cur ~= spec then return {'different', cur, schema, name} end
  else
    local first = redis.call('ZRANGEBYLEX', P .. 'keys', '[' .. prefix, '(' .. prefix .. '\255', 'LIMIT', 0, 1)
    if #first > 0 then return {'nonempty', first[1], schema, name} end
    redis.call('HSET', P .. 'specs', name, spec)
    schema = tostring(redis.call('INCR', P .. 'schema'))
  end
end
return {'ok', '', schema, ''}
"""

# ARGV: prefix. The declared indexes, the schema version, the change stream's last entry id and
# the revision, read atomically on the handle's own connection (a pipeline would take another).
_SCHEMA = r"""
local P = ARGV[1]
local last = redis.call('XREVRANGE', P .. 'log', '+', '-', 'COUNT', 1)
return {redis.call('HGETALL', P .. 'specs'), redis.call('GET', P .. 'schema') or '0',
        last[1] and last[1][1] or '0-0', redis.call('GET', P .. 'rev') or '0'}
"""

_UNAVAILABLE_REPLIES = ("LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "BUSY", "CLUSTERDOWN")
SOCKET_TIMEOUT_S = 10  # a reply (or a send) that takes longer: the server is unavailable
DEFAULT_REPLY_SPIN_US = 200  # see _await_reply
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT


class _Connection(redislib.Connection):
    """redis-py's TCP connection with its read and write timeout kept by the kernel
    (``SO_RCVTIMEO``/``SO_SNDTIMEO``) on a blocking socket: a Python socket timeout makes CPython
    poll() before every send and every recv (two more system calls a round trip: 3 % of a v5
    replay on Redis). A timed-out call fails with ``EAGAIN``, which redis-py and :func:`_call`
    raise as a connection error."""

    def _connect(self) -> socket.socket:
        sock: socket.socket = super()._connect()
        if self.socket_timeout is None:
            interval = struct.pack("ll", SOCKET_TIMEOUT_S, 0)  # struct timeval
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, interval)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, interval)
        return sock


def _arr(value: Any) -> builtins.list[Any]:
    """cjson encodes an empty Lua table as ``{}``: read it as an empty list."""
    return [] if value == {} or value is None else value


def _record(key: str, flat: Sequence[str]) -> Record | None:
    if not flat:
        return None
    it = iter(flat)
    fields = dict(zip(it, it))
    version = int(fields.pop("$v"))
    fields.pop("$ix", None)
    return Record(key, fields, version)


def _why(e: Exception) -> str:
    """A driver error in words: a read or write the kernel timed out (``_Connection``) surfaces in
    redis-py as a connection error over ``EAGAIN``; say what it is."""
    if isinstance(e.__context__, BlockingIOError) or isinstance(e.__cause__, BlockingIOError):
        return f"no reply within {SOCKET_TIMEOUT_S} s (the server does not answer)"
    return str(e)


def _await_reply(sock: socket.socket, spin_s: float) -> None:
    """Wait up to ``spin_s`` for a reply to arrive, polling without sleeping, before the parser's
    blocking read. A process asleep in ``recv`` is woken from another CPU when the reply lands,
    which on this machine costs more than the server's work: a loopback GET takes 55 us blocking
    and 22 us polled, and a v5 replay on Redis runs in 0.18 s instead of 0.23
    (``benchmarks/backends.py``). Each turn yields the CPU (``sched_yield``), so a server that
    shares this core runs meanwhile; a reply slower than ``spin_s`` gets the blocking read."""
    deadline = 0.0
    while True:
        try:
            sock.recv(1, _PEEK)  # data, or b"" at EOF: the read that follows will not wait
            return
        except BlockingIOError:
            now = time.perf_counter()
            if not deadline:
                deadline = now + spin_s
            elif now > deadline:
                return
            os.sched_yield()
        except (OSError, ValueError):
            return  # a broken or closed socket: the read that follows raises it


def _call(conn: Any, command: tuple[Any, ...], spin_s: float = 0.0) -> Any:
    """One command on a held redis-py connection, below its per-call layers (the host string it
    formats for every reply, the health check, the packer's generic argument handling): packed by
    hiredis, sent on the socket, read by the connection's own parser. Errors as redis-py raises
    them; anything that interrupts the exchange (a socket error, a timeout, Ctrl-C) drops the
    connection, which could otherwise hand this reply to the next command; an error reply is raised.
    ``spin_s``: how long to poll for the reply first (:func:`_await_reply`)."""
    if conn._sock is None:
        conn.connect()
    try:
        conn._sock.sendall(_pack_command(command))
        if spin_s:
            _await_reply(conn._sock, spin_s)
        reply = conn._parser.read_response()
    except TimeoutError as e:  # socket.timeout on send (the parser raises redis-py's own)
        conn.disconnect()
        raise redislib.exceptions.TimeoutError(f"redis: {e}") from e
    except OSError as e:
        conn.disconnect()
        raise redislib.exceptions.ConnectionError(f"redis: {e}") from e
    except BaseException:
        conn.disconnect()
        raise
    if isinstance(reply, redislib.exceptions.ResponseError):
        raise reply
    return reply


def _unapplied(reply: Any) -> bool:
    """A pipelined batch script's reply that applied nothing: the script was flushed, or the
    index schema moved under the payload."""
    return isinstance(reply, redislib.exceptions.NoScriptError) or (isinstance(reply, list) and reply[0] == "schema")


def _fields(flat: Sequence[str]) -> dict[str, str]:
    it = iter(flat)
    return dict(zip(it, it))


def _ops_json(ops: Sequence[Op], specs: dict[str, IndexSpec],
              conds: Sequence[tuple[str, int]]) -> str:
    """The batch script's request; ``ops`` are validated (:func:`validate_ops`) and ``conds`` are
    their :func:`conditions`."""
    out: builtins.list[dict[str, Any]] = []
    for op in ops:
        if isinstance(op, PutSequential):  # first: most writes are op records
            # the key of a sequential put is not known yet: its prefix decides coverage and the
            # script appends the key to the member (members are "<sort part><key>")
            out.append(_write_item({"t": "q", "p": op.prefix}, op.prefix, op.fields, specs))
        elif isinstance(op, Put):
            out.append(_write_item({"t": "p", "k": op.key}, op.key, op.fields, specs))
        elif isinstance(op, Delete):
            out.append({"t": "d", "k": op.key})
        elif isinstance(op, Check):
            out.append({"t": "c", "k": op.key})
        else:
            out.append({"t": "ds", "p": op.prefix})
    return _encode({"c": [[k, str(v)] for k, v in conds], "o": out})


def _write_item(item: dict[str, Any], covered: str, fields: Mapping[str, str],
                specs: dict[str, IndexSpec]) -> dict[str, Any]:
    entries = []
    for spec in specs.values():
        if not covered.startswith(spec.prefix):
            continue
        sk = spec.sort_key(fields)
        if sk is None:
            continue
        if isinstance(sk, int):
            entries.append([spec.name, "", str(sk)])
        else:
            entries.append([spec.name, spec.encode(sk) + "\x00", "0"])
    item["f"] = [x for kv in fields.items() for x in kv]
    item["x"] = entries
    return item


class RedisMetadataStore(MetadataStore):
    """A client handle (its own connection pool) on the store under ``prefix`` at ``url``."""

    capabilities = Capabilities(native_indexes=True, native_sequences=True, range_watch_events=True,
                                in_process=False)

    def __init__(self, url: str, *, prefix: str = DEFAULT_PREFIX,
                 stream_maxlen: int = DEFAULT_STREAM_MAXLEN, exclusive: bool = False,
                 reply_spin_us: int = DEFAULT_REPLY_SPIN_US) -> None:
        if "{" in prefix or "}" in prefix:
            raise ConfigError(f"redis key prefix {prefix!r} must not contain braces (hash tags)")
        self.url = url
        self.prefix = prefix
        self.stream_maxlen = stream_maxlen
        self.exclusive = exclusive
        if reply_spin_us < 0:
            raise ConfigError(f"redis at {url}: reply_spin_us must be >= 0, got {reply_spin_us}")
        self.reply_spin_us = reply_spin_us
        self._spin_s = reply_spin_us / 1e6
        self._ns = (url, prefix)
        # exclusive handles: records as of revision _known_rev (None: known absent)
        self._cache: dict[str, Record | None] = {}
        self._known_rev = 0
        self._known_id = "0-0"
        self._counters = new_counters()
        self._hub = WatchHub(self._counters)
        self._closed = False
        self._specs: dict[str, IndexSpec] = {}
        self._schema = "0"
        try:
            # one connection per handle, held (a handle is used by one thread at a time): no pool
            # checkout per command; pipelines take a second one from the same pool
            self.client = redislib.Redis.from_url(
                url, decode_responses=True, protocol=2, socket_connect_timeout=2, socket_timeout=None,
                connection_class=_Connection,
                retry=Retry(NoBackoff(), 0), health_check_interval=0, single_connection_client=True,
                # no CLIENT SETINFO on connect: two round trips per connection that buy nothing here
                driver_info=None)
        except ValueError as e:
            raise ConfigError(f"bad redis URL {url!r}: {e}") from None
        except redislib.exceptions.RedisError as e:
            raise BackendUnavailable(f"redis at {url}: {e}") from e
        self._scripts = {name: self.client.register_script(src) for name, src in
                         (("batch", _BATCH), ("get_watch", _GET_WATCH), ("range", _RANGE), ("list", _LIST),
                          ("define", _DEFINE), ("schema", _SCHEMA))}
        self._cursor = "0-0"  # last change-stream id seen
        self._last_rev = 0     # revision of that entry
        # True while the last reply (a write's) brought the stream up to date: a non-blocking
        # poll then has nothing to read that a poll at that instant would have seen
        self._fresh = False
        # (key, round-trip count, get_watch reply) of the last get: see watch()
        self._snapshot: tuple[str, int, builtins.list[Any]] | None = None
        self._run_id: str | None = None  # the server's, read with the schema: see _rt
        self._reconnecting = False
        self._call_later: Callable[[int, Callable[[], None]], object] | None = None
        self._poll_armed = False
        self._load_schema(with_cursor=True)
        self._seen(self._last_rev, self._cursor)

    @classmethod
    def from_url(cls, url: str) -> RedisMetadataStore:
        """``redis://host:port[/db][?prefix=P&stream_maxlen=N&exclusive=0|1&reply_spin_us=US]``; other
        query options go to redis-py. ``reply_spin_us`` (default 200; 0: off) is how long a command
        polls for its reply before a blocking read (:func:`_await_reply`)."""
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        prefix = query.pop("prefix", [DEFAULT_PREFIX])[0]
        try:
            maxlen = int(query.pop("stream_maxlen", [str(DEFAULT_STREAM_MAXLEN)])[0])
        except ValueError:
            raise ConfigError(f"{url}: stream_maxlen must be an integer") from None
        try:
            spin_us = int(query.pop("reply_spin_us", [str(DEFAULT_REPLY_SPIN_US)])[-1])
        except ValueError:
            raise ConfigError(f"{url}: reply_spin_us must be an integer (microseconds)") from None
        exclusive = query.pop("exclusive", ["0"])[-1].lower()
        if exclusive not in ("0", "1", "true", "false", "yes", "no", "on", "off", ""):
            raise ConfigError(f"{url}: exclusive must be 0 or 1, got {exclusive!r}")
        query.pop("degraded", None)  # the registry's wrappers' flags (purge_metadata passes them on)
        query.pop("emulated", None)
        clean = urlunparse(parsed._replace(query=urlencode(query, doseq=True)))
        if not parsed.hostname:
            raise ConfigError(f"redis URL {url!r} needs a host: redis://host:port[/db]")
        return cls(clean, prefix=prefix, stream_maxlen=maxlen, exclusive=exclusive in ("1", "true", "yes", "on"),
                   reply_spin_us=spin_us)

    # -- the one boundary with the driver --

    def _rt(self, fn: Callable[..., Any], *args: Any, idempotent: bool = True, **kw: Any) -> Any:
        """One network call: counted, driver errors translated; idempotent calls retried once on a
        fresh connection after a connection error."""
        if self._closed:
            raise MetadataError("metadata store handle is closed")
        self._check_connection()
        if self._reconnecting:
            self._check_same_server()
        for attempt in (1, 2):
            self._counters["round_trips"] += 1
            try:
                return fn(*args, **kw)
            except (redislib.exceptions.ConnectionError, redislib.exceptions.TimeoutError) as e:
                if idempotent and attempt == 1:
                    self.client.connection_pool.disconnect()
                    self._reconnecting = True
                    self._check_same_server()
                    continue
                raise BackendUnavailable(f"redis at {self.url}: {_why(e)}") from e
            except redislib.exceptions.ResponseError as e:
                if str(e).startswith(_UNAVAILABLE_REPLIES):
                    raise BackendUnavailable(f"redis at {self.url}: {_why(e)}") from e
                raise MetadataError(f"redis at {self.url}: {e}") from e
            except redislib.exceptions.RedisError as e:
                raise BackendUnavailable(f"redis at {self.url}: {_why(e)}") from e
        raise AssertionError("unreachable")

    def _eval(self, name: str, *args: Any, idempotent: bool = True) -> Any:
        """One of this module's scripts, by EVALSHA, through :meth:`_rt`."""
        return self._rt(self._evalsha, self._scripts[name], args, idempotent=idempotent)

    def _evalsha(self, script: Any, args: Sequence[Any]) -> Any:
        """EVALSHA on the held connection through :func:`_call`, without redis-py's layers above
        it (``Script`` -> ``evalsha`` -> ``execute_command`` -> ``Retry`` -> the connection's
        ``send_command``/``read_response``: about 13 us a call on this machine, then 5 % of a
        v5 replay on Redis, ``benchmarks/backends.py``). A server that lost the script
        (``SCRIPT FLUSH``) gets it again, as ``Script`` does."""
        conn = self.client.connection
        try:
            return _call(conn, ("EVALSHA", script.sha, 0, *args), self._spin_s)
        except redislib.exceptions.NoScriptError:
            script.sha = self.client.script_load(script.script)
            return _call(conn, ("EVALSHA", script.sha, 0, *args), self._spin_s)

    def _check_connection(self) -> None:
        """What redis-py's pool does at checkout, for the held connection: one the server closed
        (readable with nothing asked) is dropped before a command is sent on it, so a write is
        never lost to a connection that was already dead (the next command reconnects)."""
        conn = self.client.connection
        if conn is None or conn._sock is None:
            return
        try:
            # one zero-timeout select (redis-py's can_read also formats the host name and peeks):
            # nothing to read is the live, idle connection every complete reply leaves behind
            if not select.select((conn._sock,), (), (), 0)[0]:
                return
        except (OSError, ValueError):
            pass
        conn.disconnect()  # closed by the server (EOF), broken, or holding bytes nobody asked for
        self._reconnecting = True

    def _check_same_server(self) -> None:
        """After a reconnect: the server must be the one this handle started with. A restarted
        redis-server (a new run_id) has lost what the run wrote (txnbench runs it without
        persistence) and its change stream, so going on would report a run that never happened."""
        self._reconnecting = False
        try:
            self._counters["round_trips"] += 1
            run_id = self.client.info("server")["run_id"]
        except redislib.exceptions.RedisError as e:
            raise BackendUnavailable(f"redis at {self.url}: {_why(e)}") from e
        if self._run_id is not None and run_id != self._run_id:
            raise BackendUnavailable(f"redis at {self.url} restarted during the run (server run_id {self._run_id} -> "
                                     f"{run_id}): what the run wrote there is gone; start the run again")
        self._run_id = run_id

    def _load_schema(self, with_cursor: bool = False) -> None:
        if self._run_id is None:  # the server this handle starts with (see _check_same_server)
            self._check_same_server()
        res = self._eval("schema", self.prefix)
        flat = res[0]
        self._specs = {flat[i]: IndexSpec.from_json(flat[i + 1]) for i in range(0, len(flat), 2)}
        self._schema = res[1]
        if with_cursor:
            self._jump_cursor(res[2], int(res[3]))

    def _jump_cursor(self, stream_id: str, revision: int) -> None:
        self._cursor = stream_id
        self._last_rev = revision

    def _drop_connections(self) -> None:
        """Test hook: close every pooled connection (the next call reconnects)."""
        self.client.connection_pool.disconnect()

    def purge(self) -> int:
        """Delete every key under this store's prefix (tests, cleanup). Returns how many."""
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix) + "*"
        keys = self._rt(lambda: list(self.client.scan_iter(match=pattern, count=1000)))
        if keys:
            self._rt(self.client.unlink, *keys)
        return len(keys)

    # -- records --

    def _seen(self, rev: int, stream_id: str) -> None:
        """A reply showed the store at revision ``rev`` (its change-stream entry ``stream_id``). A
        revision this handle has not applied means another writer moved on: what it caches may be
        stale, drop it."""
        if rev > self._known_rev:
            self._cache.clear()
            self._known_rev, self._known_id = rev, stream_id
        if _LATEST.get(self._ns, 0) < rev:
            _LATEST[self._ns] = rev

    def _cached(self, key: str) -> bool:
        return (self.exclusive and key in self._cache and not self._closed
                and self._known_rev == _LATEST.get(self._ns, 0))

    def _keep(self, key: str, record: Record | None) -> None:
        if self.exclusive:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = record

    def get(self, key: str) -> Record | None:
        if self._cached(key):
            self._counters["reads"] += 1  # the model's read, answered from what this process knows
            return self._cache[key]
        # read with the store revision and stream position: a watch on the same key registered
        # right after (the buffer's check-then-watch of a txn header) takes this snapshot
        res = self._eval("get_watch", self.prefix, key)
        self._snapshot = (key, self._counters["round_trips"], res)
        self._counters["reads"] += 1
        record = _record(key, res[2])
        self._seen(int(res[0]), res[1])
        self._keep(key, record)
        return record

    def get_many(self, keys: Sequence[str]) -> builtins.list[Record | None]:
        if not keys:
            return []

        def run() -> builtins.list[Any]:
            pipe = self.client.pipeline(transaction=True)
            for key in keys:
                pipe.execute_command("HGETALL", self.prefix + "r:" + key)
            return pipe.execute()

        res = self._rt(run)
        self._counters["reads"] += len(keys)
        return [_record(k, r if isinstance(r, list) else [x for kv in r.items() for x in kv])
                for k, r in zip(keys, res)]

    def list(self, prefix: str, *, limit: int | None = None) -> builtins.list[Record]:
        flat = self._eval("list", self.prefix, prefix, -1 if limit is None else limit)
        self._counters["lists"] += 1
        out = []
        for i in range(0, len(flat), 2):
            rec = _record(flat[i], flat[i + 1])
            if rec is not None:
                out.append(rec)
        self._counters["listed"] += len(out)
        return out

    def count(self, prefix: str) -> int:
        low = prefix.encode()  # as _LIST bounds it: no UTF-8 key holds the byte 0xff
        return int(self._rt(lambda: self.client.zlexcount(self.prefix + "keys", b"[" + low, b"(" + low + b"\xff")))

    def batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        validate_ops(ops)
        return self._batch(ops)

    def raw_batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        validate_ops(ops, user=False)
        return self._batch(ops)

    def _batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        conds = conditions(ops)
        payload = _ops_json(ops, self._specs, conds)  # ValueError here: nothing sent
        for attempt in (1, 2):
            # with live watches the reply also carries the change stream after our cursor
            cursor = self._cursor if self._hub.has_watches() else ""
            res = self._eval("batch", self.prefix, self._schema, payload, self.stream_maxlen, cursor,
                             _XREAD_COUNT, idempotent=False)
            if res[0] == "schema" and attempt == 1:
                self._load_schema()
                payload = _ops_json(ops, self._specs, conds)
                continue
            break
        return self._applied(ops, conds, res, cursor)

    def _batch_command(self, payload: str, cursor: str) -> tuple[Any, ...]:
        """The batch script's EVALSHA for a pipeline (``cursor``: read the change stream after it; "": not)."""
        return ("EVALSHA", self._scripts["batch"].sha, 0, self.prefix, self._schema, payload, self.stream_maxlen,
                cursor, _XREAD_COUNT)

    def _pipeline(self, commands: Sequence[tuple[Any, ...]]) -> builtins.list[Any]:
        """One round trip on the held connection: every command sent before the first reply is
        read; each command's reply, or its error reply as the exception (not raised)."""
        def run() -> builtins.list[Any]:
            conn = self.client.connection
            assert conn is not None  # a single-connection client holds it from its creation
            conn.send_packed_command(conn.pack_commands(commands))
            if self._spin_s and conn._sock is not None:
                _await_reply(conn._sock, self._spin_s)  # the first reply; the rest come with it or soon after
            replies: builtins.list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redislib.exceptions.ResponseError as e:  # this command's error reply
                    replies.append(e)
            return replies

        return self._rt(run, idempotent=False)

    def batches(self, groups: Sequence[Sequence[Op]]) -> builtins.list[builtins.list[OpResult]]:
        """One pipeline (no MULTI: the batches are independent) of one batch script per group;
        only the last asks for the change stream, which then holds every group's entry. A group
        the server refused unapplied (index schema moved, script flushed) goes again on its own."""
        if len(groups) < 2:
            return [self.batch(ops) for ops in groups]
        for ops in groups:
            validate_ops(ops)
        conds = [conditions(ops) for ops in groups]
        payloads = [_ops_json(ops, self._specs, c) for ops, c in zip(groups, conds)]
        cursor = self._cursor if self._hub.has_watches() else ""
        replies = self._pipeline([self._batch_command(payload, cursor if i == len(payloads) - 1 else "")
                                  for i, payload in enumerate(payloads)])

        def settle(i: int, ops: Sequence[Op]) -> builtins.list[OpResult]:
            res = replies[i]
            if _unapplied(res):
                return self._batch(ops)  # not applied: the script did not run or changed nothing
            if isinstance(res, Exception):
                raise MetadataError(f"redis at {self.url}: {res}")
            return self._applied(ops, conds[i], res, cursor if i == len(groups) - 1 else "")

        return each_batch(groups, settle)

    def _applied(self, ops: Sequence[Op], conds: Sequence[tuple[str, int]], res: builtins.list[Any],
                 cursor: str) -> builtins.list[OpResult]:
        """A batch script's reply: results, counters, cache, and the change stream it carried."""
        if res[0] != "ok":
            self._failed(res)
        c = self._counters
        results = [OpResult(k, int(v) if v != "" else None) for k, v in zip(res[6::2], res[7::2])]
        c["batches"] += 1
        c["writes"] += int(res[2])
        c["index_writes"] += int(res[3])
        written = []
        for op, r in zip(ops, results):
            if isinstance(op, PutSequential):
                c["seq_allocs"] += 1
            elif isinstance(op, (Check, DeleteSequence)):
                continue
            if not r.key.startswith(RESERVED_PREFIX):
                written.append(r.key)
        if conds:
            c["cas_ok"] += 1
        if len(written) > 1 and count_partitions(written) > 1:
            c["multi_partition_batches"] += 1
        if res[1] != "":
            self._wrote(ops, results, int(res[1]), res[5])
        if cursor:
            entries = _arr(res[4])
            self._take(entries)
            # the reply holds every change up to this write: a poll now has nothing more to ask
            self._fresh = len(entries) < _XREAD_COUNT
        self._arm_poll()
        return results

    def _failed(self, res: builtins.list[Any]) -> None:
        if res[0] == "dup":
            raise ValueError(f"batch writes {res[1]!r} twice")
        if res[0] == "schema":
            raise MetadataError(f"redis at {self.url}: index schema keeps changing under this client")
        assert res[0] == "conflict", res
        self._cache.clear()  # a condition failed: what this handle believed is not what is stored
        self._counters["cas_conflict"] += 1
        raise condition_error(res[1], int(res[2]), int(res[3]) if res[3] != "" else None)

    def _wrote(self, ops: Sequence[Op], results: builtins.list[OpResult], rev: int, stream_id: str) -> None:
        """This handle's batch made revision ``rev``: its records are current at ``rev``; the rest of
        the cache stays current only if no other change came between."""
        if not self.exclusive:
            self._seen(rev, stream_id)
            return
        if rev != self._known_rev + 1:
            self._cache.clear()
        self._known_rev, self._known_id = rev, stream_id
        self._seen(rev, stream_id)  # (publishes rev to this process's other handles)
        for op, r in zip(ops, results):
            if isinstance(op, Put):
                self._keep(r.key, Record(r.key, dict(op.fields), rev))
            elif isinstance(op, Delete):
                self._keep(r.key, None)

    # -- indexes --

    def define_index(self, spec: IndexSpec) -> None:
        self.define_indexes([spec])

    def define_indexes(self, specs: Sequence[IndexSpec]) -> None:
        """All of ``specs`` in one script (one round trip); none if each is already defined
        identically as far as this handle knows (indexes are never dropped)."""
        todo = [(spec, spec.to_json()) for spec in specs]
        todo = [(spec, text) for spec, text in todo
                if (known := self._specs.get(spec.name)) is None or known.to_json() != text]
        if not todo:
            return
        args = [self.prefix] + [x for spec, text in todo for x in (spec.name, text, spec.prefix)]
        before = int(self._schema)
        res = self._eval("define", *args, idempotent=False)
        if res[0] == "different":
            text = next(t for spec, t in todo if spec.name == res[3])
            raise ConfigError(f"index {res[3]} is already defined differently ({res[1]} vs {text})")
        if res[0] == "nonempty":
            prefix = next(spec.prefix for spec, _ in todo if spec.name == res[3])
            raise ConfigError(f"index {res[3]}: records under {prefix!r} exist; define indexes first")
        if int(res[2]) == before + len(todo):
            # only these definitions came since our last load: the schema is ours plus them
            self._specs.update((spec.name, spec) for spec, _ in todo)
            self._schema = res[2]
            return
        self._load_schema()

    def indexes(self) -> dict[str, IndexSpec]:
        return dict(self._specs)

    def _spec(self, index: str) -> IndexSpec:
        spec = self._specs.get(index)
        if spec is None:
            self._load_schema()
            spec = self._specs.get(index)
        if spec is None:
            raise MetadataError(f"no index named {index!r}")
        return spec

    def _range(self, spec: IndexSpec, bounds: Bounds, limit: int | None, reverse: bool,
               records: bool) -> tuple[int, str, builtins.list[IndexEntry], builtins.list[Record]]:
        return self._range_reply(spec, self._eval("range", *self._range_args(spec, bounds, limit, reverse, records)),
                                 records)

    def _range_args(self, spec: IndexSpec, bounds: Bounds, limit: int | None, reverse: bool,
                    records: bool) -> tuple[Any, ...]:
        if bounds.numeric:
            lo = "-inf" if bounds.lo is None else str(bounds.lo)
            hi = "+inf" if bounds.hi is None else str(bounds.hi)
        else:
            lo = "-" if bounds.lo is None else "[" + str(bounds.lo)
            hi = "+" if bounds.hi is None else "(" + str(bounds.hi)
        if bounds.empty():
            lo, hi = ("+inf", "-inf") if bounds.numeric else ("+", "-")
        return (self.prefix, spec.name, "1" if spec.numeric else "0", "1" if reverse else "0", lo, hi,
                -1 if limit is None else limit, "1" if records else "0")

    def _range_reply(self, spec: IndexSpec, res: builtins.list[Any],
                     records: bool) -> tuple[int, str, builtins.list[IndexEntry], builtins.list[Record]]:
        items = res[2]
        entries = [spec.decode(items[i], int(float(items[i + 1]))) for i in range(0, len(items), 2)]
        recs = []
        if records:
            for entry, flat in zip(entries, res[3]):
                rec = _record(entry.key, flat)
                assert rec is not None, entry
                recs.append(rec)
        self._seen(int(res[0]), res[1])
        return int(res[0]), res[1], entries, recs

    def query(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
              inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
              limit: int | None = None, reverse: bool = False) -> builtins.list[IndexEntry]:
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        entries = self._range(spec, bounds, limit, reverse, False)[2]
        self._counters["index_queries"] += 1
        return entries

    def query_records(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
                      inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
                      limit: int | None = None, reverse: bool = False) -> builtins.list[Record]:
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        return self._queried(self._range(spec, bounds, limit, reverse, True)[3])

    def _queried(self, recs: builtins.list[Record]) -> builtins.list[Record]:
        """An index query's records, counted."""
        self._counters["index_queries"] += 1
        self._counters["reads"] += len(recs)
        return recs

    def batch_then_query_records(self, ops: Sequence[Op], index: str, *, prefix: Sequence[str | int] | None = None
                                 ) -> tuple[builtins.list[OpResult], builtins.list[Record]]:
        """The batch script and the range script in one pipeline: the server runs them in order,
        so the query reads what the batch left; a refused batch's query is dropped. A reply the
        server could not give in the pipeline (a flushed script, an index schema moved) is asked
        again on its own."""
        validate_ops(ops)
        spec = self._spec(index)
        bounds = Bounds.of(spec, None, None, (True, True), prefix)
        conds = conditions(ops)
        payload = _ops_json(ops, self._specs, conds)  # ValueError here: nothing sent
        cursor = self._cursor if self._hub.has_watches() else ""
        written, listed = self._pipeline([
            self._batch_command(payload, cursor),
            ("EVALSHA", self._scripts["range"].sha, 0, *self._range_args(spec, bounds, None, False, True))])
        if _unapplied(written):
            return self._batch(ops), self.query_records(index, prefix=prefix)  # not applied: one at a time
        if isinstance(written, Exception):
            raise MetadataError(f"redis at {self.url}: {written}")
        results = self._applied(ops, conds, written, cursor)  # a refusal raises here
        if isinstance(listed, Exception):
            return results, self.query_records(index, prefix=prefix)
        return results, self._queried(self._range_reply(spec, listed, True)[3])

    # -- watches --

    def _registering(self, stream_id: str, revision: int) -> None:
        # with no live watch the cursor may lag far behind: events up to the snapshot are of no
        # interest, so start reading right after it
        if not self._hub.has_watches():
            self._jump_cursor(stream_id, revision)

    def watch(self, key: str, callback: Callback) -> Watch:
        validate_user_key(key)
        if self._cached(key):
            # the record as of the last revision this process has seen, taken now: the stream is
            # read from that revision's entry on (or from where a live watch has it)
            self._registering(self._known_id, self._known_rev)
            return self._hub.add(Watch(callback, self._cache[key], self._known_rev, key=key))
        snap = self._snapshot
        if snap is not None and snap[0] == key and snap[1] == self._counters["round_trips"]:
            res = snap[2]  # this handle's last round trip read the key: a watch from that instant
        else:
            res = self._eval("get_watch", self.prefix, key)
        rev = int(res[0])
        self._registering(res[1], rev)
        return self._hub.add(Watch(callback, _record(key, res[2]), rev, key=key))

    def watch_range(self, index: str, callback: Callback, minimum: _Bound = None, maximum: _Bound = None, *,
                    inclusive: tuple[bool, bool] = (True, True),
                    prefix: Sequence[str | int] | None = None) -> Watch:
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        rev, stream_id, entries, _ = self._range(spec, bounds, None, False, False)
        self._registering(stream_id, rev)
        return self._hub.add(Watch(callback, entries, rev, spec=spec, bounds=bounds))

    def set_notifier(self, notifier: Callable[[Callable[[], None]], None] | None) -> None:
        self._hub.set_notifier(notifier)

    def attach(self, call_later: Callable[[int, Callable[[], None]], object]) -> None:
        """Every change the model makes is written through a handle of this process, so read the
        stream once after each burst of writes (one poll per burst, due after what is due now)
        rather than on a timer."""
        self._call_later = call_later

    def _arm_poll(self) -> None:
        if self._call_later is not None and not self._poll_armed and not self._closed:
            self._poll_armed = True
            self._call_later(0, self._scheduled_poll)

    def _scheduled_poll(self) -> None:
        self._poll_armed = False
        if not self._closed:
            self.poll_watches(0.0)

    def poll_watches(self, timeout_s: float = 0.0) -> int:
        if self._closed:
            raise MetadataError("metadata store handle is closed")
        fresh, self._fresh = self._fresh, False
        if self._hub.has_watches() and not (fresh and timeout_s <= 0):
            block = int(timeout_s * 1000) if timeout_s > 0 else None
            while True:
                resp = self._rt(self.client.xread, {self.prefix + "log": self._cursor}, count=_XREAD_COUNT,
                                block=block)
                entries = resp[0][1] if resp else []
                self._take(entries)
                if len(entries) < _XREAD_COUNT:
                    break
                block = None
        return self._hub.drain()

    def _take(self, entries: builtins.list[tuple[str, Any]]) -> None:
        """Apply change-stream entries: ``(id, fields)``, the fields a dict (XREAD through redis-py)
        or flat as the batch script returns them (``r``, revision, ``c``, changes: see XADD)."""
        changes: builtins.list[Change] = []
        hub, exclusive = self._hub, self.exclusive
        ranges = hub.has_range_watches()
        for stream_id, data in entries:
            rev_s, body = (data["r"], data["c"]) if isinstance(data, dict) else (data[1], data[3])
            rev = int(rev_s)
            if rev <= self._last_rev:
                continue  # taken already (a pipelined group that went again read past it)
            if rev > self._last_rev + 1:
                raise MetadataError(
                    f"redis at {self.url}: change stream lost events (revisions {self._last_rev + 1}..{rev - 1} "
                    f"were trimmed before this client read them; raise stream_maxlen)")
            mine = exclusive and rev > self._known_rev  # a change this handle has not applied
            if mine:
                if rev != self._known_rev + 1:
                    self._cache.clear()
                self._known_rev, self._known_id = rev, stream_id
            for key, kind, flat, ixlog in json.loads(body):
                ixlog = _arr(ixlog)
                wanted = hub.wants(key, [entry[0] for entry in ixlog])
                if not (mine or wanted):
                    continue  # nobody here watches it or its indexes (most changes are op records)
                fields = None
                if kind == "p":
                    it = iter(_arr(flat))
                    fields = dict(zip(it, it))
                if mine:
                    self._keep(key, None if fields is None else Record(key, fields, rev))
                if not wanted:
                    continue
                index = [(name, None if om is False else (om, int(float(os))),
                          None if nm is False else (nm, int(float(ns))))
                         for name, om, os, nm, ns in ixlog] if ranges else []
                changes.append(Change(key, ChangeKind.PUT if kind == "p" else ChangeKind.DELETE, rev, fields, index))
            self._seen(rev, stream_id)
            self._cursor = stream_id
            self._last_rev = rev
        if changes:
            hub.on_changes(changes)

    # -- lifecycle --

    def stats(self) -> dict[str, int]:
        return dict(self._counters)

    def reopen(self) -> RedisMetadataStore:
        return RedisMetadataStore(self.url, prefix=self.prefix, stream_maxlen=self.stream_maxlen,
                                  exclusive=self.exclusive, reply_spin_us=self.reply_spin_us)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._hub.close()
        try:
            self.client.close()
        except redislib.exceptions.RedisError:
            pass

    def _check(self) -> None:
        """Load everything under the prefix and check records, ``$ix``, indexes and ``keys`` agree."""
        P = self.prefix
        self._load_schema()
        keys = self._rt(self.client.zrange, P + "keys", 0, -1)
        recs: dict[str, dict[str, str]] = {}
        for key in keys:
            h = self._rt(self.client.hgetall, P + "r:" + key)
            assert h, f"{key} listed in keys but has no record"
            recs[key] = h
        rev = int(self._rt(self.client.get, P + "rev") or 0)
        expected: dict[str, set[tuple[str, int]]] = {name: set() for name in self._specs}
        for key, h in recs.items():
            assert 0 < int(h["$v"]) <= rev, (key, h["$v"], rev)
            fields = {k: v for k, v in h.items() if not k.startswith("$")}
            mine = set()
            for name, spec in self._specs.items():
                entry = spec.entry(key, fields)
                if entry is not None:
                    expected[name].add(entry)
                    mine.add((name, entry[0], entry[1]))
            stored = {(n, m, int(float(s))) for n, m, s in _arr(json.loads(h["$ix"]))}
            assert stored == mine, (key, stored, mine)
        for name in self._specs:
            actual = {(m, int(s)) for m, s in self._rt(self.client.zrange, P + "i:" + name, 0, -1, withscores=True)}
            assert actual == expected[name], (name, actual ^ expected[name])
        nrecords = len(list(self._rt(lambda: list(self.client.scan_iter(match=P + "r:*", count=1000)))))
        assert nrecords == len(recs), (nrecords, len(recs))


__all__ = ["RedisMetadataStore", "DEFAULT_PREFIX", "ABSENT"]
