package txnbench.client;

import java.lang.management.ManagementFactory;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/** What the trace runner needs from one design's client library (V4Backend, V5Backend). */
interface Backend extends AutoCloseable {

    /** A transaction as the client library holds it, with the broker's id "(mostBits,leastBits)". */
    record Txn(Object handle, String id, long timeoutMs) {}

    /** Where a consumer reports each message it receives. */
    interface Deliveries {
        void delivered(String topic, String subscription, String msg, Object messageId, int redeliveryCount);
    }

    /** A subscribed consumer; {@code type} names the subscription type used. */
    record Sub(Object handle, String type) {}

    /** Creates namespaces, topics and producers the rows need (before t0). */
    void setup(Rows rows) throws Exception;

    /** The client settings the {@code ready} event reports, as a JSON object. */
    String settings();

    /** {@code subType}: the trace's subscription type, or null for the backend's own choice. */
    CompletableFuture<Sub> subscribe(String topic, String subscription, String subType, boolean cumulative,
                                     Deliveries out);

    CompletableFuture<Txn> newTxn(long timeoutMs);

    /** Sends one message; completes with its message id. Must be called in per-producer order. */
    CompletableFuture<Object> publish(String topic, String key, String msg, byte[] payload, Txn txn);

    CompletableFuture<Void> ack(Sub sub, Object messageId, boolean cumulative, Txn txn);

    CompletableFuture<Void> commit(Txn txn);

    CompletableFuture<Void> abort(Txn txn);

    /** Splits the active segment matching {@code target} (or holding {@code key}, or the first). */
    CompletableFuture<Void> split(String topic, String target, String key);

    CompletableFuture<Void> merge(String topic, String target);

    @Override
    void close();

    /** How both designs' producers are laid out (the ready event's client settings). */
    String PRODUCERS = "two per topic: one for txn sends, one for plain sends";

    /** The label carried by every message (jvm/PROTOCOL.md). */
    String MSG_PROPERTY = "txnbench-msg";

    /** {@code m} as a JSON object, with the options this JVM was started with ({@code jvm_options}). */
    static String settingsJson(Map<String, String> m) {
        Map<String, String> all = new LinkedHashMap<>(m);
        all.put("jvm_options", String.join(" ", ManagementFactory.getRuntimeMXBean().getInputArguments()));
        StringBuilder b = new StringBuilder("{");
        all.forEach((k, v) -> {
            if (b.length() > 1) b.append(',');
            Json.quote(b, k);
            b.append(':');
            Json.quote(b, v);
        });
        return b.append('}').toString();
    }
}
