package txnbench.client;

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * The protocol's stdout: one JSON object per line, written by one thread so that client callbacks
 * never block on I/O. Anything else that would print to stdout is sent to stderr (System.setOut),
 * so stdout carries protocol lines only (jvm/PROTOCOL.md).
 */
final class Events implements AutoCloseable {
    private static final String STOP = "\u0000stop";
    private final LinkedBlockingQueue<String> queue = new LinkedBlockingQueue<>();
    private final OutputStream out = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
    private final Thread writer = new Thread(this::drain, "txnbench-events");
    private volatile long t0Nanos = System.nanoTime();
    private final boolean discard;

    Events() {
        this(false);
    }

    private Events(boolean discard) {
        this.discard = discard;
        if (discard) return;
        System.setOut(System.err);
        writer.setDaemon(true);
        writer.start();
    }

    /** A sink that reports nothing: the warm-up's (jvm/PROTOCOL.md, "Warm-up"). */
    static Events discarding() { return new Events(true); }

    /** Starts the run's clock: every later *_us is microseconds since now. */
    void startClock() { t0Nanos = System.nanoTime(); }

    long nowUs() { return (System.nanoTime() - t0Nanos) / 1000; }

    long t0Nanos() { return t0Nanos; }

    void emit(Json.Out event) {
        if (!discard) queue.add(event.toString());
    }

    private void drain() {
        List<String> batch = new ArrayList<>(1024);
        try {
            while (true) {
                batch.add(queue.take());
                queue.drainTo(batch);
                for (String line : batch) {
                    if (line == STOP) { out.flush(); return; }
                    out.write(line.getBytes(StandardCharsets.UTF_8));
                    out.write('\n');
                }
                batch.clear();
                if (queue.isEmpty()) out.flush();
            }
        } catch (InterruptedException | IOException e) {
            // stdout closed (the reader went away): nothing more can be reported.
        }
    }

    /** Writes everything queued so far and stops the writer. */
    @Override
    public void close() {
        if (discard) return;
        queue.add(STOP);
        try {
            writer.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static String describe(Throwable t) {
        while ((t instanceof java.util.concurrent.CompletionException
                || t instanceof java.util.concurrent.ExecutionException) && t.getCause() != null) {
            t = t.getCause();
        }
        String msg = t.getMessage();
        return t.getClass().getSimpleName() + ": " + (msg == null ? "" : msg.replace('\n', ' '));
    }
}
