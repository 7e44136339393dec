package txnbench.client;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.v5.Message;
import org.apache.pulsar.client.api.v5.MessageId;
import org.apache.pulsar.client.api.v5.Producer;
import org.apache.pulsar.client.api.v5.PulsarClient;
import org.apache.pulsar.client.api.v5.QueueConsumer;
import org.apache.pulsar.client.api.v5.StreamConsumer;
import org.apache.pulsar.client.api.v5.Transaction;
import org.apache.pulsar.client.api.v5.async.AsyncMessageBuilder;
import org.apache.pulsar.client.api.v5.config.BatchingPolicy;
import org.apache.pulsar.client.api.v5.config.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.v5.config.TransactionPolicy;
import org.apache.pulsar.client.api.v5.schema.Schema;
import org.apache.pulsar.common.policies.data.ScalableTopicMetadata;
import org.apache.pulsar.common.util.Murmur3_32Hash;

/**
 * v5: the V5 SDK (pulsar-client-v5) on topic:// scalable topics; its transactions are flagged
 * scalable and run through TransactionCoordinatorV5 and the metadata-store buffers.
 *
 * <p>The SDK's transaction timeout is client-wide (TransactionPolicy), so there is one client per
 * distinct timeout in the rows; a txn runs on its timeout's client (its producers too), plain
 * publishes and every consumer on the client of the smallest timeout.
 */
final class V5Backend implements Backend {
    private final String serviceUrl;
    private final PulsarAdmin admin;
    private final Map<Long, PulsarClient> clients = new TreeMap<>();
    private final Map<String, Producer<byte[]>> producers = new ConcurrentHashMap<>();
    private long baseTimeout = Row.DEFAULT_TIMEOUT_MS;

    V5Backend(String serviceUrl, String adminUrl) throws Exception {
        this.serviceUrl = serviceUrl;
        this.admin = Admin.connect(adminUrl);
    }

    private synchronized PulsarClient client(long timeoutMs) throws Exception {
        PulsarClient c = clients.get(timeoutMs);
        if (c == null) {
            c = PulsarClient.builder().serviceUrl(serviceUrl)
                    .transactionPolicy(TransactionPolicy.builder().timeout(Duration.ofMillis(timeoutMs)).build())
                    .build();
            clients.put(timeoutMs, c);
        }
        return c;
    }

    @Override
    public void setup(Rows rows) throws Exception {
        if (!rows.timeouts.isEmpty()) baseTimeout = rows.timeouts.first();
        client(baseTimeout);
        for (long t : rows.timeouts) client(t);
        Admin.ensureNamespaces(admin, rows.namespaces);
        for (String topic : rows.topics.keySet()) {
            try {
                admin.scalableTopics().createScalableTopic(topic, 1);
            } catch (PulsarAdminException.ConflictException e) {
                // exists already (a reused namespace)
            }
        }
        for (Map.Entry<String, Set<Long>> e : rows.producers.entrySet()) {
            for (long t : e.getValue()) producer(e.getKey(), t == 0 ? baseTimeout : t, t != 0);
        }
    }

    /** A topic's producer on the client of a timeout, for txn sends or for plain ones (as V4Backend's). */
    Producer<byte[]> producer(String topic, long timeoutMs, boolean txn) throws Exception {
        String k = timeoutMs + (txn ? "\u0000txn\u0000" : "\u0000plain\u0000") + topic;
        Producer<byte[]> p = producers.get(k);
        if (p == null) {
            p = client(timeoutMs).newProducer(Schema.bytes()).topic(topic)
                    .batchingPolicy(BatchingPolicy.ofDisabled()).blockIfQueueFull(true).create();
            attachSegments(topic, p);
            producers.put(k, p);
        }
        return p;
    }

    /**
     * The SDK attaches a topic's per-segment producers lazily, on the first send to each segment
     * (ScalableTopicProducer.getOrCreateSegmentProducerAsync; create() attaches up front only
     * under an exclusive access mode, eagerAttachInitialAsync). Those first sends took 45-75 ms
     * on the standalone, at the run's start, against v4's partitioned producer that connects
     * its partitions in create(): attached here, at setup, both designs start connected.
     */
    private static void attachSegments(String topic, Producer<byte[]> p) throws Exception {
        try {
            Class<?> c = p.getClass();
            Field active = c.getDeclaredField("activeSegments");
            active.setAccessible(true);
            Method attach = c.getDeclaredMethod("getOrCreateSegmentProducerAsync", long.class);
            attach.setAccessible(true);
            for (Object seg : (List<?>) active.get(p)) {
                Method id = seg.getClass().getDeclaredMethod("segmentId");
                id.setAccessible(true);
                ((CompletableFuture<?>) attach.invoke(p, (long) id.invoke(seg))).get(60, TimeUnit.SECONDS);
            }
        } catch (ReflectiveOperationException | ClassCastException e) {
            throw new IllegalStateException("attaching the segment producers of " + topic + " at setup: this "
                    + "pulsar-client-v5 has no ScalableTopicProducer.activeSegments/getOrCreateSegmentProducerAsync "
                    + "as 5.0.0-M1 has (" + e + ")", e);
        }
    }

