package hourglass.bench.profile;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.client.Put;

/**
 * A sink without HBase, to check the peer against hourglass's embedded store: keeps, per
 * column, the newest cell written (of two with the same timestamp, the later write), as an
 * HBase Get shows it, and prints them as {@code hourglass tables dump} does, each line led by
 * its table: {@code table<TAB>row<TAB>family:qualifier<TAB>ts_ms<TAB>value}, in key order.
 */
final class Plan implements ProfileJava.Sink {
    /** Cells by table, then by row + family + qualifier (row keys hold no NUL). */
    private final Map<String, TreeMap<byte[], Cell>> tables = new TreeMap<>();

    @Override
    public void write(UserMerge.Flushed f) {
        apply(ProfileJava.PROFILE_TABLE, f.profile);
        apply(ProfileJava.HISTORY_TABLE, f.history);
    }

    private void apply(String table, List<Put> puts) {
        TreeMap<byte[], Cell> cells = tables.computeIfAbsent(table, t -> new TreeMap<>(Arrays::compareUnsigned));
        for (Put put : puts) {
            for (List<Cell> family : put.getFamilyCellMap().values()) {
                for (Cell cell : family) {
                    byte[] key = concat(CellUtil.cloneRow(cell), CellUtil.cloneFamily(cell),
                            CellUtil.cloneQualifier(cell));
                    Cell old = cells.get(key);
                    if (old == null || cell.getTimestamp() >= old.getTimestamp()) {
                        cells.put(key, cell);
                    }
                }
            }
        }
    }

    private static byte[] concat(byte[] row, byte[] family, byte[] qualifier) {
        byte[] key = new byte[row.length + 1 + family.length + 1 + qualifier.length];
        System.arraycopy(row, 0, key, 0, row.length);
        System.arraycopy(family, 0, key, row.length + 1, family.length);
        System.arraycopy(qualifier, 0, key, row.length + 2 + family.length, qualifier.length);
        return key;
    }

    void print(PrintStream out) {
        for (Map.Entry<String, TreeMap<byte[], Cell>> t : tables.entrySet()) {
            for (Cell c : t.getValue().values()) {
                out.println(t.getKey() + "\t" + text(CellUtil.cloneRow(c)) + "\t" + text(CellUtil.cloneFamily(c))
                        + ":" + text(CellUtil.cloneQualifier(c)) + "\t" + c.getTimestamp() + "\t"
                        + text(CellUtil.cloneValue(c)));
            }
        }
        out.flush();
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    @Override
    public void close() {}
}
