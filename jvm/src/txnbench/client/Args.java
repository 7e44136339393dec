package txnbench.client;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

/** The command line (jvm/PROTOCOL.md, "Launch" and "Baseline mode"). */
final class Args {
    static final class Bad extends Exception {
        Bad(String m) { super(m); }
    }

    private static final Set<String> KNOWN = Set.of("--service-url", "--admin-url", "--design", "--rows", "--pacing",
            "--drain-ms", "--quiet-ms", "--max-in-flight", "--baseline-produce", "--size", "--topic", "--txn-size",
            "--warm-up-rows");

    final String serviceUrl;
    final String adminUrl;
    final String design;
    final String rows;
    final String pacing;
    final long drainMs;
    final long quietMs;
    final int maxInFlight;
    /** Baseline mode when > 0. */
    final long baselineMessages;
    final int size;
    final String topic;
    final int txnSize;
    /** Rows run first, unreported, to warm the client up (jvm/PROTOCOL.md, "Warm-up"); null: none. */
    final String warmUpRows;
    private final Map<String, String> given;

    Args(String[] argv) throws Bad {
        this(parse(argv));
    }

    private static Map<String, String> parse(String[] argv) throws Bad {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!KNOWN.contains(argv[i])) throw new Bad("unknown argument " + argv[i]);
            if (i + 1 >= argv.length) throw new Bad(argv[i] + " needs a value");
            m.put(argv[i], argv[++i]);
        }
        return m;
    }

    private Args(Map<String, String> m) throws Bad {
        given = m;
        warmUpRows = m.get("--warm-up-rows");
        serviceUrl = need(m, "--service-url");
        adminUrl = need(m, "--admin-url");
        design = need(m, "--design");
        if (!design.equals("v4") && !design.equals("v5")) throw new Bad("--design is v4 or v5, not " + design);
        drainMs = num(m, "--drain-ms", 10_000);
        quietMs = num(m, "--quiet-ms", 2_000);
        maxInFlight = (int) num(m, "--max-in-flight", 1_000);
        if (maxInFlight < 1) throw new Bad("--max-in-flight must be >= 1");
        baselineMessages = num(m, "--baseline-produce", 0);
        size = (int) num(m, "--size", 1024);
        txnSize = (int) num(m, "--txn-size", 0);
        if (baselineMessages > 0) {
            topic = need(m, "--topic");
            rows = null;
            pacing = "asap";
            if (txnSize > maxInFlight) throw new Bad("--txn-size must not exceed --max-in-flight");
        } else {
            topic = null;
            rows = need(m, "--rows");
            pacing = m.getOrDefault("--pacing", "trace");
            if (!pacing.equals("trace") && !pacing.equals("asap")) throw new Bad("--pacing is trace or asap, not " + pacing);
        }
    }

    /** The warm-up's settings: its rows, as fast as possible, a short drain. */
    Args warmUp() throws Bad {
        Map<String, String> m = new HashMap<>(given);
        m.remove("--warm-up-rows");
        m.put("--rows", warmUpRows);
        m.put("--pacing", "asap");
        m.put("--quiet-ms", "300");
        return new Args(m);
    }

    private static String need(Map<String, String> m, String k) throws Bad {
        String v = m.get(k);
        if (v == null || v.isEmpty()) throw new Bad(k + " is required");
        return v;
    }

    private static long num(Map<String, String> m, String k, long dflt) throws Bad {
        String v = m.get(k);
        if (v == null) return dflt;
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new Bad(k + " is not an integer: " + v);
        }
    }
}
