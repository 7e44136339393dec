"""The faust-streaming app of ``txnbench stream run`` (the per-event logic is
:class:`bench.stream.stream.StreamReplay`; this module wires it to Kafka and runs it: :func:`run_stream`).

One agent consumes the one-partition trace topic in order, hands each record to the replay,
sends its measurements to the output topic (one record per event, key: the row number, value:
``{"row", "op", "ts_us", "engines": [one measurement per engine]}``) and keeps the per-engine
summary in the Faust table ``engine-stats`` (key: engine label; updated every
``TABLE_EVERY_S`` and at the end, when it also holds the latency summary). The app runs in the caller's asyncio loop (no Faust worker,
no web server) and stops when the replay has seen the end-of-trace marker, on an error in the
agent, on the timeout, or on Ctrl-C.

faust-streaming 0.11.3's own topic creation speaks a request form aiokafka 0.14 no longer sends,
so the app never declares topics (``topic_allow_declare=False``): :meth:`StreamApp.create_topics`
creates the output, table changelog and assignor topics first with kafka-python's admin client.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Any

from bench.replay.config import RunConfig
from bench.replay.results import result_dir
from bench.replay.runner import finish_results
from bench.stream.stream import (DEFAULT_TOPIC, StreamProgress, StreamReplay, bootstrap, create_topics, default_configs,
                          delete_topics, end_offset, topic_exists)
from engine.errors import ConfigError, TxnbenchError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import faust

TABLE = "engine-stats"
QUIET_LOGGERS = ("aiokafka", "faust", "mode")
TABLE_EVERY_S = 0.5  # table updates (changelog writes) at most this often, and at the end


class StreamApp:
    def __init__(self, url: str, trace_topic: str, output_topic: str, app_id: str | None = None) -> None:
        self.url = url
        self.trace_topic = trace_topic
        self.output_topic = output_topic
        self.app_id = app_id or f"txnbench-stream-{uuid.uuid4().hex[:10]}"  # a new group: read from offset 0
        self.changelog_topic = f"{self.app_id}-{TABLE}-changelog"
        self.leader_topic = f"{self.app_id}-__assignor-__leader"
        self.table: dict[str, Any] = {}  # a copy of the Faust table at the end of the run

    def create_topics(self) -> None:
        create_topics(self.url, {self.output_topic: {}}, exist_ok=True)
        create_topics(self.url, {self.changelog_topic: {"cleanup.policy": "compact"}, self.leader_topic: {}},
                      exist_ok=False)

    def delete_internal_topics(self) -> None:
        delete_topics(self.url, [self.leader_topic])

    def run(self, replay: StreamReplay, timeout_s: float | None = None) -> None:
        """Consume to the end of the trace (blocking). Raises what the agent raised, or
        TxnbenchError on timeout; KeyboardInterrupt after a clean stop on Ctrl-C."""
        for name in QUIET_LOGGERS:  # transient coordinator warnings while the group forms
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.ERROR)
        datadir = tempfile.mkdtemp(prefix="txnbench-faust-")  # faust's default is ./<app id>-data
        try:
            asyncio.run(self._run(replay, timeout_s, datadir))
        finally:
            self.delete_internal_topics()
            shutil.rmtree(datadir, ignore_errors=True)

    async def _run(self, replay: StreamReplay, timeout_s: float | None, datadir: str) -> None:
        done = asyncio.Event()
        failure: list[BaseException] = []
        app = faust.App(
            self.app_id, broker=self.url, store="memory://", datadir=datadir, web_enabled=False, autodiscover=False,
            topic_allow_declare=False, topic_partitions=1, topic_replication_factor=1,
            consumer_auto_offset_reset="earliest", broker_commit_every=1000,
            producer_linger=0.02,  # batch the measurement records: one small send each costs ~0.5 ms
        )
        trace = app.topic(self.trace_topic, value_serializer="json")
        out = app.topic(self.output_topic, key_serializer="raw", value_serializer="json")
        table = app.Table(TABLE, default=dict, partitions=1)

        async def agent(stream: Any) -> None:
            loop = asyncio.get_running_loop()
            next_table_update = 0.0
            async for record in stream:
                if done.is_set():
                    continue
                try:
                    measured = await replay.handle(record)
                    if measured:
                        await out.send(key=str(measured[0]["row"]).encode(),
                                       value={"row": measured[0]["row"], "op": measured[0]["op"],
                                              "ts_us": measured[0]["ts_us"], "engines": measured})
                    now = loop.time()
                    if replay.finished or (replay.stats and now >= next_table_update):
                        next_table_update = now + TABLE_EVERY_S
                        for label in replay.stats:
                            table[label] = replay.summary(label)
                    if replay.finished:
                        self.table = {label: dict(table[label]) for label in replay.stats}
                        done.set()
                except Exception as exc:  # noqa: BLE001 - re-raised by run() after a clean stop
                    failure.append(exc)
                    done.set()

        app.agent(trace, name="replay")(agent)
        # --timeout bounds the whole run, the app's start-up (joining the group) included
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        try:
            try:
                await asyncio.wait_for(app.start(), timeout_s)
                remaining = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
                await asyncio.wait_for(done.wait(), remaining)
            except asyncio.TimeoutError:
                raise TxnbenchError(f"stream: no end of trace on {self.trace_topic} within {timeout_s} s "
                                    f"({replay.events} events applied)") from None
        finally:
            await app.stop()
        if failure:
            raise failure[0]


# --- the run -----------------------------------------------------------------------------------


def write_results(writer: Any, replay: StreamReplay, manifest: dict[str, Any]) -> dict[str, Any]:
    """Finish a :class:`bench.replay.results.ResultWriter` from a finished replay (deliveries were
    streamed into it during the run)."""
    def stream_fields(result: Any) -> dict[str, Any]:
        return {"events_per_second": round(replay.events_per_second()),
                "stream": {k: replay.stats[result.label][k] for k in ("apply_us_total", "apply_us_max", "lag_us_max")}}

    return finish_results(writer, list(zip(replay.configs, replay.results)), manifest, stream_fields)


def run_stream(url: str, out: str | Path, configs: list[RunConfig] | None = None, *, topic: str = DEFAULT_TOPIC,
               output_topic: str | None = None, progress: StreamProgress | None = None,
               timeout_s: float | None = None, force: bool = False) -> dict[str, Any]:
    """Consume trace ``topic`` with the Faust app to its end marker; write result dir ``out``.
    Returns the manifest."""
    bootstrap(url)
    if not topic_exists(url, topic):
        raise ConfigError(f"no trace topic {topic} on {url}; run `txnbench stream load` first")
    if end_offset(url, topic) == 0:
        raise ConfigError(f"trace topic {topic} on {url} is empty")
    app = StreamApp(url, topic, output_topic or f"{topic}-measurements")
    app.create_topics()
    with result_dir(out, force=force) as writer:
        replay = StreamReplay(configs or default_configs(), delivery_sink=writer.deliveries, progress=progress)
        try:
            app.run(replay, timeout_s=timeout_s)
        finally:
            replay.close()
        header = replay.header or {}
        trace = header.get("trace", {})
        manifest: dict[str, Any] = {
            "trace": trace,
            "seed": trace.get("seed"),
            "runs": {},
            "stream": {"kafka": url, "topic": topic, "output_topic": app.output_topic, "app_id": app.app_id,
                       "table_changelog": app.changelog_topic, "events": replay.events,
                       "events_per_second": round(replay.events_per_second(), 1)},
        }
        return write_results(writer, replay, manifest)
