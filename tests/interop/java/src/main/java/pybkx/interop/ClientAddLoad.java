package pybkx.interop;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * Add load through Apache BookKeeper's own ledger client ({@link BookKeeper} and
 * {@link LedgerHandle}, V2 wire protocol, CRC32C digest) against the cluster registered under one
 * ledgers root in ZooKeeper. A benchmark driver, not a test: it never checks what it wrote.
 *
 * <p>Usage: {@code ClientAddLoad ZK_CONNECT LEDGERS_ROOT THREADS SECONDS_OR_COUNT ENTRY_SIZE
 * [ENSEMBLE WQ AQ] [key=value ...]}. One ledger per thread (ENSEMBLE/WQ/AQ, default 1/1/1), one
 * client for all. {@code SECONDS_OR_COUNT} is either a number of adds over all threads (split
 * evenly, {@code 20000}) or a duration ({@code 10s}). Options:
 *
 * <ul>
 *   <li>{@code window=N}: 0 (default) for {@code addEntry} in a loop, one add in flight per
 *       thread; N &gt; 0 for {@code asyncAddEntry} with at most N adds in flight per thread (a
 *       {@link Semaphore}), which measures throughput;
 *   <li>{@code warmup=N}: adds per thread before the measurement, on the same ledger, not
 *       counted: with {@code asyncAddEntry} and {@code warmup_window} (default 1000) in flight
 *       whatever the mode, so the JIT has compiled the client's add path in little time even
 *       where the measured adds go one at a time;
 *   <li>any other {@code key=value} is a client configuration setting; {@code throttle} is 0
 *       here (BookKeeper's default, 5,000 adds/s per ledger handle, would cap the async runs).
 * </ul>
 *
 * <p>Prints one JSON line on stdout: {@code {"entries":..,"seconds":..,"entries_per_s":..,
 * "mb_per_s":..,"p50_ms":..,"p99_ms":..,"p999_ms":..,"max_ms":..,"client_cpu_s":..,...}}
 * ({@code client_cpu_s}: this JVM's CPU time over the measurement). The time runs from the
 * moment every thread is ready (ledgers created, warm-up done) until the last add of the run is
 * acknowledged; an add's latency runs from its {@code addEntry}/{@code asyncAddEntry} call to its
 * acknowledgement (time spent waiting for a window slot is not part of it). A failed add prints
 * {@code {"error":CODE,"error_name":".."}} and exits 1.
 */
public final class ClientAddLoad {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final byte[] PASSWORD = "pybkx-bench".getBytes(StandardCharsets.UTF_8);

    private final int threads;
    private final long count; // adds over all threads; 0 with a duration
    private final long durationNanos; // 0 with a count
    private final int entrySize;
    private final int[] quorums = {1, 1, 1};
    private int window;
    private long warmup;
    private int warmupWindow = 1000;
    private final ClientConfiguration conf = new ClientConfiguration();

    private final AtomicInteger failure = new AtomicInteger(BKException.Code.OK);
    private volatile long cpuAtStart;
    private long cpuNanos; // this JVM's CPU time over the measurement

    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private ClientAddLoad(String[] args) {
        conf.setUseV2WireProtocol(true);
        conf.setAddEntryTimeout(60);
        // BookKeeper's default caps each ledger handle at 5,000 adds/s (a RateLimiter); a load
        // generator measures the bookie, so it is off (throttle=N restores a cap).
        conf.setThrottleValue(0);
        List<String> positional = new ArrayList<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq > 0) {
                option(arg.substring(0, eq), arg.substring(eq + 1));
            } else {
                positional.add(arg);
            }
        }
        if (positional.size() != 5 && positional.size() != 8) {
            usage();
        }
        conf.setMetadataServiceUri("zk+hierarchical://" + positional.get(0) + positional.get(1));
        threads = Integer.parseInt(positional.get(2));
        String amount = positional.get(3);
        if (amount.endsWith("s")) {
            double seconds = Double.parseDouble(amount.substring(0, amount.length() - 1));
            durationNanos = (long) (seconds * 1e9);
            count = 0;
        } else {
            durationNanos = 0;
            count = Long.parseLong(amount);
        }
        entrySize = Integer.parseInt(positional.get(4));
        for (int i = 0; i < 3 && positional.size() == 8; i++) {
            quorums[i] = Integer.parseInt(positional.get(5 + i));
        }
    }

    private void option(String key, String value) {
        switch (key) {
            case "window" -> window = Integer.parseInt(value);
            case "warmup" -> warmup = Long.parseLong(value);
            case "warmup_window" -> warmupWindow = Integer.parseInt(value);
            default -> conf.setProperty(key, value);
        }
    }

    private static void usage() {
        System.err.println("usage: ClientAddLoad ZK_CONNECT LEDGERS_ROOT THREADS SECONDS_OR_COUNT "
                + "ENTRY_SIZE [ENSEMBLE WQ AQ] [window=N] [warmup=N] [warmup_window=N] "
                + "[clientKey=value ...]");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        System.exit(new ClientAddLoad(args).run());
    }

    /** Adds and their latencies of one thread (appended from the client's callback threads). */
    private static final class Latencies {
        private long[] nanos = new long[1 << 16];
        private int size;

        synchronized void add(long value) {
            if (size == nanos.length) {
                nanos = Arrays.copyOf(nanos, size * 2);
            }
            nanos[size++] = value;
        }

        synchronized long[] values() {
            return Arrays.copyOf(nanos, size);
        }
    }

    private int run() throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        List<Latencies> latencies = new ArrayList<>();
        long[] elapsed = new long[1];
        try (BookKeeper bk = new BookKeeper(conf)) {
            List<LedgerHandle> ledgers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                ledgers.add(bk.createLedger(quorums[0], quorums[1], quorums[2],
                        BookKeeper.DigestType.CRC32C, PASSWORD));
                latencies.add(new Latencies());
            }
            elapsed[0] = measure(ledgers, latencies);
            for (LedgerHandle ledger : ledgers) {
                ledger.close();
            }
        } catch (BKException e) {
            failure.compareAndSet(BKException.Code.OK, e.getCode());
        }
        if (failure.get() != BKException.Code.OK) {
            ObjectNode error = JSON.createObjectNode();
            error.put("error", failure.get());
            error.put("error_name", BKException.getMessage(failure.get()));
            out.println(JSON.writeValueAsString(error));
            return 1;
        }
        out.println(JSON.writeValueAsString(report(latencies, elapsed[0])));
        return 0;
    }

    /** Runs every thread's adds; returns the nanoseconds from the common start to the last ack. */
    private long measure(List<LedgerHandle> ledgers, List<Latencies> latencies) throws Exception {
        long[] start = new long[1];
        // The last thread ready (ledger created, warm-up done) starts the clock for all.
        CyclicBarrier ready = new CyclicBarrier(threads, () -> {
            cpuAtStart = processCpuNanos();
            start[0] = System.nanoTime();
        });
        long[] finished = new long[threads];
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int index = t;
            long adds = count == 0
                    ? Long.MAX_VALUE
                    : count / threads + (t < count % threads ? 1 : 0);
            Thread worker = new Thread(() -> {
                boolean started = false;
                try {
                    byte[] payload = new byte[entrySize];
                    new Random(index).nextBytes(payload);
                    LedgerHandle ledger = ledgers.get(index);
                    addMany(ledger, payload, warmup, warmupWindow, Long.MAX_VALUE, null);
                    ready.await();
                    started = true;
                    long deadline = durationNanos == 0 ? Long.MAX_VALUE : start[0] + durationNanos;
                    addMany(ledger, payload, adds, window, deadline, latencies.get(index));
                } catch (BKException e) {
                    failure.compareAndSet(BKException.Code.OK, e.getCode());
                } catch (Exception e) {
                    failure.compareAndSet(
                            BKException.Code.OK, BKException.Code.UnexpectedConditionException);
                    e.printStackTrace();
                } finally {
                    finished[index] = System.nanoTime();
                    if (!started) {
                        awaitQuietly(ready); // the others must not wait for this thread
                    }
                }
            }, "add-load-" + t);
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        cpuNanos = processCpuNanos() - cpuAtStart;
        return Arrays.stream(finished).max().orElse(start[0]) - start[0];
    }

    private static void awaitQuietly(CyclicBarrier barrier) {
        try {
            barrier.await();
        } catch (Exception e) {
            // broken by another failure: nothing to wait for
        }
    }

    /**
     * {@code adds} adds (or until {@code deadline}): {@code addEntry} in a loop for an
     * {@code inFlight} of 0, else {@code asyncAddEntry} with {@code inFlight} in flight.
     * Latencies go to {@code log} when given. Returns once every add sent is acknowledged.
     */
    private void addMany(LedgerHandle ledger, byte[] payload, long adds, int inFlight,
            long deadline, Latencies log) throws Exception {
        if (inFlight == 0) {
            for (long i = 0; i < adds && System.nanoTime() < deadline && failure.get() == 0; i++) {
                long sent = System.nanoTime();
                ledger.addEntry(payload);
                if (log != null) {
                    log.add(System.nanoTime() - sent);
                }
            }
            return;
        }
        Semaphore slots = new Semaphore(inFlight);
        for (long i = 0; i < adds && System.nanoTime() < deadline && failure.get() == 0; i++) {
            slots.acquire();
            long sent = System.nanoTime();
            ledger.asyncAddEntry(payload, (rc, lh, entryId, ctx) -> {
                if (rc != BKException.Code.OK) {
                    failure.compareAndSet(BKException.Code.OK, rc);
                } else if (log != null) {
                    log.add(System.nanoTime() - sent);
                }
                slots.release();
            }, null);
        }
        slots.acquire(inFlight); // every add of this call acknowledged
    }

    private ObjectNode report(List<Latencies> latencies, long elapsedNanos) {
        long[] all = latencies.stream()
                .map(Latencies::values)
                .flatMapToLong(Arrays::stream)
                .toArray();
        Arrays.sort(all);
        double seconds = elapsedNanos / 1e9;
        ObjectNode result = JSON.createObjectNode();
        result.put("entries", all.length);
        result.put("seconds", seconds);
        result.put("entries_per_s", all.length / seconds);
        result.put("mb_per_s", (double) all.length * entrySize / seconds / 1e6);
        result.put("p50_ms", quantile(all, 0.50));
        result.put("p99_ms", quantile(all, 0.99));
        result.put("p999_ms", quantile(all, 0.999));
        result.put("max_ms", all.length == 0 ? 0.0 : all[all.length - 1] / 1e6);
        result.put("client_cpu_s", cpuNanos / 1e9);
        result.put("threads", threads);
        result.put("window", window);
        result.put("entry_size", entrySize);
        result.put("warmup_per_thread", warmup);
        return result;
    }

    /** The smallest latency at or above fraction {@code q} of them, in milliseconds. */
    private static double quantile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0.0;
        }
        int index = (int) Math.ceil(q * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(index, sorted.length - 1))] / 1e6;
    }
}
