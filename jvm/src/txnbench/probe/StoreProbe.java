package txnbench.probe;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.apache.pulsar.broker.transaction.metadata.TxnMetadataStore;
import org.apache.pulsar.broker.transaction.metadata.TxnOp;
import org.apache.pulsar.broker.transaction.metadata.TxnOpKind;
import org.apache.pulsar.broker.transaction.metadata.TxnPaths;
import org.apache.pulsar.metadata.api.MetadataStoreConfig;
import org.apache.pulsar.metadata.api.MetadataStoreException;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;
import org.apache.pulsar.metadata.api.GetResult;
import org.apache.pulsar.metadata.api.MetadataStore;
import org.apache.pulsar.metadata.api.ScanConsumer;
import org.apache.pulsar.metadata.impl.RocksdbMetadataStore;

/**
 * Times the v5 coordinator's op-record scan on the store a standalone broker runs, with the
 * broker's own classes, outside the broker: a RocksDB metadata store
 * ({@code MetadataStoreExtended.create("rocksdb:DIR")}, i.e. RocksdbMetadataStore) holding the
 * op records of {@code history} txns, {@code ops} each, written by {@code TxnMetadataStore.appendOp},
 * those of all but the last {@code live} txns deleted again (their {@code __seq_counter__}
 * sidecars stay: no code path deletes one). Every counter update and every deleted record stays
 * in RocksDB's memtable as an entry the listing's iterator passes. Per (ops, history, live) it
 * reports the median of:
 *
 * <ul>
 *   <li>{@code scan_us}: {@code TxnMetadataStore.listOpsByTxn} of one live txn, the END_TXN's scan
 *       (AbstractMetadataStore.storeScanByIndex: the listing, then a serial storeGet per record);
 *   <li>{@code writes_scan_us}: {@code TxnMetadataStore.listWritesBySegment} of the segment every
 *       record is on, a transaction buffer's cleanup scan: the same listing and GETs, and its
 *       filter decodes each record's JSON (L142-151), where the END_TXN's matches the path;
 *   <li>{@code list_us}: {@code getChildrenFromStore("/txn/op")} alone, the listing's walk;
 *   <li>{@code gets_us}: {@code storeGet} of every live record, one after the other (and
 *       {@code store_get_us}: the quantiles of those GETs one by one, over every timed round);
 *   <li>{@code get_us}: {@code get} of one record (the path a broker metric times).
 * </ul>
 *
 * Each line also says what the store held: {@code children}, the keys the listing returned (the
 * live records and every txn's counter), and {@code scanned}, the records the scan streamed.
 * One JSON object per line on stdout. Arguments: {@code --dir D --history H,.. --live L,..
 * [--ops K,..] --repeats R}.
 */
public final class StoreProbe {
    private static final String SEGMENT = "segment://public/txnbench/omb-0/0000-ffff-0";

