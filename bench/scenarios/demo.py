"""``txnbench demo``: the non-transactional half of the system in a few lines of output —
a persistent topic and a scalable topic that splits mid-run, what each subscription got, and
the counters."""

from __future__ import annotations

from typing import TextIO

from engine.broker import Broker, BrokerConfig
from engine.clock import VirtualScheduler
from engine.dispatcher import Delivery, DispatchMode
from engine.memledger import MemoryLedgerFactory

PARTITION = "persistent://public/demo/orders"
SCALABLE = "topic://public/demo/events"


def run_demo(out: TextIO, messages: int = 12, mode: DispatchMode = DispatchMode.POLLING) -> dict[str, int]:
    sched = VirtualScheduler()
    broker = Broker(sched, MemoryLedgerFactory(), BrokerConfig(dispatch=mode))
    got: dict[str, list[Delivery]] = {}
    for topic in (PARTITION, SCALABLE):
        got[topic] = []
        broker.subscribe(topic, "demo-sub", got[topic].extend)
    for i in range(messages):
        sched.run_until(i * 1_000)
        broker.publish(PARTITION, f"order-{i}", 256)
        broker.publish(SCALABLE, f"event-{i}", 256, key=f"user-{i % 4}")
        if i == messages // 2:
            children = broker.split(SCALABLE)
            print(f"t={sched.now_us()}us split {SCALABLE}: sealed the first segment, created", file=out)
            for c in children:
                print(f"    {c}", file=out)
    sched.run_until_idle()
    for topic, deliveries in got.items():
        print(f"\n{topic} [demo-sub] received {len(deliveries)} messages:", file=out)
        for d in deliveries:
            print(f"  {d.delivered_ts_us:>7}us  {d.msg:<10} from {d.message_id}", file=out)
    stats = dict(sorted(broker.stats().items()))
    print("\ncounters:", file=out)
    for k, v in stats.items():
        print(f"  {k:<32} {v}", file=out)
    broker.close()
    return stats
