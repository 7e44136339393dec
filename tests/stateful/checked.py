"""A :class:`~tests.harness.System` that records a :class:`~bench.check.History` of everything
its clients did, every fault and every delivery, for :func:`bench.check.check`."""

from __future__ import annotations

from typing import Any, Callable

from bench.check import History, Violation, check
from engine.dispatcher import Delivery, DispatchMode, PollingPolicy
from engine.errors import TxnbenchError
from engine.ids import TxnID
from engine.ports import AckKind, TxnAction, TxnStatus
from engine.records import MessageId
from tests.harness import Combo, System


class CheckedSystem(System):
    def __init__(self, combo: Combo, mode: DispatchMode, polling: PollingPolicy | None = None) -> None:
        self.history = History()
        self.txn_ids: list[TxnID] = []
        super().__init__(combo, mode, polling)

    def _consumer(self, topic: str, sub: str) -> Callable[[list[Delivery]], None]:
        received = self.received[(topic, sub)]

        def deliver(batch: list[Delivery]) -> None:
            received.extend(batch)
            self.history.deliver(topic, sub, batch)

        return deliver

    def subscribe(self, topic: str, sub: str) -> None:
        super().subscribe(topic, sub)
        self.history.subscribe(topic, sub)

    def publish(self, topic: str, msg: str, *, txn: TxnID | None = None, key: str | None = None, size: int = 100) -> MessageId:
        mid = super().publish(topic, msg, txn=txn, key=key, size=size)
        self.history.publish(msg, topic, txn, key, mid)
        return mid

    def ack(self, sub: str, *msgs: str, kind: AckKind = AckKind.INDIVIDUAL, txn: TxnID | None = None) -> None:
        super().ack(sub, *msgs, kind=kind, txn=txn)
        self.history.ack(sub, msgs, kind is AckKind.CUMULATIVE, txn)

    def new_txn(self, timeout_ms: int = 60_000) -> TxnID:
        txn = super().new_txn(timeout_ms)
        self.txn_ids.append(txn)
        return txn

    def _answered(self, txn: TxnID, status: TxnStatus) -> None:
        super()._answered(txn, status)
        self.history.heard(txn, status)

    def end(self, txn: TxnID, action: TxnAction = TxnAction.COMMIT) -> int:
        now = super().end(txn, action)  # unanswered after the operation timeout: never heard
        self.history.end(txn, action.value)
        return now

    def redeliver_unacked(self, topic: str, sub: str) -> None:
        self.broker.redeliver_unacked(topic, sub)
        self.history.fault("redeliver", sub)

    def poll_outcomes(self) -> None:
        """Note final outcomes while the coordinator still knows them (a crash can eat the
        client's answer, and v4 forgets finished txns, v5's GC collects them)."""
        if not self.combo.transactional or self.broker._closed:
            return
        for txn in self.txn_ids:
            label = str(txn)
            if self.history.outcomes.get(label) in ("committed", "aborted") or label not in self.history.end_requests:
                continue
            try:
                status = self.broker.coordinator().status(txn)
            except TxnbenchError:
                continue
            if status.final:
                self.history.outcome(txn, status.value)

    def run(self, us: int = 1_000_000) -> None:
        """Advance time; then every in-memory structure's invariants hold (``Broker._check``,
        which starts nothing): each scripted step and each fault ends in a run."""
        self.poll_outcomes()
        super().run(us)
        self.poll_outcomes()
        self.broker._check()

    def fault(self, kind: str, detail: Any = None) -> None:
        self.history.fault(kind, detail)

    def crash(self, reconnect: bool = True) -> None:
        self.poll_outcomes()
        super().crash(reconnect)
        self.broker._check()

    def finish(self) -> list[Violation]:
        """Record every txn's outcome as the coordinator knows it, then check."""
        coordinator = self.broker.coordinator() if self.combo.transactional else None
        for txn in self.txn_ids:
            status = self.outcomes.get(txn)
            if self.history.outcomes.get(str(txn)) in ("committed", "aborted"):
                continue
            outcome = status.value if status is not None else "unknown"
            if coordinator is not None:
                try:
                    outcome = coordinator.status(txn).value
                except TxnbenchError:
                    # forgotten (v4 drops a finished txn: TransactionMetadataStore removes it on
                    # the final state) or collected (v5's GC). One the client never asked to
                    # commit can only have aborted (the coordinator's timeout, or its abort);
                    # else keep what the client heard. The replayer settles its client-timed-out
                    # txns the same way (bench/replay/replay.py _settle_timed_out).
                    if str(txn) not in self.history.end_requests:
                        outcome = TxnStatus.ABORTED.value
            self.history.outcome(txn, outcome)
        return check(self.history)
