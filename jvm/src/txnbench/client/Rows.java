package txnbench.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Reads ROWS.jsonl and checks, before anything runs, that every row is one this program can run on
 * the chosen design; gathers what setup needs (namespaces, topics, txn timeouts, ack kinds).
 */
final class Rows {
    /** A row this program cannot run: reported as {"ev":"refused"} and exit 2. */
    static final class Refused extends Exception {
        final long row;

        Refused(long row, String reason) {
            super(reason);
            this.row = row;
        }
    }

    /** The trace format's subscription types (SubscriptionType's names). */
    static final Set<String> SUB_TYPES = Set.of("Exclusive", "Failover", "Shared", "Key_Shared");
    static final Set<String> OPS = Set.of("subscribe", "publish", "ack", "new_txn", "commit", "abort",
            "split", "merge", "crash_broker");
    private static final Pattern PARTITION = Pattern.compile("^(persistent://[^/]+/[^/]+/.+)-partition-(\\d+)$");

    final List<Row> rows;
    /** tenant/namespace of every topic, in first-use order. */
    final Set<String> namespaces = new LinkedHashSet<>();
    /** v4: partitioned topic -> partition count; v4 non-partitioned topics and v5 topics -> 0. */
    final Map<String, Integer> topics = new LinkedHashMap<>();
    /** txn label -> its timeout (ms). */
    final Map<String, Long> txnTimeout = new HashMap<>();
    /** Distinct txn timeouts, ascending (v5: one client each). */
    final TreeSet<Long> timeouts = new TreeSet<>();
    /** (topic, subscription) -> true when its acks are cumulative (v5 picks the consumer type by it). */
    final Map<String, Boolean> cumulativeSubs = new HashMap<>();
    /** topic -> the timeouts of the txns publishing to it (0: plain publishes): producers made during setup. */
    final Map<String, Set<Long>> producers = new LinkedHashMap<>();

    private Rows(List<Row> rows) { this.rows = rows; }

    static String subKey(String topic, String sub) { return topic + '\u0000' + sub; }

    /** Rows built in the program (the baseline's), checked like a file's. */
    static Rows of(List<Row> rows, String design) throws Refused {
        Rows out = new Rows(rows);
        out.check(design);
        return out;
    }

