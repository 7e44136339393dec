package txnbench.client;

import java.util.Map;

/** One trace row as the Python side writes it to ROWS.jsonl (datasets/README.md's columns). */
record Row(long row, long tsUs, String op, String txn, String topic, String msg, String subscription,
           int size, Long timeoutMs, String ackKind, String target, String key, String subType) {

    static final long DEFAULT_TIMEOUT_MS = 60_000;  // the trace format's default for new_txn

    static Row of(Map<String, Object> m) {
        return new Row(num(m, "row", -1), num(m, "ts_us", 0), str(m, "op"), str(m, "txn"), str(m, "topic"),
                str(m, "msg"), str(m, "subscription"), (int) num(m, "size", 0),
                m.get("timeout_ms") == null ? null : num(m, "timeout_ms", DEFAULT_TIMEOUT_MS),
                str(m, "ack_kind"), str(m, "target"), str(m, "key"), str(m, "sub_type"));
    }

    boolean cumulative() { return "cumulative".equals(ackKind); }

    long timeout() { return timeoutMs == null ? DEFAULT_TIMEOUT_MS : timeoutMs; }

    private static String str(Map<String, Object> m, String k) {
        Object v = m.get(k);
        if (v == null) return null;
        if (!(v instanceof String s)) throw new IllegalArgumentException("field " + k + " is not a string: " + v);
        return s;
    }

    private static long num(Map<String, Object> m, String k, long dflt) {
        Object v = m.get(k);
        if (v == null) return dflt;
        if (!(v instanceof Long l)) throw new IllegalArgumentException("field " + k + " is not an integer: " + v);
        return l;
    }
}