    @Override
    public String settings() {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("library", "pulsar-client-v5 " + PulsarClient.class.getPackage().getImplementationVersion());
        m.put("java", System.getProperty("java.vm.name") + " " + System.getProperty("java.version"));
        m.put("batching", "disabled (BatchingPolicy.ofDisabled)");
        m.put("ack_grouping", "default");
        m.put("subscription_type", "QueueConsumer (Shared per segment) for individual acks, "
                + "StreamConsumer (Exclusive per segment) for cumulative acks");
        m.put("initial_position", "LATEST");
        m.put("producers", PRODUCERS);
        m.put("segment_producers", "attached at setup (the SDK attaches them on a segment's first send)");
        m.put("txn_timeout", "client-wide: one client per distinct timeout " + clients.keySet());
        return Backend.settingsJson(m);
    }

    @Override
    public CompletableFuture<Sub> subscribe(String topic, String subscription, String subType, boolean cumulative,
                                            Deliveries out) {
        // subType is Shared or Exclusive, the one this consumer gives, or null (Rows.check)
        PulsarClient c;
        try {
            c = client(baseTimeout);
        } catch (Exception e) {
            return CompletableFuture.failedFuture(e);
        }
        if (cumulative) {
            return c.newStreamConsumer(Schema.bytes()).topic(topic).subscriptionName(subscription)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.LATEST).subscribeAsync()
                    .thenApply(sc -> {
                        receiveLoop(() -> sc.async().receive(), topic, subscription, out);
                        return new Sub(sc, "StreamConsumer");
                    });
        }
        return c.newQueueConsumer(Schema.bytes()).topic(topic).subscriptionName(subscription)
                .subscriptionInitialPosition(SubscriptionInitialPosition.LATEST).subscribeAsync()
                .thenApply(qc -> {
                    receiveLoop(() -> qc.async().receive(), topic, subscription, out);
                    return new Sub(qc, "QueueConsumer");
                });
    }

    /** The SDK has no message listener: an async receive chained on itself, no thread per consumer. */
    private void receiveLoop(java.util.function.Supplier<CompletableFuture<Message<byte[]>>> receive,
                             String topic, String subscription, Deliveries out) {
        receive.get().whenComplete((m, err) -> {
            if (err != null) return;  // the consumer was closed
            out.delivered(topic, subscription, m.properties().get(MSG_PROPERTY), m.id(), m.redeliveryCount());
            receiveLoop(receive, topic, subscription, out);
        });
    }

    @Override
    public CompletableFuture<Txn> newTxn(long timeoutMs) {
        try {
            return client(timeoutMs).newTransactionAsync().thenApply(t -> new Txn(t, id(t), timeoutMs));
        } catch (Exception e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    /** The classic Transaction a TransactionV5 wraps (package-private field). */
    private static org.apache.pulsar.client.api.transaction.Transaction v4(Transaction t)
            throws ReflectiveOperationException {
        Field f = t.getClass().getDeclaredField("v4Transaction");
        f.setAccessible(true);
        return (org.apache.pulsar.client.api.transaction.Transaction) f.get(t);
    }

    /** The broker's txn id. */
    private static String id(Transaction t) {
        try {
            return V4Backend.id(v4(t).getTxnID());
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /**
     * When the txn's pending ops, this ack among them, are answered. The SDK's ack returns
     * nothing, but hands a txn ack to the classic consumer (ScalableQueueConsumer.acknowledge),
     * which registers its future on the classic txn (ConsumerBase L739-742: registerAckedTopic,
     * the ack, registerAckOp), and the
     * commit waits for them all (TransactionImpl.commit: opFuture). Returning that future lets
     * TraceRunner.end start a commit's clock after its acks, as it does for v4, whose ack returns
     * the future itself: END_TXN latency alike in both designs. The ack's own error is not
     * reachable; when the txn had no failed op before it and has one once it is answered
     * (hasOpsFailed), the ack is reported failed.
     */
    private static CompletableFuture<Void> acksAnswered(Object v4, boolean failedBefore) {
        CompletableFuture<?> ops = (CompletableFuture<?>) field(v4, "opFuture");
        return ops.thenApply(x -> {
            if (!failedBefore && (Boolean) field(v4, "hasOpsFailed")) {
                throw new IllegalStateException("TransactionHasOperationFailed: an op of the txn failed by this "
                        + "ack's answer (TransactionImpl.hasOpsFailed; the v5 SDK hides the ack's own error)");
            }
            return null;
        });
    }

    private static Object field(Object o, String name) {
        try {
            Field f = o.getClass().getDeclaredField(name);
            f.setAccessible(true);
            return f.get(o);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("cannot read " + o.getClass().getSimpleName() + "." + name
                    + " under the v5 SDK's Transaction: " + e, e);
        }
    }

    @Override
    public CompletableFuture<Object> publish(String topic, String key, String msg, byte[] payload, Txn txn) {
        AsyncMessageBuilder<byte[]> b;
        try {
            b = producer(topic, txn == null ? baseTimeout : txn.timeoutMs(), txn != null).async().newMessage();
        } catch (Exception e) {
            return CompletableFuture.failedFuture(e);
        }
        b.value(payload).property(MSG_PROPERTY, msg);
        if (key != null) b.key(key);
        if (txn != null) b.transaction((Transaction) txn.handle());
        return b.send().thenApply(id -> id);
    }

    @Override
    @SuppressWarnings("unchecked")
    public CompletableFuture<Void> ack(Sub sub, Object messageId, boolean cumulative, Txn txn) {
        // The SDK's acks return nothing: a plain one goes to the client's ack grouping, a txn one
        // is answered when its classic txn's pending ops are (acksAnswered).
        try {
            MessageId id = (MessageId) messageId;
            Transaction t = txn == null ? null : (Transaction) txn.handle();
            Object v4 = t == null ? null : v4(t);
            boolean failedBefore = v4 != null && (Boolean) field(v4, "hasOpsFailed");
            if (sub.handle() instanceof StreamConsumer<?> sc) {
                if (!cumulative) throw new IllegalStateException("an individual ack on a StreamConsumer");
                if (t == null) sc.async().acknowledgeCumulative(id); else sc.async().acknowledgeCumulative(id, t);
            } else {
                if (cumulative) throw new IllegalStateException("a cumulative ack on a QueueConsumer");
                QueueConsumer<byte[]> qc = (QueueConsumer<byte[]>) sub.handle();
                if (t == null) qc.async().acknowledge(id); else qc.async().acknowledge(id, t);
            }
            return v4 == null ? CompletableFuture.completedFuture(null) : acksAnswered(v4, failedBefore);
        } catch (RuntimeException | ReflectiveOperationException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    @Override
    public CompletableFuture<Void> commit(Txn txn) { return ((Transaction) txn.handle()).async().commit(); }

    @Override
    public CompletableFuture<Void> abort(Txn txn) { return ((Transaction) txn.handle()).async().abort(); }

    @Override
    public CompletableFuture<Void> split(String topic, String target, String key) {
        return admin.scalableTopics().getMetadataAsync(topic).thenCompose(meta -> {
            long id = segment(topic, meta, target == null ? null : target.split(",")[0].trim(), key);
            return admin.scalableTopics().splitSegmentAsync(topic, id);
        });
    }

    @Override
    public CompletableFuture<Void> merge(String topic, String target) {
        return admin.scalableTopics().getMetadataAsync(topic).thenCompose(meta -> {
            String[] two = target.split(",");
            long a = segment(topic, meta, two[0].trim(), null);
            long b = segment(topic, meta, two[1].trim(), null);
            return admin.scalableTopics().mergeSegmentsAsync(topic, a, b);
        });
    }

    /**
     * The broker's active segment for a model descriptor {@code <start>-<end>-<id>} (same hash range),
     * or, without one, the active segment holding {@code key} (MurmurHash3 & 0xffff, as the SDK's
     * SegmentRouter.hash routes keys), or the first active one.
     */
    static long segment(String topic, ScalableTopicMetadata meta, String descriptor, String key) {
        List<ScalableTopicMetadata.SegmentInfo> active = new ArrayList<>();
        for (ScalableTopicMetadata.SegmentInfo s : meta.getSegments().values()) if (s.isActive()) active.add(s);
        active.sort(Comparator.comparingInt(s -> s.getHashRange().getStart()));
        if (active.isEmpty()) throw new IllegalStateException(topic + " has no active segment");
        if (descriptor != null) {
            String[] p = descriptor.split("-");
            if (p.length != 3) throw new IllegalArgumentException("segment descriptor " + descriptor + " is not <start>-<end>-<id>");
            // The model writes the range in hex, end inclusive (engine/topics.py Segment.descriptor).
            int start = Integer.parseInt(p[0], 16);
            int end = Integer.parseInt(p[1], 16);
            for (var s : active) {
                if (s.getHashRange().getStart() == start && s.getHashRange().getEnd() == end) return s.getSegmentId();
            }
            throw new IllegalStateException(topic + " has no active segment over hash range " + start + "-" + end);
        }
        if (key != null) {
            int h = Murmur3_32Hash.getInstance().makeHash(key.getBytes(java.nio.charset.StandardCharsets.UTF_8)) & 0xffff;
            for (var s : active) {
                if (s.getHashRange().getStart() <= h && h <= s.getHashRange().getEnd()) return s.getSegmentId();
            }
        }
        return active.get(0).getSegmentId();
    }

    @Override
    public void close() {
        for (PulsarClient c : clients.values()) {
            try {
                c.close();
            } catch (Exception e) {
                // closing at exit
            }
        }
        admin.close();
    }
}
