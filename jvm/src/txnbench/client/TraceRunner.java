package txnbench.client;

import java.io.BufferedReader;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * Issues the rows in trace order on one thread and reports every outcome as it completes
 * (jvm/PROTOCOL.md). Nothing on the issuing path waits for an operation to finish, except
 * {@code subscribe} (later rows must see the subscription) and {@code crash_broker}; an operation
 * that depends on an earlier one (a txn's ops on its new_txn, a commit on its txn's ops, a send on
 * the sends before it on the same topic, a plain ack on its message's delivery) is chained on it.
 *
 * <p>Paced, the trace's clock stops while a subscribe is waited for: the rows after it are due
 * that much later, so they keep their spacing. The model subscribes at once; without the pause a
 * trace's opening subscribes (128 on many-participants, 0.9 s) sent its first second of rows in
 * one burst, whose queueing the broker's latencies then showed and the model's did not.
 */
final class TraceRunner {
    private static final CompletableFuture<Void> DONE = CompletableFuture.completedFuture(null);

    private final Backend backend;
    private final Rows rows;
    private final Events ev;
    private final Args args;
    private final BufferedReader stdin;
    private final Semaphore inFlight;

    // Touched by the issuing thread only.
    private final Map<String, CompletableFuture<Backend.Txn>> txns = new HashMap<>();
    private final Map<String, List<CompletableFuture<?>>> txnOps = new HashMap<>();
    private final Map<String, CompletableFuture<Object>> published = new HashMap<>();
    private final Map<String, Backend.Sub> subs = new HashMap<>();
    private final Map<String, CompletableFuture<Void>> sendTail = new HashMap<>();
    private final Map<Integer, byte[]> payloads = new HashMap<>();

    /** topic \0 subscription \0 msg -> the delivered message id (completed on first delivery). */
    private final ConcurrentHashMap<String, CompletableFuture<Object>> received = new ConcurrentHashMap<>();
    /** Issued operations not yet completed (crash_broker and the drain wait for them). */
    private final Set<CompletableFuture<?>> outstanding = ConcurrentHashMap.newKeySet();
    /** Plain acks still waiting for their message: key -> row. */
    private final ConcurrentHashMap<String, Row> waitingAcks = new ConcurrentHashMap<>();
    private final AtomicLong maxLagUs = new AtomicLong(Long.MIN_VALUE);
    /** Trace row number -> how long the clock had paused for subscribes before it (paced runs). */
    private final ConcurrentSkipListMap<Long, Long> pausedBefore =
            new ConcurrentSkipListMap<>(Map.of(Long.MIN_VALUE, 0L));
    private final boolean paced;
    private volatile long lastDeliveryNanos = System.nanoTime();
    private volatile long lastOpDoneNanos = System.nanoTime();

    TraceRunner(Backend backend, Rows rows, Events ev, Args args, BufferedReader stdin) {
        this.backend = backend;
        this.rows = rows;
        this.ev = ev;
        this.args = args;
        this.stdin = stdin;
        this.inFlight = new Semaphore(args.maxInFlight);
        this.paced = args.pacing.equals("trace");
    }

    /** Runs every row, then drains; returns normally when {@code done} was reported. */
    void run() throws Exception {
        for (Row r : rows.rows) {
            if (paced) waitUntil(due(r));
            issue(r);
        }
        drain();
    }

    private void waitUntil(long dueUs) {
        while (true) {
            long left = dueUs - ev.nowUs();
            if (left <= 0) return;
            if (left > 2_000) {
                try {
                    Thread.sleep((left - 1_000) / 1_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            } else {
                LockSupport.parkNanos(left * 1_000);
            }
        }
    }

    private void issue(Row r) throws Exception {
        switch (r.op()) {
            case "subscribe" -> subscribe(r);
            case "new_txn" -> {
                long[] start = {started(r)};
                inFlight.acquire();
                CompletableFuture<Backend.Txn> f = backend.newTxn(r.timeout());
                txns.put(r.txn(), f);
                txnOps.put(r.txn(), new ArrayList<>());
                report(r, f, start, true, t -> new String[] {"txn_id", t.id()});
            }
            case "publish" -> publish(r);
            case "ack" -> ack(r);
            case "commit", "abort" -> end(r);
            case "split", "merge" -> {
                long[] start = {started(r)};
                inFlight.acquire();
                CompletableFuture<Void> f = r.op().equals("split")
                        ? backend.split(r.topic(), r.target(), r.key()) : backend.merge(r.topic(), r.target());
                report(r, f, start, true, null);
            }
            case "crash_broker" -> crash(r);
            default -> throw new IllegalStateException("unchecked op " + r.op());
        }
    }

    /** When the row is due on the client's clock: its time in the trace plus the pauses before it. */
    private long due(Row r) {
        return r.tsUs() + pausedBefore.floorEntry(r.row()).getValue();
    }

    /** The issue time of a row that goes out now; tracks the largest lag behind the trace. */
    private long started(Row r) {
        long now = ev.nowUs();
        maxLagUs.accumulateAndGet(now - due(r), Math::max);
        return now;
    }

    private void subscribe(Row r) {
        long start = started(r);
        String key = Rows.subKey(r.topic(), r.subscription());
        boolean cumulative = rows.cumulativeSubs.getOrDefault(key, false);
        try {
            // Waited for: a row after a subscribe must find the subscription there.
            Backend.Sub s = backend.subscribe(r.topic(), r.subscription(), r.subType(), cumulative, this::delivered)
                    .get(60, TimeUnit.SECONDS);
            subs.put(key, s);
            long end = ev.nowUs();
            if (paced) pausedBefore.put(r.row() + 1, pausedBefore.lastEntry().getValue() + (end - start));
            ev.emit(new Json.Out("subscribed").num("row", r.row()).str("topic", r.topic())
                    .str("subscription", r.subscription()).str("type", s.type()).num("t_us", end));
            emitOp(r, start, end, null, null);
        } catch (Exception e) {
            emitOp(r, start, ev.nowUs(), Events.describe(e), null);
        }
    }

    private void delivered(String topic, String subscription, String msg, Object id, int redeliveries) {
        long t = ev.nowUs();
        lastDeliveryNanos = System.nanoTime();
        String label = msg == null ? "" : msg;
        CompletableFuture<Object> f = received.computeIfAbsent(topic + '\u0000' + subscription + '\u0000' + label,
                k -> new CompletableFuture<>());
        boolean again = !f.complete(id) || redeliveries > 0;
        ev.emit(new Json.Out("deliver").str("topic", topic).str("subscription", subscription).str("msg", msg)
                .num("t_us", t).bool("redelivery", again).str("message_id", String.valueOf(id)));
    }

    private void publish(Row r) throws InterruptedException {
        CompletableFuture<Backend.Txn> txnF = r.txn() == null ? null : txns.get(r.txn());
        CompletableFuture<Void> tail = sendTail.getOrDefault(r.topic(), DONE);
        byte[] payload = payloads.computeIfAbsent(Math.max(0, r.size()), byte[]::new);
        long[] start = {-1};
        inFlight.acquire();
        CompletableFuture<Object> sent;
        if (tail.isDone() && (txnF == null || txnF.isDone())) {
            start[0] = started(r);
            sent = send(r, txnF, payload);
        } else {
            // Issued once the sends before it on this topic were issued and its txn exists: the
            // client keeps a producer's order only among sends it has been handed.
            CompletableFuture<Void> issued = new CompletableFuture<>();
            CompletableFuture<?> gate = txnF == null ? tail : CompletableFuture.allOf(tail, txnF);
            sent = gate.handle((v, e) -> null).thenCompose(v -> {
                start[0] = started(r);
                try {
                    return send(r, txnF, payload);
                } finally {
                    issued.complete(null);
                }
            });
            sendTail.put(r.topic(), issued);
        }
        published.put(r.msg(), sent);
        if (r.txn() != null) txnOps.get(r.txn()).add(sent);
        report(r, sent, start, true, id -> new String[] {"message_id", String.valueOf(id)});
    }

    private CompletableFuture<Object> send(Row r, CompletableFuture<Backend.Txn> txnF, byte[] payload) {
        if (txnF == null) return backend.publish(r.topic(), r.key(), r.msg(), payload, null);
        if (txnF.isCompletedExceptionally()) return failedTxn(r, txnF);
        return backend.publish(r.topic(), r.key(), r.msg(), payload, txnF.join());
    }

    private static <T> CompletableFuture<T> failedTxn(Row r, CompletableFuture<Backend.Txn> txnF) {
        return txnF.thenApply(t -> (T) null).exceptionally(e -> {
            throw new IllegalStateException("txn " + r.txn() + " was not opened: " + Events.describe(e));
        });
    }

    private void ack(Row r) {
        Backend.Sub sub = subs.get(Rows.subKey(r.topic(), r.subscription()));
        if (sub == null) {
            long now = started(r);
            emitOp(r, now, now, "IllegalStateException: subscription " + r.subscription() + " on " + r.topic()
                    + " is not subscribed", null);
            return;
        }
        String key = r.topic() + '\u0000' + r.subscription() + '\u0000' + r.msg();
        long[] start = {-1};
        CompletableFuture<Void> acked;
        if (r.txn() == null) {
            // A consumer acks what it has received: a plain ack waits for its message (the model's
            // deferred ack, bench/replay.py).
            CompletableFuture<Object> got = received.computeIfAbsent(key, k -> new CompletableFuture<>());
            if (!got.isDone()) waitingAcks.put(key + '\u0000' + r.row(), r);
            acked = got.thenCompose(id -> {
                waitingAcks.remove(key + '\u0000' + r.row());
                start[0] = started(r);
                return backend.ack(sub, id, r.cumulative(), null);
            });
        } else {
            // A txn ack is applied as written (bench/replay.py): by the delivered id when the
            // message has arrived, else by the id its publish returned.
            CompletableFuture<Backend.Txn> txnF = txns.get(r.txn());
            CompletableFuture<Object> got = received.get(key);
            CompletableFuture<Object> idF = got != null && got.isDone() ? got
                    : published.getOrDefault(r.msg(), CompletableFuture.failedFuture(
                            new IllegalStateException("message " + r.msg() + " was not published by this run")));
            acked = CompletableFuture.allOf(idF, txnF).handle((v, e) -> null).thenCompose(v -> {
                start[0] = started(r);
                if (txnF.isCompletedExceptionally()) return failedTxn(r, txnF);
                if (idF.isCompletedExceptionally()) return idF.thenApply(x -> (Void) null);
                return backend.ack(sub, idF.join(), r.cumulative(), txnF.join());
            });
            txnOps.get(r.txn()).add(acked);
        }
        report(r, acked, start, false, null);
    }

    private void end(Row r) throws InterruptedException {
        CompletableFuture<Backend.Txn> txnF = txns.remove(r.txn());
        List<CompletableFuture<?>> ops = txnOps.remove(r.txn());
        long[] start = {-1};
        inFlight.acquire();
        boolean commit = r.op().equals("commit");
        // The client would end a txn with sends still pending on it; the trace means after them.
        CompletableFuture<Void> f = CompletableFuture.allOf(ops.toArray(CompletableFuture[]::new))
                .handle((v, e) -> null).thenCombine(txnF.handle((t, e) -> null), (a, b) -> null)
                .thenCompose(v -> {
                    start[0] = started(r);
                    if (txnF.isCompletedExceptionally()) return failedTxn(r, txnF);
                    Backend.Txn t = txnF.join();
                    return commit ? backend.commit(t) : backend.abort(t);
                });
        report(r, f, start, true, null);
    }

    private void crash(Row r) throws Exception {
        CompletableFuture.allOf(outstanding.toArray(CompletableFuture[]::new)).handle((v, e) -> null).get();
        long t = ev.nowUs();
        maxLagUs.accumulateAndGet(t - due(r), Math::max);
        ev.emit(new Json.Out("crash").num("row", r.row()).num("t_us", t));
        String line = stdin.readLine();
        if (line == null) throw new IllegalStateException("stdin closed while waiting for {\"cmd\": \"resume\"}");
        Object cmd = Json.parseObject(line).get("cmd");
        if (!"resume".equals(cmd)) throw new IllegalStateException("expected {\"cmd\": \"resume\"} on stdin, got " + line);
        ev.emit(new Json.Out("resumed").num("row", r.row()).num("t_us", ev.nowUs()));
    }

    /** Reports the row's {@code op} event when {@code f} completes. */
    private <T> void report(Row r, CompletableFuture<T> f, long[] start, boolean permit,
                            java.util.function.Function<T, String[]> extra) {
        outstanding.add(f);
        f.whenComplete((v, e) -> {
            long end = ev.nowUs();
            lastOpDoneNanos = System.nanoTime();
            outstanding.remove(f);
            if (permit) inFlight.release();
            String[] kv = e == null && extra != null && v != null ? extra.apply(v) : null;
            emitOp(r, start[0] < 0 ? end : start[0], end, e == null ? null : Events.describe(e), kv);
        });
    }

    private void emitOp(Row r, long start, long end, String error, String[] extra) {
        Json.Out o = new Json.Out("op").num("row", r.row()).str("op", r.op()).num("due_us", due(r))
                .num("start_us", start).num("end_us", end).bool("ok", error == null).str("error", error);
        if (r.msg() != null && (r.op().equals("publish") || r.op().equals("ack"))) o.str("msg", r.msg());
        if (r.txn() != null) o.str("txn", r.txn());
        if (extra != null) o.str(extra[0], extra[1]);
        ev.emit(o);
    }

    /**
     * Waits until every row has completed (issued ops and plain acks waiting for their message) and
     * no delivery came for --quiet-ms, or until --drain-ms has passed since the last row was issued.
     */
    private void drain() throws Exception {
        long startNs = System.nanoTime();
        long boundNs = startNs + TimeUnit.MILLISECONDS.toNanos(args.drainMs);
        long quietNs = TimeUnit.MILLISECONDS.toNanos(args.quietMs);
        while (true) {
            long now = System.nanoTime();
            if (now >= boundNs) break;
            boolean idle = outstanding.isEmpty() && waitingAcks.isEmpty();
            long lastActivity = Math.max(lastDeliveryNanos, lastOpDoneNanos);
            if (idle && now - lastActivity >= quietNs) break;
            Thread.sleep(idle ? Math.max(1, Math.min(20, (lastActivity + quietNs - now) / 1_000_000)) : 5);
        }
        long doneUs = ev.nowUs();
        for (Row r : waitingAcks.values()) {
            emitOp(r, doneUs, doneUs, "NotDelivered: the acked message did not arrive before the drain ended", null);
        }
        long lag = maxLagUs.get();
        ev.emit(new Json.Out("done").num("t_us", doneUs).num("rows", rows.rows.size())
                .num("max_lag_us", lag == Long.MIN_VALUE ? 0 : lag)
                .num("paused_us", pausedBefore.lastEntry().getValue())
                .num("drain_ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs)));
    }
}
