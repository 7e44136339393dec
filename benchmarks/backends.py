"""Each real-backend adapter against its own client library, same operations, one run (issue 19)::

    .venv/bin/python -m benchmarks.backends                      # starts its own redis and kafka
    .venv/bin/python -m benchmarks.backends --redis redis://127.0.0.1:6379 --kafka kafka://127.0.0.1:9092
    .venv/bin/python -m benchmarks.backends --only redis --n 5000 --json out.json

Without a URL it starts the service with ``scripts/redis.sh`` / ``scripts/kafka.sh`` in a
temporary directory and stops it at the end. Not part of the test run. Every pair is measured
back to back on the same server (this machine is shared: repeat with ``--repeats`` and read the
median), and the ratio printed is adapter rate / client rate.

Redis (``metadata_v5.store.redis`` vs redis-py on one connection):

* ``get``: ``store.get`` (one EVALSHA: the record with the store revision, see
  ``RedisMetadataStore.watch``) vs the same EVALSHA, and vs a plain ``HGETALL``; ``get_many@D``: one pipelined ``get_many`` of D keys vs a
  redis-py MULTI pipeline of D ``HGETALL`` (the adapter's depth);
* ``put``: ``store.put`` (one EVALSHA of the batch script) vs redis-py ``evalsha`` of the same
  script with the same, pre-encoded arguments, on fresh keys each;
* ``v5 replay``: a virtual-time v5 replay of ``--trace`` on Redis (the whole engine included;
  and the adapter alone: the time a replay spends inside the store's methods, measured directly)
  vs redis-py sending the exact commands that replay sent (captured at the connection, pipelines
  kept at their depth) through its API on one connection in a tight loop, as it is and polling
  for replies as the adapter does (``_await_reply``, ``reply_spin_us``); plus the round trips the
  replay made per event, per transactional publish and per end-txn (those issued inside the
  operation; the ones its scheduled follow-ups issued are counted apart) (the run's namespace is
  ``exclusive=1``: header reads of records the process already knows are answered without a
  round trip, see ``metadata_v5/store/redis.py``).

Kafka (``engine.kafkaledger`` vs kafka-python 3):

* ``append``: ``ledger.append`` (returns when acknowledged) vs ``send().get()`` with the adapter's
  producer settings, and vs kafka-python's default producer (acks=all, idempotent); ``async
  produce``: ``send`` x N then ``flush`` (the ledger contract has no equivalent: a reference);
* ``read``: ``ledger.read`` of 50-entry ranges alternating between two ledgers vs a consumer
  assigned to both, seek + poll;
* ``v4 replay``: a virtual-time v4 replay of ``--trace`` on Kafka, events/s against kafka-python's
  synchronous produce rate (the goal: >= 50%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "datasets" / "samples" / "small.parquet"


def _service(stack: ExitStack, name: str, url: str | None) -> str:
    """``url``, or a service of our own started by ``scripts/<name>.sh`` (stopped on exit)."""
    if url:
        return url
    home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"txnbench-{name}-")))
    script = ROOT / "scripts" / f"{name}.sh"
    print(f"starting {name} in {home} ...", file=sys.stderr)
    done = subprocess.run([str(script), "start", str(home)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{script.name} start failed: {done.stderr[-1000:]}")
    stack.callback(subprocess.run, [str(script), "stop", str(home)], capture_output=True, timeout=120)
    return done.stdout.strip()


def _rate(n: int, fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def pair(self, backend: str, op: str, adapter: float, client: float, unit: str = "ops/s",
             client_label: str = "client") -> None:
        self.rows.append({"backend": backend, "op": op, "adapter": round(adapter), "client": round(client),
                          "client_label": client_label, "ratio": round(adapter / client, 3), "unit": unit})

    def note(self, backend: str, op: str, value: Any) -> None:
        self.rows.append({"backend": backend, "op": op, "value": value})

    def show(self) -> None:
        print(f"{'backend':8} {'operation':34} {'adapter':>9} {'client':>9} {'ratio':>6}  unit")
        for r in self.rows:
            if "ratio" in r:
                print(f"{r['backend']:8} {r['op']:34} {r['adapter']:>9} {r['client']:>9} {r['ratio']:>6}  "
                      f"{r['unit']} (client: {r['client_label']})")
        for r in self.rows:
            if "value" in r:
                print(f"{r['backend']:8} {r['op']:34} {r['value']}")


# --- Redis ---------------------------------------------------------------------------------------


class _Capture:
    """Records every command sent to Redis (a pipeline as one group) while active: through
    redis-py's connection, and through the store's own one-command path (``_call``)."""

    def __init__(self) -> None:
        from redis.connection import AbstractConnection

        import metadata_v5.store.redis as store_module

        self.groups: list[list[tuple[Any, ...]]] = []
        self.active = False
        self._cls = AbstractConnection
        self._single = AbstractConnection.send_command
        self._many = AbstractConnection.pack_commands
        self._module = store_module
        self._call = store_module._call
        cap = self

        def call(conn: Any, command: tuple[Any, ...], spin_s: float = 0.0) -> Any:
            if cap.active:
                cap.groups.append([command])
            return cap._call(conn, command, spin_s)

        def send_command(conn: Any, *args: Any, **kw: Any) -> Any:
            if cap.active:
                cap.groups.append([args])
            return cap._single(conn, *args, **kw)

        def pack_commands(conn: Any, commands: Any) -> Any:
            commands = [tuple(c) for c in commands]
            if cap.active:
                cap.groups.append(commands)
            return cap._many(conn, commands)

        AbstractConnection.send_command = send_command  # type: ignore[method-assign, assignment]
        AbstractConnection.pack_commands = pack_commands  # type: ignore[method-assign]
        store_module._call = call

    def close(self) -> None:
        self._cls.send_command = self._single  # type: ignore[method-assign]
        self._cls.pack_commands = self._many  # type: ignore[method-assign]
        self._module._call = self._call


def _same_work(groups: list[list[tuple[Any, ...]]], batch_sha: str) -> list[list[tuple[Any, ...]]]:
    """The captured commands made to do the same server work again: a write script's change-stream
    read starts at a stream id of the first run, which every entry of the second run follows, so
    it is capped at one entry (as in the first run's steady state, where it returns the write's
    own entry) instead of returning up to 1000."""
    out = []
    for group in groups:
        fixed = []
        for args in group:
            if len(args) == 9 and args[0] == "EVALSHA" and args[1] == batch_sha and args[7] != "":
                args = args[:8] + (1,)
            fixed.append(args)
        out.append(fixed)
    return out


def _raw_send(client: Any, groups: list[list[tuple[Any, ...]]]) -> None:
    """The captured commands through redis-py's API on one connection: a single command with
    ``execute_command``, a group as one pipeline of the same depth (MULTI/EXEC kept)."""
    for group in groups:
        try:
            if len(group) == 1:
                client.execute_command(*group[0])
                continue
            multi = group[0][0] == "MULTI" and group[-1][0] == "EXEC"
            pipe = client.pipeline(transaction=multi)
            for args in (group[1:-1] if multi else group):
                pipe.execute_command(*args)
            pipe.execute(raise_on_error=False)
        except Exception:  # noqa: BLE001 - a replayed error reply is still a reply
            pass


@contextmanager
def _polling_replies(spin_s: float) -> Iterator[None]:
    """redis-py waiting for a reply as the adapter does (``metadata_v5.store.redis._await_reply``):
    the first read after a send polls for up to ``spin_s`` before the blocking read."""
    from redis.connection import AbstractConnection

    from metadata_v5.store.redis import _await_reply

    send, read = AbstractConnection.send_packed_command, AbstractConnection.read_response

    def sent(conn: Any, *args: Any, **kw: Any) -> Any:
        conn._txnbench_waiting = True
        return send(conn, *args, **kw)

    def reply(conn: Any, *args: Any, **kw: Any) -> Any:
        if conn.__dict__.pop("_txnbench_waiting", False) and conn._sock is not None:
            _await_reply(conn._sock, spin_s)
        return read(conn, *args, **kw)

    AbstractConnection.send_packed_command = sent  # type: ignore[method-assign, assignment]
    AbstractConnection.read_response = reply  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        AbstractConnection.read_response = read  # type: ignore[method-assign]


def bench_redis(url: str, n: int, depth: int, trace: Path, repeats: int, table: Table) -> None:
    import redis as redislib

    from metadata_v5.store.redis import RedisMetadataStore, _ops_json
    from metadata_v5.store.port import Put

    client = redislib.Redis.from_url(url, decode_responses=True, protocol=2, single_connection_client=True)
    table.note("redis", "hiredis parser", "yes" if redislib.utils.HIREDIS_AVAILABLE else "no")

    def ops_pair() -> None:
        ns = f"txnbench:bench-{uuid.uuid4().hex[:8]}:"
        store = RedisMetadataStore(url, prefix=ns)
        keys = [f"/k/{i}" for i in range(n)]
        try:
            put = _rate(n, lambda: [store.put(k, {"a": "1", "b": str(i)}) for i, k in enumerate(keys)])
            raw_ns = ns + "raw:"
            script = store._scripts["batch"]
            payloads = [_ops_json([Put(k, {"a": "1", "b": str(i)})], {}, []) for i, k in enumerate(keys)]
            client.script_load(script.script)
            raw_put = _rate(n, lambda: [client.evalsha(script.sha, 0, raw_ns, "0", p, 100_000, "", 1000)
                                        for p in payloads])
            get = _rate(n, lambda: [store.get(k) for k in keys])
            rkeys = [ns + "r:" + k for k in keys]
            raw_get = _rate(n, lambda: [client.execute_command("HGETALL", k) for k in rkeys])
            read = store._scripts["get_watch"]
            raw_get_script = _rate(n, lambda: [client.evalsha(read.sha, 0, ns, k) for k in keys])
            chunks = [keys[i:i + depth] for i in range(0, n, depth)]
            many = _rate(n, lambda: [store.get_many(c) for c in chunks])

            def raw_many() -> None:
                for c in chunks:
                    pipe = client.pipeline(transaction=True)
                    for k in c:
                        pipe.execute_command("HGETALL", ns + "r:" + k)
                    pipe.execute()

            raw_many_rate = _rate(n, raw_many)
            pairs["put (EVALSHA)"].append((put, raw_put))
            pairs["get vs HGETALL"].append((get, raw_get))
            pairs["get vs EVALSHA of its script"].append((get, raw_get_script))
            pairs[f"get_many@{depth} (pipelined)"].append((many, raw_many_rate))
        finally:
            store.purge()
            RedisMetadataStore(url, prefix=ns + "raw:").purge()
            store.close()

    pairs: dict[str, list[tuple[float, float]]] = {"put (EVALSHA)": [], "get vs HGETALL": [],
                                                   "get vs EVALSHA of its script": [],
                                                   f"get_many@{depth} (pipelined)": []}
    for _ in range(repeats):
        ops_pair()
    for op, runs in pairs.items():
        table.pair("redis", op, statistics.median(a for a, _ in runs), statistics.median(c for _, c in runs))

    # the v5 engine's own mix: a replay, then redis-py sending the very same commands
    replays = sorted((_v5_replay(url, trace, client) for _ in range(repeats)),
                     key=lambda r: r["replay_s"] / r["raw_s"])
    best = replays[len(replays) // 2]  # the run of median ratio
    table.pair("redis", "v5 replay vs its commands", best["events"] / best["replay_s"],
               best["events"] / best["raw_s"], "events/s", "redis-py, same commands, same depth")
    table.pair("redis", "v5 replay vs its commands, polled", best["events"] / best["replay_s"],
               best["events"] / best["polled_s"], "events/s",
               f"redis-py, same commands, same depth, polling for replies {best['spin_us']} us as the adapter does")
    table.pair("redis", "v5 replay's store calls vs its commands", best["events"] / best["store_s"],
               best["events"] / best["raw_s"], "events/s", "redis-py, same commands, same depth")
    table.note("redis", "v5 replay seconds: redis / in its store calls / embedded / redis-py alone",
               f"{best['replay_s']:.3f} / {best['store_s']:.3f} / {best['memory_s']:.3f} / {best['raw_s']:.3f}")
    table.note("redis", "v5 replay seconds: redis-py polling for replies", f"{best['polled_s']:.3f}")
    table.note("redis", "v5 replay round trips / event", round(best["groups"] / best["events"], 3))
    for label, per in best["per_op"].items():
        table.note("redis", f"round trips per {label}", per)
    client.close()


def _v5_replay(url: str, trace: Path, client: Any) -> dict[str, Any]:
    from bench.replay.config import RunConfig
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events, validate

    # timed as `txnbench replay` runs it (the trace validated once up front, then read without
    # the row checks; nothing listening in); the commands come from a second, captured replay of
    # the same trace (virtual time: the same commands, in a namespace of its own)
    validate(trace)
    timed = Replayer(RunConfig(engine="v5", metadata_url=url)).run(read_events(trace, validated=True))
    replay_s = timed.wall_seconds  # the replay's own clock: events and drain, not its summary
    cfg = RunConfig(engine="v5", metadata_url=url)
    cap = _Capture()
    current: list[str] = ["scheduled"]
    per: dict[str, list[int]] = {}
    try:
        rep = Replayer(cfg)
        originals = {op: rep._ops[op] for op in rep._ops}

        def wrap(op: str, fn: Callable[[Any], None]) -> Callable[[Any], None]:
            def run(e: Any) -> None:
                label = {"publish": "txn publish" if e.txn else "plain publish", "commit": "end-txn",
                         "abort": "end-txn"}.get(op, op)
                before = len(cap.groups)
                current[0] = label
                try:
                    fn(e)
                finally:
                    current[0] = "scheduled"
                    per.setdefault(label, []).append(len(cap.groups) - before)
            return run

        rep._ops = {op: wrap(op, fn) for op, fn in originals.items()}
        cap.active = True
        result = rep.run(read_events(trace))
        cap.active = False
    finally:
        cap.close()
    from metadata_v5.store.redis import _BATCH, DEFAULT_REPLY_SPIN_US

    trips = (timed.counts.get("meta.round_trips"), result.counts.get("meta.round_trips"))
    if trips[0] != trips[1]:
        raise SystemExit(f"backends: the timed and the captured replay made {trips[0]} and {trips[1]} round trips")
    groups = _same_work(cap.groups, client.register_script(_BATCH).sha)
    # the same commands again (the run's own cleanup included, so the namespace ends empty)
    sent_s = []
    spin_us = DEFAULT_REPLY_SPIN_US
    for polled in (False, True):  # redis-py as it is, then waiting for replies as the adapter does
        with _polling_replies(spin_us / 1e6) if polled else nullcontext():
            t0 = time.perf_counter()
            _raw_send(client, groups)
            sent_s.append(time.perf_counter() - t0)
        for key in client.scan_iter(match=f"txnbench:{cfg.namespace}:*", count=1000):
            client.delete(key)
    raw_s, polled_s = sent_s
    steady = {k: round(statistics.mean(v[len(v) // 2:]), 3) for k, v in per.items() if v}
    # the adapter's own share: the time a third replay spends inside the store's methods
    store_s = _store_seconds(url, trace)
    # the engine's own time on this machine now: the same replay on the embedded store
    memory_s = Replayer(RunConfig(engine="v5")).run(read_events(trace, validated=True)).wall_seconds
    return {"events": result.events, "replay_s": replay_s, "raw_s": raw_s, "polled_s": polled_s, "spin_us": spin_us,
            "groups": len(groups), "memory_s": memory_s, "store_s": store_s,
            "per_op": {k: steady[k] for k in ("txn publish", "end-txn", "plain publish", "ack", "new_txn")
                       if k in steady}}


def _store_seconds(url: str, trace: Path) -> float:
    """Seconds a v5 replay spends inside the Redis store's public methods (outermost calls only:
    ``put`` calls ``batch``): the adapter and the server, without the engine around them. Watch
    callbacks that a poll runs count as the store's (they are the engine's, so this errs against
    the adapter)."""
    from bench.replay.config import RunConfig
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from metadata_v5.store.redis import RedisMetadataStore

    spent = [0.0]
    depth = [0]
    names = ("get", "get_many", "list", "list_keys", "batch", "batches", "raw_batch", "put", "create",
             "put_sequential", "delete", "query", "query_records", "watch", "watch_range", "poll_watches",
             "define_index", "define_indexes", "close", "purge")
    saved = {name: RedisMetadataStore.__dict__.get(name) for name in names}

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kw: Any) -> Any:
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[0] += time.perf_counter() - t0
        return run

    try:
        for name in names:
            setattr(RedisMetadataStore, name, timed(getattr(RedisMetadataStore, name)))
        Replayer(RunConfig(engine="v5", metadata_url=url)).run(read_events(trace, validated=True))
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(RedisMetadataStore, name)
            else:
                setattr(RedisMetadataStore, name, fn)
    return spent[0]


# --- Kafka ---------------------------------------------------------------------------------------


def bench_kafka(url: str, n: int, trace: Path, repeats: int, table: Table) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from engine.kafkaledger import KafkaLedgerFactory, _encode_entry, topic_for
    from engine.records import EntryData

    bootstrap = url.removeprefix("kafka://")
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(repeats):
        ns = f"bench-{uuid.uuid4().hex[:8]}/"
        f = KafkaLedgerFactory(bootstrap, namespace=ns)
        try:
            a, b = f.open("a"), f.open("b")
            data = [EntryData(size=100, publish_ts_us=i, msg=f"m{i}") for i in range(n)]
            append = _rate(n, lambda: [a.append(d) for d in data])
            for d in data:
                b.append(d)
            same = ({"acks": "all"} if f.acks == "all" else {"acks": 1, "enable_idempotence": False, "retries": 0})
            records = [_encode_entry(d) for d in data]
            for label, settings in (("same acks", same), ("default acks=all idempotent", {})):
                p = KafkaProducer(bootstrap_servers=[bootstrap], linger_ms=0, **settings)
                topic = topic_for(ns + "a")
                p.send(topic, b"warm", partition=0).get()
                sync = _rate(n, lambda: [p.send(topic, key=k, value=v, headers=h, partition=0).get()
                                         for k, v, h in records])

                def burst() -> None:
                    for k, v, h in records:
                        p.send(topic, key=k, value=v, headers=h, partition=0)
                    p.flush()

                asynch = _rate(n, burst)
                p.close()
                runs.setdefault(f"append vs sync produce ({label})", []).append((append, sync))
                runs.setdefault(f"append vs async produce ({label})", []).append((append, asynch))
            # reads: 50-entry ranges alternating between two ledgers
            step = 50
            spans = [(x, i) for i in range(0, n - step + 1, step) for x in (a, b)]

            def adapter_reads() -> None:
                for ml, i in spans:
                    first = ml.first_position()
                    start = type(first)(first.ledger_id, i)
                    end = type(first)(first.ledger_id, i + step - 1)
                    assert len(ml.read(start, end, step)) == step

            read = _rate(len(spans) * step, adapter_reads)
            tps = {ml: TopicPartition(topic_for(ns + name), 0) for ml, name in ((a, "a"), (b, "b"))}
            c = KafkaConsumer(bootstrap_servers=[bootstrap], group_id=None, enable_auto_commit=False,
                              fetch_max_wait_ms=0, auto_offset_reset="earliest")
            c.assign(list(tps.values()))

            def client_reads() -> None:
                for ml, i in spans:
                    tp = tps[ml]
                    c.pause(*[t for t in tps.values() if t != tp])
                    c.resume(tp)
                    c.seek(tp, i)
                    got = 0
                    while got < step:
                        got += len(c.poll(timeout_ms=10_000, max_records=step - got).get(tp, []))

            raw_read = _rate(len(spans) * step, client_reads)
            c.close()
            runs.setdefault("read 50-entry ranges, 2 ledgers", []).append((read, raw_read))
            table_acks = f.acks
        finally:
            for name in f.names(""):
                f.delete(name)
            f.close()
    for op, pairs in runs.items():
        label = "kafka-python consumer, default retry_backoff_ms" if op.startswith("read") else "kafka-python"
        table.pair("kafka", op, statistics.median(x for x, _ in pairs), statistics.median(y for _, y in pairs),
                   "entries/s", label)
    table.note("kafka", "adapter acks", table_acks)
    sync_default = statistics.median(y for _, y in runs["append vs sync produce (default acks=all idempotent)"])
    sync_same = statistics.median(y for _, y in runs["append vs sync produce (same acks)"])
    rates = [_v4_replay(url, trace) for _ in range(repeats)]
    rate = statistics.median(rates)
    table.pair("kafka", "v4 replay vs sync produce", rate, sync_same, "events/s vs produce/s",
               "kafka-python sync produce, same acks")
    table.pair("kafka", "v4 replay vs sync produce", rate, sync_default, "events/s vs produce/s",
               "kafka-python sync produce, defaults")
    for call, ms in _v4_slowest_calls(url, trace).items():
        table.note("kafka", f"v4 replay: slowest {call}", f"{ms:.1f} ms")


def _v4_slowest_calls(url: str, trace: Path) -> dict[str, float]:
    """The longest single ledger open / append / read of one more (untimed) v4 replay: a client
    back-off sleep (kafka-python's 100 ms retry and metadata back-offs) would show here."""
    from engine.kafkaledger import KafkaLedgerFactory, KafkaManagedLedger

    slowest: dict[str, float] = {"open": 0.0, "append": 0.0, "read": 0.0}
    originals = [(KafkaLedgerFactory, "open"), (KafkaManagedLedger, "append"), (KafkaManagedLedger, "read")]

    def timed(cls: Any, name: str) -> Callable[..., Any]:
        fn = getattr(cls, name)

        def run(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                slowest[name] = max(slowest[name], (time.perf_counter() - t0) * 1000)
        return run

    saved = [(cls, name, getattr(cls, name)) for cls, name in originals]
    try:
        for cls, name in originals:
            setattr(cls, name, timed(cls, name))
        _v4_replay(url, trace)
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)
    return slowest


def _v4_replay(url: str, trace: Path) -> float:
    from bench.replay.config import RunConfig
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events, validate

    validate(trace)  # once up front, as `txnbench replay` does
    rep = Replayer(RunConfig(engine="v4", ledger_url=url))
    result = rep.run(read_events(trace, validated=True))
    return result.events / result.wall_seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.backends", description=__doc__.split("\n")[0])
    ap.add_argument("--redis", help="redis://host:port (default: start one with scripts/redis.sh)")
    ap.add_argument("--kafka", help="kafka://host:port (default: start one with scripts/kafka.sh)")
    ap.add_argument("--only", choices=("redis", "kafka"), help="measure one backend only")
    ap.add_argument("--n", type=int, default=2000, help="operations per measurement (default 2000)")
    ap.add_argument("--depth", type=int, default=16, help="pipelining depth of get_many (default 16)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace of the engine replays")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of each measurement; medians shown")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.n < 100 or args.depth < 1 or args.repeats < 1:
        ap.error("--n must be >= 100, --depth and --repeats >= 1")
    table = Table()
    with ExitStack() as stack:
        if args.only in (None, "redis"):
            bench_redis(_service(stack, "redis", args.redis), args.n, args.depth, args.trace, args.repeats, table)
        if args.only in (None, "kafka"):
            bench_kafka(_service(stack, "kafka", args.kafka), args.n, args.trace, args.repeats, table)
    table.show()
    if args.json:
        args.json.write_text(json.dumps(table.rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
