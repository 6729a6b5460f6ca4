package hourglass.bench.hbase;

import java.io.BufferedInputStream;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.BufferedMutator;
import org.apache.hadoop.hbase.client.BufferedMutatorParams;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptor;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.CompactionState;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.io.encoding.DataBlockEncoding;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * The Java peer of {@code hourglass replay --hbase} (docs/BENCHMARKS.md, issue 11): the same
 * rows written with the HBase Java client, and a digest of the tables to show both writers
 * leave byte-identical tables.
 *
 * <pre>
 *   HbaseJava write FILE.jsonl   replay a recording into ts_metric, ts_metric_hourly, ts_room_latest
 *   HbaseJava digest [FROM_MS TO_MS]  SHA-256 over every visible cell of the three tables
 *                                     (with cell timestamps in [FROM_MS, TO_MS) if given)
 *   HbaseJava truncate [TABLE...]  empty the tables (default the three), keeping their region splits
 *   HbaseJava compact TABLE...   flush each table, major-compact it and wait until HBase says no
 *                                compaction runs (for bytes-on-disk figures: bench/hbase-java/disk.sh)
 *   HbaseJava family TABLE FAMILY ENCODING BLOCK_BYTES
 *                                set a family's data block encoding (NONE, FAST_DIFF, ROW_INDEX_V1, …)
 *                                and block size, for benchmarks that compare them on one table
 * </pre>
 *
 * <p>What {@code write} writes, as hourglass does: a narrow row per reading as it comes (t:v, and
 * t:x when the reading has other fields, stamped with its event time); per device and hour, one
 * put of its points and the six summary cells (stamped with the hour's last millisecond), once
 * the hour is closed (the watermark, newest event time − 30 s, past the hour's end + 1 h of
 * allowed lateness) or at the end of the file; and per device one room-view row for its newest
 * reading (t:v, t:o = its own room field), at the end. Readings of an hour already written are
 * late: narrow row only, counted, as hourglass sends them to its late output.
 *
 * <p>One thread decodes and builds puts; a BufferedMutator per table (write buffer
 * {@code -Dbuffer.mb}, default 8) sends them, its flushes running in the client's pool while
 * the next puts are built. ZooKeeper at {@code -Dzk=127.0.0.1:2181} (scripts/services.sh).
 * Prints one JSON line of counters on stdout.
 */
public final class HbaseJava {
    static final long BOUND_SECS = 30;
    static final long LATENESS_SECS = 3600;
    static final String METRIC = "temp";

    private HbaseJava() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || (args[0].equals("write") && args.length != 2)
                || (args[0].equals("digest") && args.length != 1 && args.length != 3)
                || (args[0].equals("compact") && args.length < 2)
                || (args[0].equals("family") && args.length != 5)) {
            System.err.println("usage: HbaseJava write RECORDING.jsonl | digest [FROM_MS TO_MS] | truncate [TABLE...] "
                    + "| compact TABLE... | family TABLE FAMILY ENCODING BLOCK_BYTES "
                    + "(-Dzk=HOST:PORT of HBase's ZooKeeper, default 127.0.0.1:2181; "
                    + "-Dbuffer.mb=N write buffer, default 8)");
            System.exit(2);
        }
        try (Connection conn = ConnectionFactory.createConnection(config())) {
            switch (args[0]) {
                case "write" -> write(conn, args[1]);
                case "digest" -> digest(conn, args.length == 3 ? Long.parseLong(args[1]) : 0,
                        args.length == 3 ? Long.parseLong(args[2]) : Long.MAX_VALUE);
                case "truncate" -> truncate(conn, args.length > 1
                        ? Arrays.copyOfRange(args, 1, args.length) : Rows.TABLES);
                case "compact" -> compact(conn, Arrays.copyOfRange(args, 1, args.length));
                case "family" -> family(conn, args[1], args[2], args[3], Integer.parseInt(args[4]));
                default -> {
                    System.err.println("unknown mode " + args[0]
                            + ": use write, digest, truncate, compact or family");
                    System.exit(2);
                }
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

    /** A device's newest reading, for its room-view row. */
    private static final class Latest {
        long ts;
        double value;
        String room;
    }

    private static final class Counters {
        long read;
        long ok;
        long rejected;
        long late;
        long duplicates;
        long narrowRows;
        long wideRows;
        long wideCells;
        long roomRows;
        long bytes;
    }

    private static void write(Connection conn, String file) throws IOException {
        long started = System.nanoTime();
        long bufferBytes = Long.getLong("buffer.mb", 8) << 20;
        Counters c = new Counters();
        Decoder decoder = new Decoder(METRIC);
        // Open hours by start; in each, the devices' states. Hours close in order.
        TreeMap<Long, HashMap<String, HourState>> open = new TreeMap<>();
        HashMap<String, Latest> latest = new HashMap<>();
        long closedBefore = Long.MIN_VALUE;
        long maxTs = Long.MIN_VALUE;
        try (BufferedMutator narrow = mutator(conn, Rows.NARROW_TABLE, bufferBytes);
                BufferedMutator hourly = mutator(conn, Rows.HOURLY_TABLE, bufferBytes);
                BufferedMutator rooms = mutator(conn, Rows.ROOM_TABLE, bufferBytes);
                InputStream in = new BufferedInputStream(new FileInputStream(file), 1 << 20)) {
            Reading r = new Reading();
            LineReader lines = new LineReader(in);
            byte[] line;
            while ((line = lines.next()) != null) {
                c.read++;
                try {
                    decoder.decode(line, r);
                } catch (Decoder.Rejection e) {
                    c.rejected++;
                    continue;
                }
                c.ok++;
                narrow.mutate(narrowPut(r, c));

                Latest l = latest.get(r.device);
                if (l == null) {
                    l = new Latest();
                    l.ts = Long.MIN_VALUE;
                    latest.put(r.device, l);
                }
                if (r.ts > l.ts) {
                    l.ts = r.ts;
                    l.value = r.value;
                    l.room = r.room;
                }

                long hour = r.ts - Math.floorMod(r.ts, Rows.HOUR_SECS);
                if (hour < closedBefore) {
                    c.late++;
                    continue;
                }
                HourState h = open.computeIfAbsent(hour, k -> new HashMap<>())
                        .computeIfAbsent(r.device, k -> new HourState());
                if (!h.accept(r.ts, r.value)) {
                    c.duplicates++;
                }
                if (r.ts > maxTs) {
                    maxTs = r.ts;
                    long watermark = maxTs - BOUND_SECS;
                    while (!open.isEmpty()
                            && open.firstKey() + Rows.HOUR_SECS + LATENESS_SECS <= watermark) {
                        Map.Entry<Long, HashMap<String, HourState>> first = open.pollFirstEntry();
                        writeHour(hourly, first.getKey(), first.getValue(), c);
                        closedBefore = first.getKey() + Rows.HOUR_SECS;
                    }
                }
            }
            for (Map.Entry<Long, HashMap<String, HourState>> e : open.entrySet()) {
                writeHour(hourly, e.getKey(), e.getValue(), c);
            }
            for (Map.Entry<String, Latest> e : latest.entrySet()) {
                Latest l = e.getValue();
                if (l.room == null) {
                    continue;
                }
                Put put = new Put(Rows.roomKey(l.room, e.getKey()));
                long tsMs = l.ts * 1000;
                byte[] v = Rows.value(l.value);
                byte[] o = l.room.getBytes(StandardCharsets.UTF_8);
                put.addColumn(Rows.FAMILY, Rows.VALUE, tsMs, v);
                put.addColumn(Rows.FAMILY, Rows.OWN_ROOM, tsMs, o);
                c.bytes += put.getRow().length + v.length + o.length;
                rooms.mutate(put);
                c.roomRows++;
            }
        }
        double wall = (System.nanoTime() - started) / 1e9;
        System.out.println(String.format(Locale.ROOT,
                "{\"read\":%d,\"ok\":%d,\"rejected\":%d,\"late_dropped\":%d,\"duplicates\":%d,"
                        + "\"narrow_rows\":%d,\"wide_rows\":%d,\"wide_cells\":%d,\"room_rows\":%d,"
                        + "\"bytes\":%d,\"buffer_mb\":%d,\"wall_s\":%.3f}",
                c.read, c.ok, c.rejected, c.late, c.duplicates, c.narrowRows, c.wideRows,
                c.wideCells, c.roomRows, c.bytes, bufferBytes >> 20, wall));
    }

    private static BufferedMutator mutator(Connection conn, String table, long bufferBytes)
            throws IOException {
        BufferedMutatorParams params = new BufferedMutatorParams(TableName.valueOf(table))
                .writeBufferSize(bufferBytes);
        return conn.getBufferedMutator(params);
    }

    private static Put narrowPut(Reading r, Counters c) {
        Put put = new Put(Rows.narrowKey(r.device, r.ts));
        long tsMs = r.ts * 1000;
        byte[] v = Rows.value(r.value);
        put.addColumn(Rows.FAMILY, Rows.VALUE, tsMs, v);
        c.bytes += put.getRow().length + v.length;
        if (!"{}".equals(r.extra)) {
            byte[] x = r.extra.getBytes(StandardCharsets.UTF_8);
            put.addColumn(Rows.FAMILY, Rows.EXTRA, tsMs, x);
            c.bytes += x.length;
        }
        c.narrowRows++;
        return put;
    }

    private static void writeHour(BufferedMutator hourly, long hour, HashMap<String, HourState> devices,
            Counters c) throws IOException {
        long tsMs = Rows.wideCellTsMs(hour);
        List<Put> puts = new ArrayList<>(devices.size());
        for (Map.Entry<String, HourState> e : devices.entrySet()) {
            HourState h = e.getValue();
            Put put = new Put(Rows.wideKey(e.getKey(), hour));
            long bytes = put.getRow().length;
            for (int i = 0; i < h.count; i++) {
                byte[] v = Rows.value(h.values[i]);
                put.addColumn(Rows.FAMILY, Rows.POINT_QUALIFIERS[h.offsets[i]], tsMs, v);
                bytes += v.length;
            }
            byte[][] summary = {
                Long.toString(h.count).getBytes(StandardCharsets.US_ASCII),
                Rows.value(h.min), Rows.value(h.max), Rows.value(h.sum()),
                Rows.value(h.first), Rows.value(h.last),
            };
            for (int i = 0; i < summary.length; i++) {
                put.addColumn(Rows.FAMILY, Rows.SUMMARY_QUALIFIERS[i], tsMs, summary[i]);
                bytes += summary[i].length;
            }
            c.bytes += bytes;
            c.wideRows++;
            c.wideCells += h.count + summary.length;
            puts.add(put);
        }
        hourly.mutate(puts);
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
     * Prints, per table and for all three, the SHA-256 over every visible cell in scan order:
     * row, family, qualifier, timestamp and value, each length-prefixed. Only cells stamped in
     * [fromMs, toMs): on a shared HBase, what another run writes at other times stays out.
     */
    private static void digest(Connection conn, long fromMs, long toMs)
            throws IOException, NoSuchAlgorithmException {
        MessageDigest all = MessageDigest.getInstance("SHA-256");
        StringBuilder out = new StringBuilder("{");
        for (String name : Rows.TABLES) {
            MessageDigest table = MessageDigest.getInstance("SHA-256");
            long rows = 0;
            long cells = 0;
            Scan scan = new Scan().setCaching(2000).setCacheBlocks(false).setTimeRange(fromMs, toMs);
            try (Table t = conn.getTable(TableName.valueOf(name));
                    ResultScanner scanner = t.getScanner(scan)) {
                for (Result result : scanner) {
                    rows++;
                    for (Cell cell : result.rawCells()) {
                        cells++;
                        feed(table, cell.getRowArray(), cell.getRowOffset(), cell.getRowLength());
                        feed(table, cell.getFamilyArray(), cell.getFamilyOffset(), cell.getFamilyLength());
                        feed(table, cell.getQualifierArray(), cell.getQualifierOffset(),
                                cell.getQualifierLength());
                        long ts = cell.getTimestamp();
                        for (int i = 7; i >= 0; i--) {
                            table.update((byte) (ts >>> (8 * i)));
                        }
                        feed(table, cell.getValueArray(), cell.getValueOffset(), cell.getValueLength());
                    }
                }
            }
            byte[] d = table.digest();
            all.update(d);
            out.append(String.format(Locale.ROOT, "\"%s\":{\"rows\":%d,\"cells\":%d,\"sha256\":\"%s\"},",
                    name, rows, cells, HexFormat.of().formatHex(d)));
        }
        out.append("\"all\":\"").append(HexFormat.of().formatHex(all.digest())).append("\"}");
        System.out.println(out);
    }

    private static void feed(MessageDigest md, byte[] array, int offset, int length) {
        md.update((byte) (length >>> 24));
        md.update((byte) (length >>> 16));
        md.update((byte) (length >>> 8));
        md.update((byte) length);
        md.update(array, offset, length);
    }

    /** Empties the tables, keeping their region boundaries (missing tables are skipped). */
    private static void truncate(Connection conn, String[] tables) throws IOException {
        try (Admin admin = conn.getAdmin()) {
            for (String name : tables) {
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

    // ------------------------------------------------------------------ compact, family

    /**
     * Flushes each table's memstores to store files, asks for a major compaction and waits until
     * the master reports no compaction of the table (polled every second). A major compaction is
     * queued after the call returns, so the state is polled until it has been seen running, or
     * for 20 s if it never shows (a table already in one file per store). Prints one line per
     * table with the seconds it took.
     */
    private static void compact(Connection conn, String[] tables) throws IOException, InterruptedException {
        try (Admin admin = conn.getAdmin()) {
            for (String name : tables) {
                TableName table = TableName.valueOf(name);
                long started = System.nanoTime();
                admin.flush(table);
                admin.majorCompact(table);
                boolean seen = false;
                while (true) {
                    Thread.sleep(1000);
                    CompactionState state = admin.getCompactionState(table);
                    double secs = (System.nanoTime() - started) / 1e9;
                    if (state != CompactionState.NONE) {
                        seen = true;
                    } else if (seen || secs > 20) {
                        break;
                    }
                }
                System.out.printf(Locale.ROOT, "{\"table\":\"%s\",\"flush_compact_s\":%.1f}%n", name,
                        (System.nanoTime() - started) / 1e9);
            }
        }
    }

    /** Sets a family's data block encoding and block size (the table stays online). */
    private static void family(Connection conn, String name, String family, String encoding, int blockBytes)
            throws IOException {
        try (Admin admin = conn.getAdmin()) {
            TableName table = TableName.valueOf(name);
            ColumnFamilyDescriptor have = admin.getDescriptor(table).getColumnFamily(Bytes.toBytes(family));
            if (have == null) {
                throw new IOException("table " + name + " has no family " + family);
            }
            admin.modifyColumnFamily(table, ColumnFamilyDescriptorBuilder.newBuilder(have)
                    .setDataBlockEncoding(DataBlockEncoding.valueOf(encoding))
                    .setBlocksize(blockBytes)
                    .build());
            ColumnFamilyDescriptor now = admin.getDescriptor(table).getColumnFamily(Bytes.toBytes(family));
            System.out.printf(Locale.ROOT, "{\"table\":\"%s\",\"family\":\"%s\",\"encoding\":\"%s\",\"block_bytes\":%d}%n",
                    name, family, now.getDataBlockEncoding(), now.getBlocksize());
        }
    }
}
