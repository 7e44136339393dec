package txnbench.probe;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.pulsar.metadata.api.MetadataStoreConfig;
import org.apache.pulsar.metadata.api.Notification;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;

/**
 * Times the store's notification fan-out with the broker's own classes, outside the broker. Every
 * put and delete on the RocksDB store a standalone broker runs queues a notification on the store's
 * single event thread (RocksdbMetadataStore.storePut L640-643, storeDelete L579-580), plus one
 * {@code ChildrenChanged} per ancestor path when a key is created or deleted
 * (AbstractMetadataStore.notifyParentChildrenChanged L1044-1049); each notification runs every
 * listener the store holds, one after another (receivedNotification L421-437). A broker holds one
 * listener per transaction buffer and per pending-ack store it has loaded (their
 * {@code subscribeSequence} watchers, L832-881), so the event thread's share of each write grows
 * with the segments and subscriptions the broker has served.
 *
 * <p>Per listener count it registers that many {@code subscribeSequence} watchers (never
 * matching), holds the event thread on a gate notification, writes and deletes {@code writes}
 * keys under {@code /txn/op} (as the op records are), opens the gate, and times the event thread
 * until it reaches a last marker notification: per round the µs per notification it ran
 * ({@code us_per_notification}, the median of {@code repeats} rounds after as many warm-up
 * rounds) and how many it counted.
 *
 * <p>Then, with {@code --handoffs N}, the hand-off alone: N puts on the idle store, one at a time,
 * each timed from its call to its return and to the moment the event thread starts its listeners.
 * RocksdbMetadataStore.storePut calls {@code receivedNotification} right after its transaction
 * commits, and AbstractMetadataStore.receivedNotification hands the listeners to the store's
 * executor ({@code CompletableFuture.supplyAsync}), so the listener starts that hand-off after the
 * commit; the put returns once the hand-off is queued. The line gives both, in µs, over the last
 * half of the puts (the first half warms the JIT): {@code put_us} (call to return) and
 * {@code listener_us} (call to the listener's start), each p50/p90/p99/max.
 *
 * <p>One JSON object per line on stdout. Arguments: {@code --dir D --listeners L,.. --writes W
 * --repeats R [--handoffs N]}; an empty {@code --listeners} times the hand-off alone.
 */
public final class NotifyProbe {
    private static final String GATE = "/probe/gate";
    private static final String MARK = "/probe/mark";
    private static final String HANDOFF = "/probe/handoff-";

