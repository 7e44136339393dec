"""The per-thread CPU and store-latency readings behind the per-write service time
(benchmarks/broker_cpu.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.broker_cpu import _OPS, machine_cpu, thread_cpu


def test_a_spinning_thread_shows_its_cpu_under_its_name() -> None:
    spin = "open('/proc/self/comm', 'w').write('txnbench-spin')\nwhile True: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)
        before, (busy0, all0) = thread_cpu(str(child.pid)), machine_cpu()
        time.sleep(0.5)
        after, (busy1, all1) = thread_cpu(str(child.pid)), machine_cpu()
    finally:
        child.kill()
        child.wait()
    assert set(after) == {"txnbench-spin"}
    assert after["txnbench-spin"] - before["txnbench-spin"] > 0.2  # most of the 0.5 s, on a busy machine too
    # equal when no core was idle (the suite runs on both); the two are sums of 1/100 s ticks as
    # floats, so "equal" may differ in the last bit (0.98999... against 0.99000...)
    assert all1 - all0 >= busy1 - busy0 - 1e-6 and busy1 - busy0 > 0.2


def test_the_store_ops_metric_is_read_per_type_for_successes_only() -> None:
    text = "\n".join([
        'pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="put",status="success"} 2480.0',
        'pulsar_metadata_store_ops_latency_ms_sum{cluster="standalone",name="metadata-store",type="put",status="success"} 1794.0',
        'pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="put",status="fail"} 2.0',
        'pulsar_metadata_store_ops_latency_ms_bucket{cluster="standalone",name="metadata-store",type="put",status="success",le="1.0"} 9.0',
    ])
    assert _OPS.findall(text) == [("count", "put", "2480.0"), ("sum", "put", "1794.0")]
