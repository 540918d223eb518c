package pybkx.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.BKException;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerEntry;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.api.ReadHandle;
import org.apache.bookkeeper.client.api.WriteAdvHandle;
import org.apache.bookkeeper.client.api.WriteFlag;
import org.apache.bookkeeper.client.api.WriteHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;

/**
 * Drives Apache BookKeeper's own ledger client ({@link BookKeeper}, V2 wire protocol) against a
 * cluster found through its metadata service, from a script of JSON lines.
 *
 * <p>Usage: {@code LedgerClient METADATA_SERVICE_URI SCRIPT [KEY=VALUE...]}; each KEY=VALUE is a
 * client configuration setting. A SCRIPT of {@code -} is read from stdin, each line run as it
 * arrives (the caller can act between operations). Each operation prints one JSON line on stdout
 * with its {@code op}, {@code ledger} and {@code writer} (if given) copied. Ledgers created here
 * are named by the {@code writer} of their {@code create}, others by their id:
 *
 * <pre>
 * {"op":"create","writer":W,"ensemble":3,"write_quorum":2,"ack_quorum":2,"digest":"CRC32C",
 *  "password_hex":".."}                    -> {"ledger":L,"metadata":{..}}
 * {"op":"append","writer":W,"payloads_hex":[..],"wait_for":N}   (new API: appendAsync, pipelined)
 *     -> {"acked":[entry ids],"lac":..,"length":..}
 * {"op":"close","writer":W}                  -> {"lac":..,"length":..}
 * {"op":"open","ledger":L,"password_hex":"..","digest":"..","recovery":true,"api":"new"|"legacy"}
 *     -> {"lac":..,"length":..,"closed":..,"metadata":{..}}
 * {"op":"read","ledger":L,"first":F,"last":T,"api":"new"|"legacy"}    -> {"entries":[..]}
 * {"op":"batch_read","ledger":L,"start":S,"max_count":N,"max_size":B}
 *     -> {"entries":[..],"fell_back_to_single_reads":false}
 * {"op":"read_lac","ledger":L}               -> {"lac": readLastAddConfirmed(),"length":..}
 * {"op":"read_explicit_lac","ledger":L}      -> {"lac": readExplicitLastConfirmed()}
 * </pre>
 *
 * <p>A {@code create} with {@code "adv":true} makes a ledger through {@code makeAdv()} (with
 * its {@code "ledger_id"} if given); its {@code append} takes {@code "entry_ids"}, one per
 * payload, sent in the order given with {@code writeAsync(entryId, ..)}.
 *
 * <pre>
 * {"op":"create_with_write_flags", ...create's fields, "write_flags":["DEFERRED_SYNC"]}
 *                                            -> as create (BookKeeper's WriteFlag set)
 * {"op":"force","writer":W}                  -> {"lac":..,"length":..} after WriteHandle.force()
 * {"op":"metadata","ledger":L}               -> {"metadata":{..}}
 * {"op":"halt"}            -> {"acked":{W:[entry ids]}}, then the JVM halts: nothing is closed
 * </pre>
 *
 * <p>Entries print as {@code {"id":..,"size":..,"sha256":"..","length_field":..}}, where
 * {@code length_field} is the ledger length the entry carries (what BookKeeper's
 * {@code LedgerEntry.getLength()} returns). {@code append} sends every payload at once and
 * waits until the first {@code wait_for} (default: all) are acknowledged; {@code acked} lists
 * every entry of the ledger acknowledged by then, the rest stay in flight. A failed operation
 * prints {@code {"error":CODE,"error_name":".."}} (a {@code BKException.Code}) and the script
 * goes on.
 */
