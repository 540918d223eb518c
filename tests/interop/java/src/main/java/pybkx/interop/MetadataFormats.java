package pybkx.interop;

import static java.nio.charset.StandardCharsets.UTF_8;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.LedgerMetadataBuilder;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.discover.BookieServiceInfo;
import org.apache.bookkeeper.discover.ZKRegistrationManager;
import org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory;
import org.apache.bookkeeper.meta.LedgerIdGenerator;
import org.apache.bookkeeper.meta.LedgerManager;
import org.apache.bookkeeper.meta.LedgerManagerFactory;
import org.apache.bookkeeper.meta.LedgerLayout;
import org.apache.bookkeeper.meta.LedgerMetadataSerDe;
import org.apache.bookkeeper.meta.MetadataClientDriver;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.stats.NullStatsLogger;

/**
 * Prints the bytes Apache BookKeeper itself stores in ZooKeeper for a fixed set of values, so the
 * pybkx tests can compare their own serialisation byte for byte (tests/meta/test_serde.py holds
 * the same values on the Python side).
 *
 * <p>Usage: {@code MetadataFormats} prints one {@code NAME<TAB>HEX} line per case.
 * {@code MetadataFormats parse-ledger HEX...} and {@code parse-cookie HEX...} read bytes written
 * by pybkx with BookKeeper's parsers and print them serialised again by BookKeeper, one hex line
 * each (or {@code ERROR <message>}).
 *
 * <p>{@code MetadataFormats zk URI LEDGER_ID...} opens a cluster pybkx initialised through
 * BookKeeper's own ZooKeeper metadata driver and prints what it sees there: {@code ledgers} (its
 * ledger scan), one {@code ledger ID HEX} per given id (read, then serialised again), the
 * {@code writable}, {@code readonly} and {@code cookies} bookie sets, then {@code created ID HEX}
 * for a ledger it creates itself with an id from its own generator.
 */
public final class MetadataFormats {
    private static final HexFormat HEX = HexFormat.of();
    private static final LedgerMetadataSerDe SERDE = new LedgerMetadataSerDe();

    private MetadataFormats() {
    }

    private static List<BookieId> bookies(String... ids) {
        List<BookieId> out = new ArrayList<>();
        for (String id : ids) {
            out.add(BookieId.parse(id));
        }
        return out;
    }

    private static LedgerMetadata openLedger() {
        return LedgerMetadataBuilder.create()
                .withId(1)
                .withEnsembleSize(3).withWriteQuorumSize(2).withAckQuorumSize(2)
                .newEnsembleEntry(0, bookies("127.0.0.1:3181", "127.0.0.2:3181", "127.0.0.3:3181"))
                .withDigestType(DigestType.CRC32C)
                .withPassword("pw".getBytes(UTF_8))
                .withCToken(12345)
                .build();
    }

    private static LedgerMetadata closedLedger(int formatVersion) {
        Map<String, byte[]> custom = new LinkedHashMap<>();
        custom.put("application", "pybkx".getBytes(UTF_8));
        custom.put("bin", new byte[] {0, 1, (byte) 0xfe});
        return LedgerMetadataBuilder.create()
                .withId(2)
                .withMetadataFormatVersion(formatVersion)
                .withEnsembleSize(2).withWriteQuorumSize(2).withAckQuorumSize(1)
                .newEnsembleEntry(0, bookies("127.0.0.1:3181", "127.0.0.2:3181"))
                .newEnsembleEntry(10, bookies("127.0.0.1:3181", "127.0.0.3:3181"))
                .withClosedState().withLastEntryId(19).withLength(2048)
                .withDigestType(DigestType.MAC)
                .withPassword(new byte[] {0, 7, '\n', '"', (byte) 0xff, '\\'})
                .withCreationTime(1700000000000L).storingCreationTime(true)
                .withCustomMetadata(custom)
                .build();
    }

    private static LedgerMetadata recoveringLedger(int formatVersion) {
        return LedgerMetadataBuilder.create()
                .withId(3)
                .withMetadataFormatVersion(formatVersion)
                .withEnsembleSize(1).withWriteQuorumSize(1).withAckQuorumSize(1)
                .newEnsembleEntry(0, bookies("bookie-1.example:3181"))
                .withInRecoveryState()
                .withDigestType(DigestType.DUMMY)
                .withPassword(new byte[0])
                .build();
    }

    private static byte[] serviceInfo() throws Exception {
        Map<String, String> properties = new LinkedHashMap<>();
        properties.put("rack", "/r1");
        BookieServiceInfo info = new BookieServiceInfo(properties, Arrays.asList(
                new BookieServiceInfo.Endpoint("bookie", 3181, "127.0.0.1", "bookie-rpc",
                        Collections.emptyList(), Collections.singletonList("tls")),
                new BookieServiceInfo.Endpoint("httpserver", 8080, "127.0.0.1", "http",
                        Collections.singletonList("basic"), Collections.emptyList())));
        // Package-private static in BookKeeper: the exact bytes a bookie registers with.
        Method serialize = ZKRegistrationManager.class.getDeclaredMethod(
                "serializeBookieServiceInfo", BookieServiceInfo.class);
        serialize.setAccessible(true);
        return (byte[]) serialize.invoke(null, info);
    }