    public static void main(String[] argv) throws Exception {
        Path dir = null;
        int[] listenerCounts = {0, 1000};
        int writes = 500;
        int repeats = 20;
        int handoffs = 0;
        for (int i = 0; i < argv.length; i += 2) {
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(argv[i] + ": missing its value");
            }
            switch (argv[i]) {
                case "--dir" -> dir = Path.of(argv[i + 1]);
                case "--listeners" -> listenerCounts = argv[i + 1].isEmpty() ? new int[0]  // the hand-off alone
                        : Arrays.stream(argv[i + 1].split(",")).mapToInt(Integer::parseInt).sorted().toArray();
                case "--writes" -> writes = Integer.parseInt(argv[i + 1]);
                case "--repeats" -> repeats = Integer.parseInt(argv[i + 1]);
                case "--handoffs" -> handoffs = Integer.parseInt(argv[i + 1]);
                default -> throw new IllegalArgumentException(argv[i] + ": unknown argument");
            }
        }
        if (dir == null) {
            throw new IllegalArgumentException("--dir: required");
        }
        if (handoffs == 1 || handoffs < 0) {
            throw new IllegalArgumentException("--handoffs " + handoffs + ": 0 (none), or at least 2 (half are timed)");
        }
        MetadataStoreExtended store = MetadataStoreExtended.create("rocksdb:" + dir,
                MetadataStoreConfig.builder().fsyncEnable(false).build());
        Probe probe = new Probe();
        store.registerListener(probe);
        List<AutoCloseable> watchers = new ArrayList<>();
        long key = 0;
        for (int count : listenerCounts) {
            while (watchers.size() < count) {  // as a segment's buffer subscribes its events
                int n = watchers.size();
                watchers.add(store.subscribeSequence("/txn/segment-events/probe-" + n, path -> { }, Set.of()));
            }
            double[] perNotification = new double[repeats];
            int counted = 0;
            for (int r = -repeats; r < repeats; r++) {  // the first `repeats` rounds warm the JIT
                probe.arm();
                store.put(GATE, new byte[0], Optional.empty()).get();
                if (!probe.gateReached.await(60, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("the gate notification never came");
                }
                List<String> paths = new ArrayList<>(writes);
                for (int w = 0; w < writes; w++) {
                    paths.add("/txn/op/probe-" + (key++));
                    store.put(paths.get(w), new byte[64], Optional.of(-1L)).get();
                }
                for (String p : paths) {
                    store.delete(p, Optional.empty()).get();
                }
                store.put(MARK, new byte[0], Optional.empty()).get();
                int before = probe.seen.get();
                long t0 = System.nanoTime();
                probe.gate.countDown();
                if (!probe.marked.await(60, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("the marker notification never came");
                }
                long took = System.nanoTime() - t0;
                int ran = probe.seen.get() - before;
                if (r >= 0) {
                    perNotification[r] = took / 1000.0 / ran;
                    counted = ran;
                }
            }
            Arrays.sort(perNotification);
            System.out.println(String.format(Locale.ROOT,
                    "{\"listeners\": %d, \"writes\": %d, \"repeats\": %d, \"notifications\": %d, "
                            + "\"us_per_notification\": %.3f}",
                    count, writes, repeats, counted, perNotification[repeats / 2]));
            System.out.flush();
        }
        for (AutoCloseable w : watchers) {
            w.close();
        }
        if (handoffs > 0) {
            handoffs(store, probe, handoffs);
        }
        store.close();
        System.exit(0);  // the store's background threads are not daemons
    }

    /** The hand-off pass (see the class doc): one put at a time, each waited for at its listener. */
    private static void handoffs(MetadataStoreExtended store, Probe probe, int n) throws Exception {
        long[] put = new long[n / 2];
        long[] listener = new long[n / 2];
        for (int i = 0; i < n; i++) {
            CountDownLatch reached = new CountDownLatch(1);
            probe.handoff = new Handoff(HANDOFF + i, reached);
            long t0 = System.nanoTime();
            store.put(HANDOFF + i, new byte[64], Optional.empty()).get();
            long returned = System.nanoTime();
            if (!reached.await(60, TimeUnit.SECONDS)) {
                throw new IllegalStateException("the hand-off's notification never came");
            }
            int k = i - (n - n / 2);
            if (k >= 0) {
                put[k] = returned - t0;
                listener[k] = probe.handoff.startedNanos - t0;
            }
        }
        Arrays.sort(put);
        Arrays.sort(listener);
        System.out.println(String.format(Locale.ROOT, "{\"handoffs\": %d, \"put_us\": {%s}, \"listener_us\": {%s}}",
                n / 2, StoreProbe.quantiles(put), StoreProbe.quantiles(listener)));
        System.out.flush();
    }

    /** The put the hand-off pass waits for: its path, and when the listener first saw it. */
    private static final class Handoff {
        final String path;
        final CountDownLatch reached;
        volatile long startedNanos;

        Handoff(String path, CountDownLatch reached) {
            this.path = path;
            this.reached = reached;
        }
    }

    /** Holds the event thread at the gate and counts the notifications it runs after it. */
    private static final class Probe implements java.util.function.Consumer<Notification> {
        final AtomicInteger seen = new AtomicInteger();
        volatile CountDownLatch gate = new CountDownLatch(0);
        volatile CountDownLatch gateReached = new CountDownLatch(0);
        volatile CountDownLatch marked = new CountDownLatch(0);
        volatile Handoff handoff;

        void arm() {
            gate = new CountDownLatch(1);
            gateReached = new CountDownLatch(1);
            marked = new CountDownLatch(1);
        }

        @Override
        public void accept(Notification n) {
            long now = System.nanoTime();
            String path = n.getPath();
            Handoff h = handoff;
            if (h != null && path.equals(h.path)) {
                h.startedNanos = now;
                h.reached.countDown();
                return;
            }
            if (path.equals(GATE)) {  // its own notification: "/probe" gets the ChildrenChanged
                gateReached.countDown();
                try {
                    gate.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return;
            }
            seen.incrementAndGet();
            if (path.equals(MARK)) {
                marked.countDown();
            }
        }
    }

    private NotifyProbe() {
    }
}