public final class LedgerClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HexFormat HEX = HexFormat.of();
    private static final long WAIT_SECONDS = 60;

    private final BookKeeper bk;
    private final Map<String, WriteHandle> writers = new HashMap<>();
    private final Map<String, WriteAdvHandle> advWriters = new HashMap<>();
    private final Map<String, List<CompletableFuture<Long>>> appends = new HashMap<>();
    private final Map<Long, ReadHandle> readers = new HashMap<>();
    private final PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    private LedgerClient(BookKeeper bk) {
        this.bk = bk;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: LedgerClient METADATA_SERVICE_URI SCRIPT [KEY=VALUE...]");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setUseV2WireProtocol(true);
        conf.setEnableDigestTypeAutodetection(false); // reads verify with the digest asked for
        conf.setAddEntryTimeout(10);
        conf.setReadEntryTimeout(10);
        for (int i = 2; i < args.length; i++) {
            String[] setting = args[i].split("=", 2);
            conf.setProperty(setting[0], setting[1]);
        }
        try (BufferedReader script = "-".equals(args[1])
                ? new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
                : Files.newBufferedReader(Path.of(args[1]), StandardCharsets.UTF_8);
             BookKeeper bk = BookKeeper.forConfig(conf).build()) {
            LedgerClient client = new LedgerClient(bk);
            String line;
            while ((line = script.readLine()) != null) {
                if (!line.isBlank()) {
                    client.run(JSON.readTree(line));
                }
            }
        }
        System.exit(0);
    }

    private void run(JsonNode op) throws Exception {
        ObjectNode result = JSON.createObjectNode();
        result.put("op", op.path("op").asText());
        if (op.has("ledger")) {
            result.put("ledger", op.get("ledger").asLong());
        }
        if (op.has("writer")) {
            result.put("writer", op.get("writer").asText());
        }
        try {
            switch (op.path("op").asText()) {
                case "create" -> create(op, result);
                case "append" -> append(op, result);
                case "close" -> close(op, result);
                case "open" -> open(op, result);
                case "read" -> read(op, result);
                case "batch_read" -> batchRead(op, result);
                case "read_lac" -> readLac(op, result);
                case "read_explicit_lac" -> result.put("lac",
                        ((LedgerHandle) readers.get(op.get("ledger").asLong()))
                                .readExplicitLastConfirmed());
                case "create_with_write_flags" -> createWithWriteFlags(op, result);
                case "force" -> force(op, result);
                case "metadata" -> result.set("metadata",
                        metadata(get(bk.getLedgerMetadata(op.get("ledger").asLong()))));
                case "halt" -> {
                    ObjectNode acked = result.putObject("acked");
                    appends.forEach((writer, futures) -> acked.set(writer, acked(futures)));
                    out.println(JSON.writeValueAsString(result));
                    Runtime.getRuntime().halt(0);
                }
                default -> throw new IllegalArgumentException("unknown op: " + op);
            }
        } catch (BKException e) {
            result.put("error", e.getCode());
            result.put("error_name", e.getClass().getSimpleName());
        }
        out.println(JSON.writeValueAsString(result));
    }

    private void create(JsonNode op, ObjectNode result) throws Exception {
        if (op.path("adv").asBoolean(false)) {
            createAdv(op, result);
            return;
        }
        WriteHandle writer = get(bk.newCreateLedgerOp()
                .withEnsembleSize(op.get("ensemble").asInt())
                .withWriteQuorumSize(op.get("write_quorum").asInt())
                .withAckQuorumSize(op.get("ack_quorum").asInt())
                .withDigestType(DigestType.valueOf(op.get("digest").asText()))
                .withPassword(HEX.parseHex(op.path("password_hex").asText("")))
                .execute());
        writers.put(op.get("writer").asText(), writer);
        appends.put(op.get("writer").asText(), new ArrayList<>());
        result.put("ledger", writer.getId());
        result.set("metadata", metadata(writer.getLedgerMetadata()));
    }

    private void createAdv(JsonNode op, ObjectNode result) throws Exception {
        var builder = bk.newCreateLedgerOp()
                .withEnsembleSize(op.get("ensemble").asInt())
                .withWriteQuorumSize(op.get("write_quorum").asInt())
                .withAckQuorumSize(op.get("ack_quorum").asInt())
                .withDigestType(DigestType.valueOf(op.get("digest").asText()))
                .withPassword(HEX.parseHex(op.path("password_hex").asText("")))
                .makeAdv();
        if (op.has("ledger_id")) {
            builder = builder.withLedgerId(op.get("ledger_id").asLong());
        }
        WriteAdvHandle writer = get(builder.execute());
        advWriters.put(op.get("writer").asText(), writer);
        appends.put(op.get("writer").asText(), new ArrayList<>());
        result.put("ledger", writer.getId());
        result.set("metadata", metadata(writer.getLedgerMetadata()));
    }

    /** As {@code create}, with the {@code write_flags} named (BookKeeper's WriteFlag names). */
    private void createWithWriteFlags(JsonNode op, ObjectNode result) throws Exception {
        EnumSet<WriteFlag> flags = EnumSet.noneOf(WriteFlag.class);
        for (JsonNode flag : op.path("write_flags")) {
            flags.add(WriteFlag.valueOf(flag.asText()));
        }
        WriteHandle writer = get(bk.newCreateLedgerOp()
                .withEnsembleSize(op.get("ensemble").asInt())
                .withWriteQuorumSize(op.get("write_quorum").asInt())
                .withAckQuorumSize(op.get("ack_quorum").asInt())
                .withDigestType(DigestType.valueOf(op.get("digest").asText()))
                .withPassword(HEX.parseHex(op.path("password_hex").asText("")))
                .withWriteFlags(flags)
                .execute());
        writers.put(op.get("writer").asText(), writer);
        appends.put(op.get("writer").asText(), new ArrayList<>());
        result.put("ledger", writer.getId());
        result.set("metadata", metadata(writer.getLedgerMetadata()));
    }

    private void appendAdv(JsonNode op, ObjectNode result) throws Exception {
        WriteAdvHandle writer = advWriters.get(op.get("writer").asText());
        List<CompletableFuture<Long>> all = appends.get(op.get("writer").asText());
        List<CompletableFuture<Long>> sent = new ArrayList<>();
        JsonNode ids = op.get("entry_ids");
        JsonNode payloads = op.get("payloads_hex");
        for (int i = 0; i < payloads.size(); i++) {
            sent.add(writer.writeAsync(ids.get(i).asLong(), HEX.parseHex(payloads.get(i).asText())));
        }
        all.addAll(sent);
        for (CompletableFuture<Long> ack : sent.subList(0, op.path("wait_for").asInt(sent.size()))) {
            get(ack);
        }
        result.put("ledger", writer.getId());
        result.set("acked", acked(all));
        result.put("lac", writer.getLastAddConfirmed());
        result.put("length", writer.getLength());
    }

    /** WriteHandle.force(): FORCE_LEDGER to the ensemble; the LAC it advanced to. */
    private void force(JsonNode op, ObjectNode result) throws Exception {
        WriteHandle writer = writers.get(op.get("writer").asText());
        get(writer.force());
        result.put("ledger", writer.getId());
        result.put("lac", writer.getLastAddConfirmed());
        result.put("length", writer.getLength());
    }

    private void append(JsonNode op, ObjectNode result) throws Exception {
        if (advWriters.containsKey(op.get("writer").asText())) {
            appendAdv(op, result);
            return;
        }
        WriteHandle writer = writers.get(op.get("writer").asText());
        List<CompletableFuture<Long>> all = appends.get(op.get("writer").asText());
        List<CompletableFuture<Long>> sent = new ArrayList<>();
        for (JsonNode payload : op.get("payloads_hex")) {
            sent.add(writer.appendAsync(HEX.parseHex(payload.asText())));
        }
        all.addAll(sent);
        for (CompletableFuture<Long> ack : sent.subList(0, op.path("wait_for").asInt(sent.size()))) {
            get(ack);
        }
        result.put("ledger", writer.getId());
        result.set("acked", acked(all));
        result.put("lac", writer.getLastAddConfirmed());
        result.put("length", writer.getLength());
    }

    /** The entry ids of the appends acknowledged so far. */
    private static ArrayNode acked(List<CompletableFuture<Long>> futures) {
        ArrayNode ids = JSON.createArrayNode();
        for (CompletableFuture<Long> ack : futures) {
            if (ack.isDone() && !ack.isCompletedExceptionally()) {
                ids.add(ack.join());
            }
        }
        return ids;
    }

    private void close(JsonNode op, ObjectNode result) throws Exception {
        WriteAdvHandle adv = advWriters.get(op.get("writer").asText());
        if (adv != null) {
            get(adv.closeAsync());
            result.put("ledger", adv.getId());
            result.put("lac", adv.getLastAddConfirmed());
            result.put("length", adv.getLength());
            return;
        }
        WriteHandle writer = writers.get(op.get("writer").asText());
        get(writer.closeAsync());
        result.put("ledger", writer.getId());
        result.put("lac", writer.getLastAddConfirmed());
        result.put("length", writer.getLength());
    }

    private void open(JsonNode op, ObjectNode result) throws Exception {
        long ledger = op.get("ledger").asLong();
        byte[] password = HEX.parseHex(op.path("password_hex").asText(""));
        DigestType digest = DigestType.valueOf(op.get("digest").asText());
        boolean recovery = op.path("recovery").asBoolean(false);
        ReadHandle reader;
        if ("legacy".equals(op.path("api").asText("new"))) {
            BookKeeper.DigestType legacyDigest = BookKeeper.DigestType.fromApiDigestType(digest);
            reader = recovery
                    ? bk.openLedger(ledger, legacyDigest, password)
                    : bk.openLedgerNoRecovery(ledger, legacyDigest, password);
        } else {
            reader = get(bk.newOpenLedgerOp().withLedgerId(ledger).withDigestType(digest)
                    .withPassword(password).withRecovery(recovery).execute());
        }
        readers.put(ledger, reader);
        result.put("lac", reader.getLastAddConfirmed());
        result.put("length", reader.getLength());
        result.put("closed", reader.isClosed());
        result.set("metadata", metadata(reader.getLedgerMetadata()));
    }

    private void read(JsonNode op, ObjectNode result) throws Exception {
        ReadHandle reader = readers.get(op.get("ledger").asLong());
        long first = op.get("first").asLong();
        long last = op.get("last").asLong();
        ArrayNode entries = result.putArray("entries");
        if ("legacy".equals(op.path("api").asText("new"))) {
            Enumeration<org.apache.bookkeeper.client.LedgerEntry> legacy =
                    ((LedgerHandle) reader).readEntries(first, last);
            while (legacy.hasMoreElements()) {
                org.apache.bookkeeper.client.LedgerEntry entry = legacy.nextElement();
                entries.add(entry(entry.getEntryId(), entry.getEntry(), entry.getLength()));
            }
        } else {
            try (LedgerEntries read = get(reader.readAsync(first, last))) {
                addEntries(read, entries);
            }
        }
    }

    private void batchRead(JsonNode op, ObjectNode result) throws Exception {
        ReadHandle reader = readers.get(op.get("ledger").asLong());
        try (LedgerEntries read = get(reader.batchReadAsync(op.get("start").asLong(),
                op.get("max_count").asInt(), op.get("max_size").asLong()))) {
            addEntries(read, result.putArray("entries"));
        }
        // Set when a bookie refused a batch read and the client fell back to single reads.
        Field notSupportBatch = LedgerHandle.class.getDeclaredField("notSupportBatch");
        notSupportBatch.setAccessible(true);
        result.put("fell_back_to_single_reads", notSupportBatch.getBoolean(reader));
    }

    private void readLac(JsonNode op, ObjectNode result) throws Exception {
        ReadHandle reader = readers.get(op.get("ledger").asLong());
        result.put("lac", get(reader.readLastAddConfirmedAsync()));
        result.put("length", reader.getLength());
    }

    private static void addEntries(LedgerEntries read, ArrayNode entries) throws Exception {
        for (LedgerEntry entry : read) {
            entries.add(entry(entry.getEntryId(), entry.getEntryBytes(), entry.getLength()));
        }
    }

    private static ObjectNode entry(long id, byte[] payload, long lengthField) throws Exception {
        ObjectNode node = JSON.createObjectNode();
        node.put("id", id);
        node.put("size", payload.length);
        node.put("sha256", HEX.formatHex(MessageDigest.getInstance("SHA-256").digest(payload)));
        node.put("length_field", lengthField);
        return node;
    }

    private static ObjectNode metadata(LedgerMetadata md) {
        ObjectNode node = JSON.createObjectNode();
        node.put("state", md.getState().name());
        node.put("closed", md.isClosed());
        node.put("last_entry_id", md.getLastEntryId());
        node.put("length", md.getLength());
        node.put("ensemble", md.getEnsembleSize());
        node.put("write_quorum", md.getWriteQuorumSize());
        node.put("ack_quorum", md.getAckQuorumSize());
        node.put("digest", md.getDigestType().name());
        node.put("password_hex", md.hasPassword() ? HEX.formatHex(md.getPassword()) : null);
        ObjectNode ensembles = node.putObject("ensembles");
        for (Map.Entry<Long, ? extends List<BookieId>> segment : md.getAllEnsembles().entrySet()) {
            ArrayNode bookies = ensembles.putArray(segment.getKey().toString());
            segment.getValue().forEach(bookie -> bookies.add(bookie.toString()));
        }
        return node;
    }

    /** The future's value; its BKException (or the error it failed with) is thrown as is. */
    private static <T> T get(CompletableFuture<T> future) throws Exception {
        try {
            return future.get(WAIT_SECONDS, TimeUnit.SECONDS);
        } catch (ExecutionException | CompletionException e) {
            if (e.getCause() instanceof Exception cause) {
                throw cause;
            }
            throw e;
        }
    }
}
