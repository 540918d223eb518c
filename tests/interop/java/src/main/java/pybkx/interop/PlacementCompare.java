package pybkx.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.EnsemblePlacementPolicy;
import org.apache.bookkeeper.client.EnsemblePlacementPolicy.PlacementResult;
import org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy;
import org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy;
import org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.feature.SettableFeatureProvider;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.net.BookieSocketAddress;
import org.apache.bookkeeper.net.DNSToSwitchMapping;
import org.apache.bookkeeper.proto.BookieAddressResolver;
import org.apache.bookkeeper.stats.NullStatsLogger;

/**
 * Runs Apache BookKeeper's own placement policies over topologies given by the pybkx tests and
 * prints what they decide, so pybkx's policies can be compared with them.
 *
 * <p>{@code PlacementCompare compare FILE}: FILE holds a JSON array of cases
 * {@code {"policy": "rack"|"region"|"zone", "conf": {key: value}, "locations": {bookieId:
 * location}, "writable": [...], "readonly": [...], "adherence": [{"ensemble": [...], "wq": n,
 * "aq": n}], "acked": [{"bookies": [...], "wq": n, "aq": n}], "new": {"count": n, "e": n,
 * "wq": n, "aq": n}}}. One JSON line per case is printed: {@code {"adherence": [VERDICT...],
 * "acked": [bool...], "new": [{"ensemble": [...], "adherence": VERDICT, "check": VERDICT} |
 * {"error": NAME}]}}, where "check" is the policy's own adherence check of the new ensemble.
 *
 * <p>{@code PlacementCompare bench FILE}: FILE holds one case and {@code "bench": {"warmup": n,
 * "runs": n, "e": n, "wq": n, "aq": n}}; prints {@code {"median_us": x, "p99_us": y}} for
 * {@code newEnsemble}.
 */
public final class PlacementCompare {
    private static final ObjectMapper JSON = new ObjectMapper();

    private PlacementCompare() {
    }

    /** A fixed host -> location table; hosts it does not know resolve to null (default rack). */
    static final class TableMapping implements DNSToSwitchMapping {
        private final Map<String, String> table;

        TableMapping(Map<String, String> table) {
            this.table = table;
        }

        @Override
        public List<String> resolve(List<String> names) {
            List<String> out = new ArrayList<>(names.size());
            for (String name : names) {
                out.add(table.get(name));
            }
            return out;
        }

        @Override
        public void reloadCachedMappings() {
            // the table never changes
        }
    }

    private static BookieSocketAddress socketAddress(BookieId id) {
        try {
            return new BookieSocketAddress(id.toString());
        } catch (UnknownHostException e) {
            throw new IllegalArgumentException("bad bookie id " + id, e);
        }
    }