    static Rows read(Path file, String design) throws IOException, Refused {
        List<Row> rows = new ArrayList<>();
        try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            int n = 0;
            while ((line = r.readLine()) != null) {
                if (line.isBlank()) continue;
                try {
                    rows.add(Row.of(Json.parseObject(line)));
                } catch (IllegalArgumentException e) {
                    throw new Refused(n, "line " + (n + 1) + " of " + file + ": " + e.getMessage());
                }
                n++;
            }
        }
        Rows out = new Rows(rows);
        out.check(design);
        return out;
    }

    private void check(String design) throws Refused {
        boolean v5 = design.equals("v5");
        Set<String> open = new HashSet<>();
        Set<String> ended = new HashSet<>();
        Map<String, String> ackKind = new HashMap<>();
        Map<String, Row> namedSubs = new HashMap<>();  // (topic, subscription) -> its first typed subscribe row
        for (Row r : rows) {
            if (r.op() == null || !OPS.contains(r.op())) {
                String why = "crash_tc".equals(r.op())
                        ? "crash_tc: a real broker's coordinator cannot be crashed alone (crash_broker restarts the broker)"
                        : "op " + r.op() + " is not one this program runs";
                throw new Refused(r.row(), why);
            }
            if (r.txn() != null) {
                if (r.op().equals("new_txn")) {
                    if (!open.add(r.txn()) || ended.contains(r.txn()))
                        throw new Refused(r.row(), "txn " + r.txn() + " is opened twice");
                    txnTimeout.put(r.txn(), r.timeout());
                    timeouts.add(r.timeout());
                } else if (!open.contains(r.txn())) {
                    throw new Refused(r.row(), "txn " + r.txn() + " is used before its new_txn or after it ended");
                }
                if (r.op().equals("commit") || r.op().equals("abort")) {
                    open.remove(r.txn());
                    ended.add(r.txn());
                }
            } else if (Set.of("new_txn", "commit", "abort").contains(r.op())) {
                throw new Refused(r.row(), r.op() + " without a txn");
            }
            if (r.op().equals("new_txn") || r.op().equals("commit") || r.op().equals("abort")
                    || r.op().equals("crash_broker")) {
                continue;
            }
            String t = r.topic();
            if (t == null) throw new Refused(r.row(), r.op() + " without a topic");
            if (v5 && !t.startsWith("topic://"))
                throw new Refused(r.row(), "design v5 runs topic:// scalable topics only, not " + t);
            if (!v5 && !t.startsWith("persistent://"))
                throw new Refused(r.row(), "design v4 runs persistent:// topics only, not " + t
                        + (t.startsWith("topic://") ? " (scalable topics need the V5 SDK: --design v5)" : ""));
            String[] parts = t.substring(t.indexOf("://") + 3).split("/", 3);
            if (parts.length != 3 || parts[0].isEmpty() || parts[1].isEmpty() || parts[2].isEmpty())
                throw new Refused(r.row(), "topic " + t + " is not scheme://tenant/namespace/name");
            namespaces.add(parts[0] + "/" + parts[1]);
            Matcher pm = PARTITION.matcher(t);
            if (!v5 && pm.matches()) {
                topics.merge(pm.group(1), Integer.parseInt(pm.group(2)) + 1, Math::max);
            } else {
                topics.putIfAbsent(t, 0);
            }
            switch (r.op()) {
                case "publish" -> {
                    if (r.msg() == null) throw new Refused(r.row(), "publish without a msg");
                    producers.computeIfAbsent(t, k -> new TreeSet<>())
                            .add(r.txn() == null ? 0L : txnTimeout.get(r.txn()));
                }
                case "subscribe" -> {
                    if (r.subscription() == null) throw new Refused(r.row(), "subscribe without a subscription");
                    if (r.subType() != null) {
                        if (!SUB_TYPES.contains(r.subType()))
                            throw new Refused(r.row(), "sub_type " + r.subType() + " is not one of " + SUB_TYPES);
                        namedSubs.putIfAbsent(subKey(t, r.subscription()), r);
                    }
                }
                case "ack" -> {
                    if (r.subscription() == null || r.msg() == null)
                        throw new Refused(r.row(), "ack without a subscription or a msg");
                    String kind = r.cumulative() ? "cumulative" : "individual";
                    String prev = ackKind.putIfAbsent(subKey(t, r.subscription()), kind);
                    if (v5 && prev != null && !prev.equals(kind))
                        throw new Refused(r.row(), "v5: subscription " + r.subscription() + " on " + t
                                + " has both individual and cumulative acks; the V5 SDK acks individually on a"
                                + " QueueConsumer only and cumulatively on a StreamConsumer only");
                    cumulativeSubs.put(subKey(t, r.subscription()), r.cumulative());
                }
                case "split", "merge" -> {
                    if (!v5) throw new Refused(r.row(), r.op() + " needs a topic:// scalable topic (design v5)");
                    if (r.op().equals("merge") && (r.target() == null || r.target().split(",").length != 2))
                        throw new Refused(r.row(), "merge needs a target of two segment descriptors");
                }
                default -> { }
            }
        }
        if (v5) {
            for (Map.Entry<String, Row> e : namedSubs.entrySet()) {
                Row r = e.getValue();
                String gives = cumulativeSubs.getOrDefault(e.getKey(), false) ? "Exclusive" : "Shared";
                if (!gives.equals(r.subType()))
                    throw new Refused(r.row(), "v5: subscription " + r.subscription() + " on " + r.topic()
                            + " is named " + r.subType() + ", but the V5 SDK gives its "
                            + (gives.equals("Shared") ? "individual acks a QueueConsumer (Shared)"
                                                      : "cumulative acks a StreamConsumer (Exclusive)"));
            }
        }
    }
}
