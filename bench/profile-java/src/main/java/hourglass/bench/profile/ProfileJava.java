package hourglass.bench.profile;

import java.io.BufferedInputStream;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.BufferedMutator;
import org.apache.hadoop.hbase.client.BufferedMutatorParams;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;

/**
 * The Java peer of {@code hourglass profile replay --hbase} (issue 36): the seed's own consumer,
 * a per-user merge flushed at 500 users or 5 s with one multi-column put per user, written with
 * the HBase Java client, and a digest of the tables to show both leave the same bytes.
 *
 * <pre>
 *   ProfileJava write EVENTS.jsonl TAGS.csv   merge the events into user_profile_tag and
 *                                             user_tag_history
 *   ProfileJava plan EVENTS.jsonl TAGS.csv    the same merge without HBase: print the newest
 *                                             cells as `hourglass tables dump` does ({@link Plan})
 *   ProfileJava digest                        SHA-256 over the two tables' cells
 *   ProfileJava truncate                      empty the two tables, keeping their splits
 *   ProfileJava float X...                    print the cell text of FLOAT values (a check)
 * </pre>
 *
 * <p>{@code write} reads the tag events (JSON Lines, as {@code hourglass profile generate}
 * writes them) on one thread: each line decoded ({@link EventDecoder}), refused as a whole
 * (counted by kind) or buffered per user, each tag checked against the registry CSV (unknown,
 * offline, gray for a user not in {@code -Dgray.users=a,b}, wrong type, over 4096 bytes: refused
 * and counted, the event's other tags kept), and the buffer flushed ({@link UserMerge}) once it
 * holds {@code -Dmax.users} (500) users, once its oldest event waited
 * {@code -Dflush.ms} (5000) ms, and at the end. A BufferedMutator per table (write buffer
 * {@code -Dbuffer.mb}, default 8) sends the puts, its flushes running in the client's pool
 * while the next lines are read. Short-term tags are counted, not written: hourglass writes
 * them to Redis (or its embedded fallback), never to HBase. As hourglass's replay, a line more
 * than 3600 s ahead of the wall clock is refused ({@code future}); the replay's other guard,
 * against one clock jumping ahead of the watermark, is not modelled (generated traffic never
 * trips it). Prints one JSON line of counters on stdout.
 *
 * <p>ZooKeeper at {@code -Dzk=127.0.0.1:2181} (scripts/services.sh).
 */
public final class ProfileJava {
    static final String PROFILE_TABLE = "user_profile_tag";
    static final String HISTORY_TABLE = "user_tag_history";
    static final String[] TABLES = {PROFILE_TABLE, HISTORY_TABLE};
    /** The replay's allowed skew ahead of the wall clock (window.max_future_skew_secs). */
    static final long FUTURE_SKEW_SECS = 3600;

