package txnbench.client;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/**
 * Runs trace rows against a real Pulsar 5 broker and reports what happened, one JSON line per
 * event on stdout (jvm/PROTOCOL.md). Exit 0 done, 2 a row refused before anything ran, 3 fatal.
 */
public final class TraceClient {
    private TraceClient() {}

    public static void main(String[] argv) {
        System.exit(run(argv));
    }

    static int run(String[] argv) {
        try (Events ev = new Events()) {
            Args a;
            try {
                a = new Args(argv);
            } catch (Args.Bad e) {
                ev.emit(new Json.Out("error").str("message", "usage: " + e.getMessage()).bool("fatal", true));
                return 3;
            }
            Rows rows = null;
            if (a.baselineMessages == 0) {
                try {
                    rows = Rows.read(Path.of(a.rows), a.design);
                } catch (Rows.Refused e) {
                    ev.emit(new Json.Out("refused").num("row", e.row).str("reason", e.getMessage()));
                    return 2;
                } catch (java.io.IOException e) {
                    ev.emit(new Json.Out("error").str("message", "cannot read " + a.rows + ": " + Events.describe(e))
                            .bool("fatal", true));
                    return 3;
                }
            }
            Backend backend = null;
            try {
                Reach.check(a.serviceUrl, a.adminUrl);  // in seconds, not after the client's 30-s timeout
                backend = a.design.equals("v4") ? new V4Backend(a.serviceUrl, a.adminUrl, a.maxInFlight)
                        : new V5Backend(a.serviceUrl, a.adminUrl);
                if (rows == null) {
                    ev.emit(Baseline.run(backend, a));
                    return 0;
                }
                BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
                if (a.warmUpRows != null && !warmUp(backend, a, ev, stdin)) return 3;
                long setupStart = System.nanoTime();
                try {
                    backend.setup(rows);
                } catch (Exception e) {
                    ev.emit(new Json.Out("error").str("message", "setup failed against " + a.serviceUrl + " / "
                            + a.adminUrl + ": " + Events.describe(e)).bool("fatal", true));
                    return 3;
                }
                long setupMs = (System.nanoTime() - setupStart) / 1_000_000;
                ev.startClock();
                ev.emit(new Json.Out("ready").num("t0_epoch_ms", System.currentTimeMillis()).num("setup_ms", setupMs)
                        .raw("client", backend.settings()));
                new TraceRunner(backend, rows, ev, a, stdin).run();
                return 0;
            } catch (Exception e) {
                ev.emit(new Json.Out("error").str("message", Events.describe(e)).bool("fatal", true));
                return 3;
            } finally {
                if (backend != null) backend.close();
            }
        }
    }

    /**
     * Runs the warm-up rows as fast as possible on the same backend, reporting nothing, so that
     * the JIT has compiled the client's paths before the measured rows; then reports
     * {@code warmed} and waits for {@code {"cmd":"go"}} (the caller reads the broker's counters
     * in between). False when it could not (a fatal error was reported).
     */
    private static boolean warmUp(Backend backend, Args a, Events ev, BufferedReader stdin) throws Exception {
        long start = System.nanoTime();
        Rows warm;
        try {
            warm = Rows.read(Path.of(a.warmUpRows), a.design);
            backend.setup(warm);
        } catch (Rows.Refused e) {
            ev.emit(new Json.Out("error").str("message", "warm-up row " + e.row + " refused: " + e.getMessage())
                    .bool("fatal", true));
            return false;
        } catch (Exception e) {
            ev.emit(new Json.Out("error").str("message", "warm-up setup failed against " + a.serviceUrl + ": "
                    + Events.describe(e)).bool("fatal", true));
            return false;
        }
        new TraceRunner(backend, warm, Events.discarding(), a.warmUp(), stdin).run();
        ev.emit(new Json.Out("warmed").num("rows", warm.rows.size())
                .num("ms", (System.nanoTime() - start) / 1_000_000));
        String line = stdin.readLine();
        if (line == null) throw new IllegalStateException("stdin closed while waiting for {\"cmd\": \"go\"}");
        Object cmd = Json.parseObject(line).get("cmd");
        if (!"go".equals(cmd)) throw new IllegalStateException("expected {\"cmd\": \"go\"} on stdin, got " + line);
        return true;
    }
}
