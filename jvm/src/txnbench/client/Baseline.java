package txnbench.client;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The tight loop the trace client is measured against: N messages of S bytes to one topic through
 * the same Backend (same client, producer settings and in-flight bound), plain or in txns of K.
 */
final class Baseline {
    private Baseline() {}

    static Json.Out run(Backend backend, Args a) throws Exception {
        List<Row> setupRows = new ArrayList<>();
        if (a.txnSize > 0) setupRows.add(new Row(0, 0, "new_txn", "b", null, null, null, 0, null, null, null, null, null));
        setupRows.add(new Row(setupRows.size(), 0, "publish", a.txnSize > 0 ? "b" : null, a.topic, "m", null,
                a.size, null, null, null, null, null));
        if (a.txnSize > 0) setupRows.add(new Row(2, 0, "commit", "b", null, null, null, 0, null, null, null, null, null));
        backend.setup(Rows.of(setupRows, a.design));

        byte[] payload = new byte[a.size];
        Semaphore sem = new Semaphore(a.maxInFlight);
        AtomicLong failed = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>();
        List<CompletableFuture<?>> last = new ArrayList<>();
        long t0 = System.nanoTime();
        if (a.txnSize <= 0) {
            CompletableFuture<Object> f = null;
            for (long i = 0; i < a.baselineMessages; i++) {
                sem.acquire();
                f = backend.publish(a.topic, null, "b" + i, payload, null);
                f.whenComplete((v, e) -> {
                    if (e != null && failed.getAndIncrement() == 0) firstError.set(Events.describe(e));
                    sem.release();
                });
            }
            if (f != null) last.add(f);
        } else {
            long sent = 0;
            while (sent < a.baselineMessages) {
                int k = (int) Math.min(a.txnSize, a.baselineMessages - sent);
                sem.acquire(k);
                long first = sent;
                CompletableFuture<Void> end = backend.newTxn(Row.DEFAULT_TIMEOUT_MS).thenCompose(t -> {
                    CompletableFuture<?>[] sends = new CompletableFuture<?>[k];
                    for (int j = 0; j < k; j++) sends[j] = backend.publish(a.topic, null, "b" + (first + j), payload, t);
                    return CompletableFuture.allOf(sends).thenCompose(v -> backend.commit(t));
                });
                end.whenComplete((v, e) -> {
                    if (e != null && failed.getAndAdd(k) == 0) firstError.set(Events.describe(e));
                    sem.release(k);
                });
                sent += k;
            }
        }
        sem.acquire(a.maxInFlight);  // every message completed
        double seconds = (System.nanoTime() - t0) / 1e9;
        return new Json.Out("baseline").num("messages", a.baselineMessages).num("txn_size", a.txnSize)
                .num("size", a.size).num("seconds", seconds).num("rate", a.baselineMessages / seconds)
                .num("failed", failed.get()).str("error", firstError.get());
    }
}