    private ProfileJava() {}

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "";
        if (mode.equals("float")) {
            for (int i = 1; i < args.length; i++) {
                System.out.println(Values.floatText(Double.parseDouble(args[i])));
            }
            return;
        }
        if (mode.equals("plan") && args.length == 3) {
            Plan plan = new Plan();
            String counters = write(plan, args[1], Path.of(args[2]));
            plan.print(System.out);
            System.err.println(counters);
            return;
        }
        if (!((mode.equals("write") && args.length == 3) || (mode.equals("digest") && args.length == 1)
                || (mode.equals("truncate") && args.length == 1) || (mode.equals("settle") && args.length == 1))) {
            System.err.println("usage: ProfileJava write EVENTS.jsonl TAGS.csv | plan EVENTS.jsonl TAGS.csv "
                    + "| digest | truncate | settle | float X... "
                    + "(-Dzk=HOST:PORT of HBase's ZooKeeper, default 127.0.0.1:2181; -Dbuffer.mb=N "
                    + "write buffer, default 8; -Dmax.users=N, default 500; -Dflush.ms=N, default 5000; "
                    + "-Dgray.users=a,b, default none)");
            System.exit(2);
        }
        try (Connection conn = ConnectionFactory.createConnection(config())) {
            switch (mode) {
                case "write" -> System.out.println(
                        write(new HbaseSink(conn, Long.getLong("buffer.mb", 8) << 20), args[1], Path.of(args[2])));
                case "digest" -> digest(conn);
                case "settle" -> settle(conn);
                default -> truncate(conn);
            }
        }
    }

    private static Configuration config() {
        Configuration conf = HBaseConfiguration.create();
        String zk = System.getProperty("zk", "127.0.0.1:2181");
        int colon = zk.lastIndexOf(':');
        conf.set("hbase.zookeeper.quorum", colon < 0 ? zk : zk.substring(0, colon));
        if (colon >= 0) {
            conf.set("hbase.zookeeper.property.clientPort", zk.substring(colon + 1));
        }
        // A standalone HBase on loopback: fail in a minute rather than retrying for ten.
        conf.setInt("hbase.client.retries.number", 10);
        return conf;
    }

    // ------------------------------------------------------------------ write

    private static final class Counters {
        long read;
        long ok;
        long eventsRejected;
        long tagsRejected;
        final long[] byKind = new long[Rejection.KINDS.length];
        long flushes;
        long usersFlushed;
        long tagsWritten;
        long historyRows;
        long shortTerm;
        long bytes;

        void reject(Rejection r) {
            byKind[r.kind]++;
        }
    }

    /** Where a flush's puts go. */
    interface Sink extends AutoCloseable {
        void write(UserMerge.Flushed flushed) throws IOException;

        @Override
        void close() throws IOException;
    }

    /** HBase, through a BufferedMutator per table. */
    private static final class HbaseSink implements Sink {
        private final BufferedMutator profile;
        private final BufferedMutator history;

        HbaseSink(Connection conn, long bufferBytes) throws IOException {
            profile = mutator(conn, PROFILE_TABLE, bufferBytes);
            history = mutator(conn, HISTORY_TABLE, bufferBytes);
        }

        @Override
        public void write(UserMerge.Flushed f) throws IOException {
            profile.mutate(f.profile);
            history.mutate(f.history);
        }

        @Override
        public void close() throws IOException {
            try (history) {
                profile.close();
            }
        }
    }

    /**
     * Reads the events into {@code sink} and closes it; returns the counters as a JSON line,
     * {@code wall_s} from the start to the sink closed (its writes flushed).
     */
    private static String write(Sink sink, String file, Path registryCsv) throws IOException {
        long started = System.nanoTime();
        int maxUsers = Integer.getInteger("max.users", 500);
        long flushNanos = Long.getLong("flush.ms", 5000) * 1_000_000L;
        Set<String> gray = new HashSet<>();
        for (String u : System.getProperty("gray.users", "").split(",")) {
            if (!u.isBlank()) {
                gray.add(u.trim());
            }
        }
        Registry registry = Registry.load(registryCsv);
        Counters c = new Counters();
        EventDecoder decoder = new EventDecoder();
        EventDecoder.Event event = new EventDecoder.Event();
        Keys keys = new Keys();
        UserMerge merge = new UserMerge();
        long wall = System.currentTimeMillis() / 1000;
        try (sink; InputStream in = new BufferedInputStream(new FileInputStream(file), 1 << 20)) {
            LineReader lines = new LineReader(in);
            byte[] line;
            while ((line = lines.next()) != null) {
                c.read++;
                if (!merge.isEmpty() && merge.waitedNanos(System.nanoTime()) >= flushNanos) {
                    flush(merge, keys, sink, c);
                }
                try {
                    decoder.decode(line, event);
                    if (event.ts > wall + FUTURE_SKEW_SECS) {
                        wall = System.currentTimeMillis() / 1000;
                        if (event.ts > wall + FUTURE_SKEW_SECS) {
                            throw Rejection.FUTURE;
                        }
                    }
                } catch (Rejection r) {
                    c.eventsRejected++;
                    c.reject(r);
                    continue;
                }
                c.ok++;
                UserMerge.User user = merge.user(event.user);
                for (Iterator<Map.Entry<String, JsonNode>> it = event.tags.fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> tag = it.next();
                    try {
                        Registry.Tag def = registry.get(tag.getKey());
                        if (def == null) {
                            throw Rejection.UNKNOWN_TAG;
                        }
                        switch (def.status) {
                            case ONLINE -> { }
                            case GRAY -> {
                                if (!gray.contains(event.user)) {
                                    throw Rejection.GRAY_TAG;
                                }
                            }
                            case OFFLINE -> throw Rejection.OFFLINE_TAG;
                        }
                        UserMerge.add(user, def, event.ts,
                                Values.cell(def, tag.getValue(), Values.MAX_VALUE_BYTES));
                    } catch (Rejection r) {
                        c.tagsRejected++;
                        c.reject(r);
                    }
                }
                if (merge.users() >= maxUsers) {
                    flush(merge, keys, sink, c);
                }
            }
            flush(merge, keys, sink, c);
        }
        double wallS = (System.nanoTime() - started) / 1e9;
        StringBuilder kinds = new StringBuilder("{");
        for (int i = 0; i < Rejection.KINDS.length; i++) {
            kinds.append(i == 0 ? "" : ",").append('"').append(Rejection.KINDS[i]).append("\":").append(c.byKind[i]);
        }
        kinds.append('}');
        return String.format(Locale.ROOT,
                "{\"read\":%d,\"ok\":%d,\"rejected\":%d,\"events_rejected\":%d,\"tags_rejected\":%d,"
                        + "\"flushes\":%d,\"users_flushed\":%d,\"tags_written\":%d,\"history_rows\":%d,"
                        + "\"short_term_skipped\":%d,\"bytes\":%d,\"registry_tags\":%d,"
                        + "\"wall_s\":%.3f,\"rejected_by_kind\":%s}",
                c.read, c.ok, c.eventsRejected + c.tagsRejected, c.eventsRejected, c.tagsRejected,
                c.flushes, c.usersFlushed, c.tagsWritten, c.historyRows, c.shortTerm, c.bytes,
                registry.size(), wallS, kinds);
    }

    private static void flush(UserMerge merge, Keys keys, Sink sink, Counters c) throws IOException {
        if (merge.isEmpty()) {
            return;
        }
        UserMerge.Flushed f = merge.flush(keys);
        sink.write(f);
        c.flushes++;
        c.usersFlushed += f.profile.size();
        c.tagsWritten += f.cells;
        c.historyRows += f.history.size();
        c.shortTerm += f.shortTerm;
        c.bytes += f.bytes;
    }

    private static BufferedMutator mutator(Connection conn, String table, long bufferBytes)
            throws IOException {
        return conn.getBufferedMutator(
                new BufferedMutatorParams(TableName.valueOf(table)).writeBufferSize(bufferBytes));
    }

    /** Lines of a byte stream without their '\n' (and a '\r' before it), as hourglass reads them. */
    private static final class LineReader {
        private final InputStream in;
        private final byte[] buf = new byte[1 << 16];
        private int pos;
        private int len;
        private byte[] line = new byte[256];

        LineReader(InputStream in) {
            this.in = in;
        }

        byte[] next() throws IOException {
            int n = 0;
            boolean any = false;
            while (true) {
                if (pos == len) {
                    len = in.read(buf, 0, buf.length);
                    pos = 0;
                    if (len <= 0) {
                        len = 0;
                        return any ? finish(n) : null;
                    }
                }
                any = true;
                int start = pos;
                while (pos < len && buf[pos] != '\n') {
                    pos++;
                }
                int chunk = pos - start;
                if (n + chunk > line.length) {
                    line = Arrays.copyOf(line, Math.max(line.length * 2, n + chunk));
                }
                System.arraycopy(buf, start, line, n, chunk);
                n += chunk;
                if (pos < len) {
                    pos++;
                    return finish(n);
                }
            }
        }

        private byte[] finish(int n) {
            if (n > 0 && line[n - 1] == '\r') {
                n--;
            }
            return Arrays.copyOf(line, n);
        }
    }

    // ------------------------------------------------------------------ digest, truncate

    /**
     * Prints, per table, the SHA-256 over its cells in scan order, each cell's row, family,
     * qualifier, timestamp and value length-prefixed: {@code sha256} over the newest version of
     * each column, what a Get returns and what the comparison is about; and for
     * user_profile_tag, {@code versions_sha256} over the (up to three) versions kept. Which older
     * versions a column keeps depends on where each system's flushes fell (a flush writes only
     * its newest value of a tag; the 5 s flushes follow the clock), so they are shown, not
     * compared. {@code all} is the SHA-256 of the tables' newest-version digests.
     */
    private static void digest(Connection conn) throws IOException, NoSuchAlgorithmException {
        MessageDigest all = MessageDigest.getInstance("SHA-256");
        StringBuilder out = new StringBuilder("{");
        for (String name : TABLES) {
            MessageDigest latest = MessageDigest.getInstance("SHA-256");
            MessageDigest versions = MessageDigest.getInstance("SHA-256");
            long rows = 0;
            long cells = 0;
            long versionCells = 0;
            Scan scan = new Scan().setCaching(2000).setCacheBlocks(false).readVersions(3);
            try (Table t = conn.getTable(TableName.valueOf(name));
                    ResultScanner scanner = t.getScanner(scan)) {
                for (Result result : scanner) {
                    rows++;
                    Cell previous = null;
                    for (Cell cell : result.rawCells()) {
                        versionCells++;
                        feed(versions, cell);
                        // Versions of a column come together, newest first.
                        if (previous == null || !CellUtil.matchingColumn(previous, cell)) {
                            cells++;
                            feed(latest, cell);
                        }
                        previous = cell;
                    }
                }
            }
            byte[] d = latest.digest();
            all.update(d);
            out.append(String.format(Locale.ROOT,
                    "\"%s\":{\"rows\":%d,\"cells\":%d,\"sha256\":\"%s\",\"version_cells\":%d,\"versions_sha256\":\"%s\"},",
                    name, rows, cells, HexFormat.of().formatHex(d), versionCells,
                    HexFormat.of().formatHex(versions.digest())));
        }
        out.append("\"all\":\"").append(HexFormat.of().formatHex(all.digest())).append("\"}");
        System.out.println(out);
    }

    private static void feed(MessageDigest md, Cell cell) {
        feed(md, cell.getRowArray(), cell.getRowOffset(), cell.getRowLength());
        feed(md, cell.getFamilyArray(), cell.getFamilyOffset(), cell.getFamilyLength());
        feed(md, cell.getQualifierArray(), cell.getQualifierOffset(), cell.getQualifierLength());
        long ts = cell.getTimestamp();
        for (int i = 7; i >= 0; i--) {
            md.update((byte) (ts >>> (8 * i)));
        }
        feed(md, cell.getValueArray(), cell.getValueOffset(), cell.getValueLength());
    }

    private static void feed(MessageDigest md, byte[] array, int offset, int length) {
        md.update((byte) (length >>> 24));
        md.update((byte) (length >>> 16));
        md.update((byte) (length >>> 8));
        md.update((byte) length);
        md.update(array, offset, length);
    }

    /**
     * Flushes the two tables' memstores and major-compacts them, waiting for the compactions to
     * end (at most ten minutes), so that their files on disk hold every cell once, compressed:
     * what "bytes on disk per stored value" measures. Prints each table's store files' size.
     */
    private static void settle(Connection conn) throws IOException, InterruptedException {
        try (Admin admin = conn.getAdmin()) {
            for (String name : TABLES) {
                TableName table = TableName.valueOf(name);
                admin.flush(table);
                admin.majorCompact(table);
            }
            long deadline = System.nanoTime() + 600_000_000_000L;
            for (String name : TABLES) {
                TableName table = TableName.valueOf(name);
                // The request is queued: wait for it to start, then to end.
                Thread.sleep(2000);
                while (admin.getCompactionState(table) != org.apache.hadoop.hbase.client.CompactionState.NONE) {
                    if (System.nanoTime() > deadline) {
                        throw new IOException("the major compaction of " + name + " did not end in ten minutes");
                    }
                    Thread.sleep(1000);
                }
                long bytes = 0;
                for (org.apache.hadoop.hbase.RegionMetrics m : admin.getRegionMetrics(
                        admin.getRegionServers().iterator().next(), table)) {
                    bytes += (long) m.getStoreFileSize().get(org.apache.hadoop.hbase.Size.Unit.BYTE);
                }
                System.out.println(name + " store_file_bytes=" + bytes);
            }
        }
    }

    /** Empties the two tables, keeping their region boundaries (missing tables are skipped). */
    private static void truncate(Connection conn) throws IOException {
        try (Admin admin = conn.getAdmin()) {
            for (String name : TABLES) {
                TableName table = TableName.valueOf(name);
                if (!admin.tableExists(table)) {
                    continue;
                }
                if (admin.isTableEnabled(table)) {
                    admin.disableTable(table);
                }
                admin.truncateTable(table, true);
            }
        }
    }
}