    static EnsemblePlacementPolicy policy(JsonNode spec) {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setProperty("ignoreLocalNodeInPlacementPolicy", "true");
        for (Iterator<Map.Entry<String, JsonNode>> it = spec.path("conf").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> entry = it.next();
            conf.setProperty(entry.getKey(), entry.getValue().asText());
        }
        Map<String, String> table = new HashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = spec.path("locations").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> entry = it.next();
            String host = entry.getKey().substring(0, entry.getKey().lastIndexOf(':'));
            table.put(host, entry.getValue().asText());
        }
        EnsemblePlacementPolicy policy;
        switch (spec.path("policy").asText()) {
            case "rack":
                policy = new RackawareEnsemblePlacementPolicy();
                break;
            case "region":
                // Its constructor is package-private; BookKeeper builds it by reflection too.
                policy = newInstance(RegionAwareEnsemblePlacementPolicy.class);
                break;
            case "zone":
                policy = new ZoneawareEnsemblePlacementPolicy();
                break;
            default:
                throw new IllegalArgumentException("unknown policy " + spec.path("policy"));
        }
        BookieAddressResolver resolver = PlacementCompare::socketAddress;
        policy.initialize(conf, Optional.of(new TableMapping(table)), null,
                SettableFeatureProvider.DISABLE_ALL, NullStatsLogger.INSTANCE, resolver);
        policy.onClusterChanged(ids(spec.path("writable")), ids(spec.path("readonly")));
        return policy;
    }

    static <T> T newInstance(Class<T> cls) {
        try {
            java.lang.reflect.Constructor<T> constructor = cls.getDeclaredConstructor();
            constructor.setAccessible(true);
            return constructor.newInstance();
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot create " + cls.getName(), e);
        }
    }

    static Set<BookieId> ids(JsonNode array) {
        Set<BookieId> out = new HashSet<>();
        for (JsonNode node : array) {
            out.add(BookieId.parse(node.asText()));
        }
        return out;
    }

    static List<BookieId> list(JsonNode array) {
        List<BookieId> out = new ArrayList<>();
        for (JsonNode node : array) {
            out.add(BookieId.parse(node.asText()));
        }
        return out;
    }

    static ObjectNode compare(JsonNode spec) {
        EnsemblePlacementPolicy policy = policy(spec);
        ObjectNode out = JSON.createObjectNode();
        ArrayNode verdicts = out.putArray("adherence");
        for (JsonNode query : spec.path("adherence")) {
            verdicts.add(policy.isEnsembleAdheringToPlacementPolicy(
                    list(query.path("ensemble")), query.path("wq").asInt(), query.path("aq").asInt()).name());
        }
        ArrayNode acked = out.putArray("acked");
        for (JsonNode query : spec.path("acked")) {
            acked.add(policy.areAckedBookiesAdheringToPlacementPolicy(
                    ids(query.path("bookies")), query.path("wq").asInt(), query.path("aq").asInt()));
        }
        ArrayNode created = out.putArray("new");
        JsonNode request = spec.path("new");
        for (int i = 0; i < request.path("count").asInt(0); i++) {
            ObjectNode one = created.addObject();
            try {
                PlacementResult<List<BookieId>> result = policy.newEnsemble(request.path("e").asInt(),
                        request.path("wq").asInt(), request.path("aq").asInt(), Collections.emptyMap(),
                        new HashSet<>());
                ArrayNode ensemble = one.putArray("ensemble");
                for (BookieId id : result.getResult()) {
                    ensemble.add(id.toString());
                }
                one.put("adherence", result.getAdheringToPolicy().name());
                one.put("check", policy.isEnsembleAdheringToPlacementPolicy(result.getResult(),
                        request.path("wq").asInt(), request.path("aq").asInt()).name());
            } catch (BKException.BKNotEnoughBookiesException e) {
                one.put("error", "NotEnoughBookies");
            } catch (IllegalArgumentException e) {
                one.put("error", "IllegalArgument");
            }
        }
        policy.uninitalize();
        return out;
    }

    static ObjectNode bench(JsonNode spec) throws BKException.BKNotEnoughBookiesException {
        EnsemblePlacementPolicy policy = policy(spec);
        JsonNode bench = spec.path("bench");
        int e = bench.path("e").asInt();
        int wq = bench.path("wq").asInt();
        int aq = bench.path("aq").asInt();
        for (int i = 0; i < bench.path("warmup").asInt(); i++) {
            policy.newEnsemble(e, wq, aq, Collections.emptyMap(), new HashSet<>());
        }
        int runs = bench.path("runs").asInt();
        long[] nanos = new long[runs];
        int strict = 0;
        for (int i = 0; i < runs; i++) {
            long start = System.nanoTime();
            PlacementResult<List<BookieId>> result =
                    policy.newEnsemble(e, wq, aq, Collections.emptyMap(), new HashSet<>());
            nanos[i] = System.nanoTime() - start;
            if (result.getAdheringToPolicy() == EnsemblePlacementPolicy.PlacementPolicyAdherence.MEETS_STRICT) {
                strict++;
            }
        }
        Arrays.sort(nanos);
        ObjectNode out = JSON.createObjectNode();
        out.put("median_us", nanos[runs / 2] / 1000.0);
        out.put("p99_us", nanos[Math.min(runs - 1, (int) (runs * 0.99))] / 1000.0);
        out.put("runs", runs);
        out.put("strict", strict);
        return out;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: PlacementCompare compare|bench FILE");
            System.exit(2);
        }
        JsonNode input = JSON.readTree(new File(args[1]));
        if ("bench".equals(args[0])) {
            System.out.println(JSON.writeValueAsString(bench(input)));
            return;
        }
        for (JsonNode spec : input) {
            System.out.println(JSON.writeValueAsString(compare(spec)));
        }
    }
}
