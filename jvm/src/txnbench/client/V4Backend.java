package txnbench.client;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.api.transaction.TxnID;

/**
 * v4: the classic client (pulsar-client-original) with transactions on, on persistent:// topics.
 * The broker runs them through TopicTransactionBuffer and the MLTransactionMetadataStore coordinator.
 */
final class V4Backend implements Backend {
    static final SubscriptionType SUB_TYPE = SubscriptionType.Failover;  // individual and cumulative acks both work

    private final PulsarClient client;
    private final PulsarAdmin admin;
    private final int maxPending;
    private final Map<String, Producer<byte[]>> producers = new ConcurrentHashMap<>();

    V4Backend(String serviceUrl, String adminUrl, int maxPending) throws Exception {
        this.admin = Admin.connect(adminUrl);
        this.maxPending = maxPending;
        this.client = PulsarClient.builder().serviceUrl(serviceUrl).enableTransaction(true).build();
    }

    @Override
    public void setup(Rows rows) throws Exception {
        Admin.ensureNamespaces(admin, rows.namespaces);
        for (Map.Entry<String, Integer> t : rows.topics.entrySet()) {
            try {
                if (t.getValue() > 0) {
                    admin.topics().createPartitionedTopic(t.getKey(), t.getValue());
                } else {
                    admin.topics().createNonPartitionedTopic(t.getKey());
                }
            } catch (PulsarAdminException.ConflictException e) {
                // exists already (a reused namespace)
            }
        }
        for (Map.Entry<String, Set<Long>> e : rows.producers.entrySet()) {
            for (long t : e.getValue()) producer(e.getKey(), t != 0);
        }
    }

    /**
     * A topic's producer for txn sends or for plain ones: two, not one. TopicTransactionBuffer
     * parks a partition's first txn append until its first snapshot is written
     * (appendBufferToTxn: takeFirstSnapshot) and appends plain sends at once, so one producer
     * sending both got its receipts out of order on fresh partitions and closed its connection
     * (ProducerImpl.ackReceived: "unexpected sequence id"), failing every op in flight on it.
     */
    Producer<byte[]> producer(String topic, boolean txn) throws Exception {
        String k = (txn ? "txn\u0000" : "plain\u0000") + topic;
        Producer<byte[]> p = producers.get(k);
        if (p == null) {
            // No batching: one message per entry, each with its own id (as the V5 SDK is run too).
            p = client.newProducer().topic(topic).enableBatching(false).blockIfQueueFull(true)
                    .maxPendingMessages(maxPending).create();
            producers.put(k, p);
        }
        return p;
    }

    @Override
    public String settings() {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("library", "pulsar-client-original " + PulsarClient.class.getPackage().getImplementationVersion());
        m.put("java", System.getProperty("java.vm.name") + " " + System.getProperty("java.version"));
        m.put("batching", "disabled");
        m.put("ack_grouping", "default (acknowledgmentGroupTime 100 ms)");
        m.put("subscription_type", SUB_TYPE.name() + " (unless the trace names one)");
        m.put("initial_position", "Latest");
        m.put("txn_timeout", "per txn (newTransaction().withTransactionTimeout)");
        m.put("max_pending_messages", Integer.toString(maxPending));
        m.put("producers", PRODUCERS);
        return Backend.settingsJson(m);
    }

    @Override
    public CompletableFuture<Sub> subscribe(String topic, String subscription, String subType, boolean cumulative,
                                            Deliveries out) {
        SubscriptionType type = subType == null ? SUB_TYPE : SubscriptionType.valueOf(subType);
        return client.newConsumer().topic(topic).subscriptionName(subscription).subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Latest)
                .messageListener((Consumer<byte[]> c, org.apache.pulsar.client.api.Message<byte[]> m) ->
                        out.delivered(topic, subscription, m.getProperty(MSG_PROPERTY), m.getMessageId(),
                                m.getRedeliveryCount()))
                .subscribeAsync()
                .thenApply(c -> new Sub(c, type.name()));
    }

    @Override
    public CompletableFuture<Txn> newTxn(long timeoutMs) {
        return client.newTransaction().withTransactionTimeout(timeoutMs, TimeUnit.MILLISECONDS).build()
                .thenApply(t -> new Txn(t, id(t.getTxnID()), timeoutMs));
    }

    static String id(TxnID id) { return "(" + id.getMostSigBits() + "," + id.getLeastSigBits() + ")"; }

    @Override
    public CompletableFuture<Object> publish(String topic, String key, String msg, byte[] payload, Txn txn) {
        Producer<byte[]> p;
        try {
            p = producer(topic, txn != null);
        } catch (Exception e) {
            return CompletableFuture.failedFuture(e);
        }
        TypedMessageBuilder<byte[]> b = txn == null ? p.newMessage() : p.newMessage((Transaction) txn.handle());
        b.value(payload).property(MSG_PROPERTY, msg);
        if (key != null) b.key(key);
        return b.sendAsync().thenApply(id -> id);
    }

    @Override
    @SuppressWarnings("unchecked")
    public CompletableFuture<Void> ack(Sub sub, Object messageId, boolean cumulative, Txn txn) {
        Consumer<byte[]> c = (Consumer<byte[]>) sub.handle();
        MessageId id = (MessageId) messageId;
        if (txn == null) return cumulative ? c.acknowledgeCumulativeAsync(id) : c.acknowledgeAsync(id);
        Transaction t = (Transaction) txn.handle();
        return cumulative ? c.acknowledgeCumulativeAsync(id, t) : c.acknowledgeAsync(id, t);
    }

    @Override
    public CompletableFuture<Void> commit(Txn txn) { return ((Transaction) txn.handle()).commit(); }

    @Override
    public CompletableFuture<Void> abort(Txn txn) { return ((Transaction) txn.handle()).abort(); }

    @Override
    public CompletableFuture<Void> split(String topic, String target, String key) {
        return CompletableFuture.failedFuture(new UnsupportedOperationException("split needs a scalable topic"));
    }

    @Override
    public CompletableFuture<Void> merge(String topic, String target) {
        return CompletableFuture.failedFuture(new UnsupportedOperationException("merge needs a scalable topic"));
    }

    @Override
    public void close() {
        try {
            client.close();
        } catch (Exception e) {
            // closing at exit
        }
        admin.close();
    }
}