    private static void print(String name, byte[] bytes) {
        System.out.println(name + "\t" + HEX.formatHex(bytes));
    }

    private static void printCases() throws Exception {
        print("ledger-open-v3", SERDE.serialize(openLedger()));
        for (int version = 1; version <= 3; version++) {
            print("ledger-closed-v" + version, SERDE.serialize(closedLedger(version)));
            print("ledger-recovering-v" + version, SERDE.serialize(recoveringLedger(version)));
        }
        Cookie full = Cookie.newBuilder()
                .setLayoutVersion(5)
                .setBookieId("127.0.0.1:3181")
                .setJournalDirs("/j1,/j2")
                .setLedgerDirs(Cookie.encodeDirPaths(new String[] {"/l1", "/l2"}))
                .setInstanceId("6a1c4f2e-0b7d-4c55-9a47-2f1e9d3c8b10")
                .setIndexDirs(Cookie.encodeDirPaths(new String[] {"/i1"}))
                .build();
        Cookie minimal = Cookie.newBuilder()
                .setLayoutVersion(5)
                .setBookieId("bookie-1.example:3181")
                .setJournalDirs("/data/journal")
                .setLedgerDirs(Cookie.encodeDirPaths(new String[] {"/data/ledgers"}))
                .build();
        print("cookie-full", full.toString().getBytes(UTF_8));
        print("cookie-minimal", minimal.toString().getBytes(UTF_8));
        print("service-info", serviceInfo());
        print("layout", new LedgerLayout(HierarchicalLedgerManagerFactory.class.getName(), 1).serialize());
    }

    private static <T> T get(CompletableFuture<T> future) throws Exception {
        return future.get(30, TimeUnit.SECONDS);
    }

    private static String sorted(Set<?> items) {
        Set<String> names = new TreeSet<>();
        for (Object item : items) {
            names.add(item.toString());
        }
        return String.join(",", names);
    }

    private static void zk(String uri, String[] ledgerIds) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
        MetadataClientDriver driver = MetadataDrivers.getClientDriver(java.net.URI.create(uri));
        driver.initialize(conf, scheduler, NullStatsLogger.INSTANCE, Optional.empty());
        try {
            LedgerManagerFactory factory = driver.getLedgerManagerFactory();
            try (LedgerManager ledgers = factory.newLedgerManager();
                 LedgerIdGenerator ids = factory.newLedgerIdGenerator()) {
                Set<Long> scanned = new TreeSet<>();
                LedgerManager.LedgerRangeIterator ranges = ledgers.getLedgerRanges(30_000);
                while (ranges.hasNext()) {
                    scanned.addAll(ranges.next().getLedgers());
                }
                System.out.println("ledgers\t" + sorted(scanned));
                for (String id : ledgerIds) {
                    LedgerMetadata md = get(ledgers.readLedgerMetadata(Long.parseLong(id))).getValue();
                    print("ledger\t" + id, SERDE.serialize(md));
                }
                System.out.println("writable\t"
                        + sorted(get(driver.getRegistrationClient().getWritableBookies()).getValue()));
                System.out.println("readonly\t"
                        + sorted(get(driver.getRegistrationClient().getReadOnlyBookies()).getValue()));
                System.out.println("cookies\t"
                        + sorted(get(driver.getRegistrationClient().getAllBookies()).getValue()));
                CompletableFuture<Long> generated = new CompletableFuture<>();
                ids.generateLedgerId((rc, id) -> {
                    if (rc == 0) {
                        generated.complete(id);
                    } else {
                        generated.completeExceptionally(new IllegalStateException("rc " + rc));
                    }
                });
                long id = get(generated);
                LedgerMetadata created = get(ledgers.createLedgerMetadata(id, openLedger())).getValue();
                print("created\t" + id, SERDE.serialize(created));
            }
        } finally {
            driver.close();
            scheduler.shutdownNow();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            printCases();
            return;
        }
        if ("zk".equals(args[0])) {
            zk(args[1], Arrays.copyOfRange(args, 2, args.length));
            return;
        }
        for (int i = 1; i < args.length; i++) {
            byte[] input = HEX.parseHex(args[i]);
            try {
                if ("parse-ledger".equals(args[0])) {
                    System.out.println(HEX.formatHex(SERDE.serialize(
                            SERDE.parseConfig(input, 1, Optional.empty()))));
                } else if ("parse-cookie".equals(args[0])) {
                    System.out.println(HEX.formatHex(
                            Cookie.parseFromBytes(input).toString().getBytes(UTF_8)));
                } else {
                    throw new IllegalArgumentException("unknown mode " + args[0]);
                }
            } catch (Exception e) {
                System.out.println("ERROR " + e);
            }
        }
    }
}
