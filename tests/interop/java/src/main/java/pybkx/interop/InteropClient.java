package pybkx.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.netty.buffer.ByteBufUtil;
import io.netty.buffer.Unpooled;
import io.netty.buffer.UnpooledByteBufAllocator;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.util.ReferenceCounted;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.api.WriteFlag;
import org.apache.bookkeeper.common.util.OrderedExecutor;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.net.BookieSocketAddress;
import org.apache.bookkeeper.proto.BookieClientImpl;
import org.apache.bookkeeper.proto.DataFormats.LedgerMetadataFormat.DigestType;
import org.apache.bookkeeper.proto.checksum.DigestManager;
import org.apache.bookkeeper.stats.NullStatsLogger;

/**
 * Drives Apache BookKeeper's own per-bookie client ({@link BookieClientImpl}, V2 wire protocol)
 * against one bookie, from a script of JSON lines.
 *
 * <p>Usage: {@code InteropClient HOST:PORT [SCRIPT]} (the script is read from stdin without
 * SCRIPT). Each operation prints one JSON line on stdout, in script order:
 *
 * <pre>
 * {"op":"add","ledger":L,"entry":E,"payload_hex":"..","digest":"CRC32","password_hex":"",
 *  "lac":-1,"length":5,"master_key_hex":"..","flags":0}
 *     -> {"op":"add","ledger":L,"entry":E,"rc":0}
 * {"op":"read","ledger":L,"entry":E,"flags":0,"master_key_hex":".."}
 *     -> {"op":"read","ledger":L,"entry":E,"rc":0,"entry_hex":".."}
 * {"op":"batch_read","ledger":L,"start":S,"max_count":N,"max_size":B,"flags":0,"master_key_hex":".."}
 *     -> {"op":"batch_read","ledger":L,"start":S,"rc":0,"entries_hex":[..]}
 * </pre>
 *
 * <p>An add packages the entry with BookKeeper's {@link DigestManager} for the given digest type
 * and password (defaults: CRC32, empty password, lac = entry - 1, length = payload length), so
 * the frame is byte for byte what a Java writer sends. {@code master_key_hex} defaults to the
 * key derived from the password; {@code flags} are the V2 packet flags (2 = recovery add,
 * 1 = fencing read). {@code rc} is the Java client's {@code BKException.Code}.
 *
 * <p>An operation waits for its response before the next one is sent, unless it has
 * {@code "async":true}: then it stays outstanding (pipelined on the one connection) until the
 * next operation without it, or the end of the script, which waits for all of them.
 */
