package pybkx.interop;

import java.io.File;
import java.util.concurrent.CompletableFuture;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.common.component.ComponentStarter;
import org.apache.bookkeeper.common.component.LifecycleComponentStack;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.server.EmbeddedServer;
import org.apache.bookkeeper.server.conf.BookieConfiguration;

/**
 * Runs a real Apache BookKeeper bookie on 127.0.0.1 for the interop tests.
 *
 * <p>Usage: {@code JavaBookie PORT ZK_HOST:ZK_PORT DATA_DIR [key=value ...]}. Journal and ledger
 * directories go under DATA_DIR; the metadata lives in ZooKeeper under {@code /ledgers}, and the
 * cluster there is initialised first if it is not yet. Extra {@code key=value} arguments are
 * bookie configuration overrides. Prints {@code READY 127.0.0.1:PORT} once the bookie serves;
 * stops cleanly on SIGTERM.
 */
public final class JavaBookie {
    private JavaBookie() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: JavaBookie PORT ZK_HOST:ZK_PORT DATA_DIR [key=value ...]");
            System.exit(2);
        }
        int port = Integer.parseInt(args[0]);
        File dataDir = new File(args[2]);

        ServerConfiguration conf = new ServerConfiguration();
        conf.setBookiePort(port);
        // Bind to and advertise loopback only (binding to one address needs an interface name).
        conf.setAdvertisedAddress("127.0.0.1");
        conf.setListeningInterface("lo");
        conf.setAllowLoopback(true);
        conf.setMetadataServiceUri("zk+hierarchical://" + args[1] + "/ledgers");
        conf.setJournalDirsName(new String[] {new File(dataDir, "journal").getPath()});
        conf.setLedgerDirNames(new String[] {new File(dataDir, "ledgers").getPath()});
        conf.setJournalSyncData(true);
        // Never turn read-only because the test machine's disk is fuller than the 95 % default.
        conf.setDiskUsageWarnThreshold(0.98f);
        conf.setDiskUsageThreshold(0.99f);
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + args[i]);
            }
            conf.setProperty(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        if (BookKeeperAdmin.initNewCluster(conf)) {
            System.out.println("initialised cluster metadata at " + conf.getMetadataServiceUri());
        }

        LifecycleComponentStack server =
                EmbeddedServer.builder(new BookieConfiguration(conf)).build().getLifecycleComponentStack();
        // Starts synchronously; the future completes once the shutdown hook (SIGTERM) stopped it.
        CompletableFuture<Void> stopped = ComponentStarter.startComponent(server);
        System.out.println("READY 127.0.0.1:" + port);
        System.out.flush();
        stopped.get();
    }
}