    public static void main(String[] argv) throws Exception {
        Path dir = null;
        int[] histories = {1000};
        int[] lives = {10};
        int repeats = 50;
        int[] opsPerTxn = {1};
        for (int i = 0; i < argv.length; i += 2) {
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(argv[i] + ": missing its value");
            }
            switch (argv[i]) {
                case "--dir" -> dir = Path.of(argv[i + 1]);
                case "--history" -> histories = ints(argv[i + 1]);
                case "--live" -> lives = ints(argv[i + 1]);
                case "--repeats" -> repeats = Integer.parseInt(argv[i + 1]);
                case "--ops" -> opsPerTxn = ints(argv[i + 1]);
                default -> throw new IllegalArgumentException(argv[i] + ": unknown argument");
            }
        }
        if (dir == null) {
            throw new IllegalArgumentException("--dir: required");
        }
        for (int ops : opsPerTxn) {
            for (int history : histories) {
                for (int live : lives) {
                    if (live > history) {
                        continue;
                    }
                    Path db = dir.resolve("o" + ops + "-h" + history + "-l" + live);
                    System.out.println(run(db, history, live, ops, repeats));
                    System.out.flush();
                    delete(db);
                }
            }
        }
        System.exit(0);  // the store's background threads are not daemons
    }

    private static String run(Path db, int history, int live, int ops, int repeats) throws Exception {
        MetadataStoreExtended store = MetadataStoreExtended.create("rocksdb:" + db,
                MetadataStoreConfig.builder().fsyncEnable(false).build());
        try {
            TxnMetadataStore txns = new TxnMetadataStore(store);
            List<String> livePaths = new ArrayList<>();
            String probeTxn = null;
            for (int t = 0; t < history; t++) {
                String txn = "1_" + t;
                for (int k = 0; k < ops; k++) {
                    String path = txns.appendOp(txn, new TxnOp(TxnOpKind.WRITE, SEGMENT, null, 10L + t, k, null))
                            .get().getPath();
                    if (t >= history - live) {
                        livePaths.add(path);
                        probeTxn = txn;
                    } else {
                        store.delete(path, Optional.empty()).get();
                    }
                }
            }
            RocksdbMetadataStore raw = (RocksdbMetadataStore) store;
            String scanned = probeTxn;
            String one = livePaths.isEmpty() ? TxnPaths.TXN_OP_PREFIX : livePaths.get(0);
            long[] scan = new long[repeats];
            long[] writes = new long[repeats];
            long[] list = new long[repeats];
            long[] gets = new long[repeats];
            long[] get = new long[repeats];
            List<Long> each = new ArrayList<>();
            int warm = Math.max(20, repeats / 2);
            int children = raw.getChildrenFromStore(TxnPaths.TXN_OP_PREFIX, Set.of()).get().size();
            AtomicInteger scannedRecords = new AtomicInteger();
            if (scanned != null) {
                txns.listOpsByTxn(scanned, new Counting(scannedRecords)).get();
            }
            for (int r = -warm; r < repeats; r++) {  // the first `warm` rounds warm the JIT and RocksDB's cache
                long t0 = System.nanoTime();
                if (scanned != null) {
                    AtomicInteger seen = new AtomicInteger();
                    txns.listOpsByTxn(scanned, new Counting(seen)).get();
                }
                long w0 = System.nanoTime();
                txns.listWritesBySegment(SEGMENT, new Counting(new AtomicInteger())).get();
                long t1 = System.nanoTime();
                raw.getChildrenFromStore(TxnPaths.TXN_OP_PREFIX, Set.of()).get();
                long t2 = System.nanoTime();
                long g0 = t2;
                for (String p : livePaths) {
                    raw.storeGet(p, Set.of()).get();
                    long g1 = System.nanoTime();
                    if (r >= 0) {
                        each.add(g1 - g0);
                    }
                    g0 = g1;
                }
                long t3 = System.nanoTime();
                ((MetadataStore) store).get(one).get();
                long t4 = System.nanoTime();
                if (r >= 0) {
                    scan[r] = w0 - t0;
                    writes[r] = t1 - w0;
                    list[r] = t2 - t1;
                    gets[r] = t3 - t2;
                    get[r] = t4 - t3;
                }
            }
            long[] single = each.stream().mapToLong(Long::longValue).toArray();
            Arrays.sort(single);
            return String.format(Locale.ROOT,
                    "{\"history\": %d, \"live\": %d, \"ops\": %d, \"repeats\": %d, \"children\": %d, \"scanned\": %d, "
                            + "\"scan_us\": %.1f, \"writes_scan_us\": %.1f, \"list_us\": %.1f, "
                            + "\"gets_us\": %.1f, \"get_us\": %.2f, \"store_get_us\": {%s}}",
                    history, live, ops, repeats, children, scannedRecords.get(), median(scan), median(writes), median(list), median(gets), median(get),
                    quantiles(single));
        } finally {
            store.close();
        }
    }

    /** Counts the records a scan streams (the coordinator collects them the same way). */
    private record Counting(AtomicInteger seen) implements ScanConsumer {
        @Override
        public void onNext(GetResult result) {
            seen.incrementAndGet();
        }

        @Override
        public void onError(Throwable error) {
        }

        @Override
        public void onCompleted() {
        }
    }

    private static double median(long[] ns) {
        long[] s = ns.clone();
        Arrays.sort(s);
        int n = s.length;
        double mid = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
        return mid / 1000.0;
    }

    /** p50/p90/p99/max of sorted ``ns``, in µs (empty when nothing was timed); NotifyProbe's too. */
    static String quantiles(long[] ns) {
        if (ns.length == 0) {
            return "";
        }
        StringBuilder out = new StringBuilder();
        double[] qs = {0.5, 0.9, 0.99, 1.0};
        String[] names = {"p50", "p90", "p99", "max"};
        for (int i = 0; i < qs.length; i++) {
            int at = (int) Math.min(ns.length - 1, Math.ceil(qs[i] * ns.length) - 1);
            out.append(i == 0 ? "" : ", ").append(String.format(Locale.ROOT, "\"%s\": %.2f", names[i],
                    ns[Math.max(0, at)] / 1000.0));
        }
        return out.toString();
    }

    private static int[] ints(String csv) {
        return Arrays.stream(csv.split(",")).mapToInt(Integer::parseInt).toArray();
    }

    private static void delete(Path p) throws Exception {
        if (!Files.exists(p)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(p)) {
            for (Path q : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(q);
            }
        }
    }

    private StoreProbe() {
    }
}