public final class InteropClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long WAIT_SECONDS = 30;

    private final BookieClientImpl client;
    private final BookieId bookie;

    private InteropClient(BookieClientImpl client, BookieId bookie) {
        this.client = client;
        this.bookie = bookie;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || args.length > 2) {
            System.err.println("usage: InteropClient HOST:PORT [SCRIPT]");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.setUseV2WireProtocol(true);
        conf.setAddEntryTimeout(10);
        conf.setReadEntryTimeout(10);

        EventLoopGroup eventLoop = new NioEventLoopGroup(1);
        OrderedExecutor executor = OrderedExecutor.newBuilder().name("interop-client").numThreads(1).build();
        ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
        BookieClientImpl client = new BookieClientImpl(conf, eventLoop, UnpooledByteBufAllocator.DEFAULT,
                executor, scheduler, NullStatsLogger.INSTANCE, BookieSocketAddress.LEGACY_BOOKIEID_RESOLVER);
        InteropClient driver = new InteropClient(client, BookieId.parse(args[0]));

        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        int exitCode = 0;
        try (BufferedReader script = args.length == 2
                ? Files.newBufferedReader(Path.of(args[1]), StandardCharsets.UTF_8)
                : new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            List<Pending> pending = new ArrayList<>();
            String line;
            while ((line = script.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode op = JSON.readTree(line);
                pending.add(driver.start(op));
                if (!op.path("async").asBoolean(false)) {
                    printAll(pending, out);
                }
            }
            printAll(pending, out);
        } catch (Exception e) {
            e.printStackTrace();
            exitCode = 1;
        } finally {
            client.close();
            scheduler.shutdownNow();
            executor.shutdownNow();
            eventLoop.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        }
        System.exit(exitCode);
    }

    /** A sent operation: its result is filled in by the client's callback. */
    private record Pending(CompletableFuture<Void> done, ObjectNode result) {
    }

    private static void printAll(List<Pending> pending, PrintStream out) throws Exception {
        for (Pending p : pending) {
            try {
                p.done().get(WAIT_SECONDS, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                throw new IllegalStateException("no callback within " + WAIT_SECONDS + " s: " + p.result(), e);
            }
            out.println(JSON.writeValueAsString(p.result()));
        }
        pending.clear();
    }

    private Pending start(JsonNode op) throws Exception {
        return switch (op.path("op").asText()) {
            case "add" -> add(op);
            case "read" -> read(op);
            case "batch_read" -> batchRead(op);
            default -> throw new IllegalArgumentException("unknown op: " + op);
        };
    }

    private Pending add(JsonNode op) throws Exception {
        long ledger = op.get("ledger").asLong();
        long entry = op.get("entry").asLong();
        byte[] payload = hex(op.path("payload_hex").asText(""));
        byte[] password = hex(op.path("password_hex").asText(""));
        DigestType digestType = DigestType.valueOf(op.path("digest").asText("CRC32"));
        byte[] masterKey = op.has("master_key_hex")
                ? hex(op.get("master_key_hex").asText())
                : DigestManager.generateMasterKey(password);
        int flags = op.path("flags").asInt(0);

        // V2: the digest manager builds the complete ADD frame (header, key, entry), sent as is.
        DigestManager digest = DigestManager.instantiate(ledger, password, digestType,
                UnpooledByteBufAllocator.DEFAULT, true);
        ReferenceCounted toSend = digest.computeDigestAndPackageForSending(entry,
                op.path("lac").asLong(entry - 1), op.path("length").asLong(payload.length),
                Unpooled.wrappedBuffer(payload), masterKey, flags);

        ObjectNode result = result(op, "add", "entry", entry);
        CompletableFuture<Void> done = new CompletableFuture<>();
        client.addEntry(bookie, ledger, masterKey, entry, toSend, (rc, ledgerId, entryId, addr, ctx) -> {
            result.put("rc", rc);
            done.complete(null);
        }, null, flags, false, WriteFlag.NONE);
        toSend.release();
        return new Pending(done, result);
    }

    private Pending read(JsonNode op) {
        long ledger = op.get("ledger").asLong();
        long entry = op.get("entry").asLong();
        ObjectNode result = result(op, "read", "entry", entry);
        CompletableFuture<Void> done = new CompletableFuture<>();
        // Buffers are copied (hex-dumped) inside the callbacks: the client releases them after.
        client.readEntry(bookie, ledger, entry, (rc, ledgerId, entryId, buffer, ctx) -> {
            result.put("rc", rc);
            if (rc == BKException.Code.OK) {
                result.put("entry_hex", ByteBufUtil.hexDump(buffer));
            }
            done.complete(null);
        }, null, op.path("flags").asInt(0), masterKey(op));
        return new Pending(done, result);
    }

    private Pending batchRead(JsonNode op) {
        long ledger = op.get("ledger").asLong();
        long start = op.get("start").asLong();
        ObjectNode result = result(op, "batch_read", "start", start);
        CompletableFuture<Void> done = new CompletableFuture<>();
        client.batchReadEntries(bookie, ledger, start, op.get("max_count").asInt(), op.get("max_size").asLong(),
                (rc, ledgerId, startEntryId, buffers, ctx) -> {
                    result.put("rc", rc);
                    if (rc == BKException.Code.OK) {
                        ArrayNode entries = result.putArray("entries_hex");
                        for (int i = 0; buffers != null && i < buffers.size(); i++) {
                            entries.add(ByteBufUtil.hexDump(buffers.getBuffer(i)));
                        }
                    }
                    done.complete(null);
                }, null, op.path("flags").asInt(0), masterKey(op));
        return new Pending(done, result);
    }

    private static ObjectNode result(JsonNode op, String name, String idField, long id) {
        ObjectNode result = JSON.createObjectNode();
        result.put("op", name);
        result.put("ledger", op.get("ledger").asLong());
        result.put(idField, id);
        return result;
    }

    private static byte[] masterKey(JsonNode op) {
        return op.has("master_key_hex") ? hex(op.get("master_key_hex").asText()) : null;
    }

    private static byte[] hex(String text) {
        return ByteBufUtil.decodeHexDump(text);
    }
}
