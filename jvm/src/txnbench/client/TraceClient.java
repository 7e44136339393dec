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
                backend = a.design.equals("v4") ? new V4Backend(a.serviceUrl, a.adminUrl, a.maxInFlight)
                        : new V5Backend(a.serviceUrl, a.adminUrl);
                if (rows == null) {
                    ev.emit(Baseline.run(backend, a));
                    return 0;
                }
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
                BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
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
}
