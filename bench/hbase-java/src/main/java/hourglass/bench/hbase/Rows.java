package hourglass.bench.hbase;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;

/** The tables, row keys, qualifiers and cell values hourglass writes (pipeline/src/codec/). */
final class Rows {
    static final String NARROW_TABLE = "ts_metric";
    static final String HOURLY_TABLE = "ts_metric_hourly";
    static final String ROOM_TABLE = "ts_room_latest";
    static final String[] TABLES = {NARROW_TABLE, HOURLY_TABLE, ROOM_TABLE};
    static final byte[] FAMILY = {'t'};
    static final byte[] VALUE = {'v'};
    static final byte[] EXTRA = {'x'};
    static final byte[] OWN_ROOM = {'o'};
    static final int SALT_BUCKETS = 16;
    static final long HOUR_SECS = 3600;
    static final byte[][] SUMMARY_QUALIFIERS = bytes("n", "min", "max", "sum", "first", "last");
    /** The qualifiers of the points, t:0 .. t:3599, made once. */
    static final byte[][] POINT_QUALIFIERS = new byte[(int) HOUR_SECS][];

    static {
        for (int i = 0; i < HOUR_SECS; i++) {
            POINT_QUALIFIERS[i] = Integer.toString(i).getBytes(StandardCharsets.US_ASCII);
        }
    }

    private Rows() {}

    private static byte[][] bytes(String... names) {
        byte[][] out = new byte[names.length][];
        for (int i = 0; i < names.length; i++) {
            out[i] = names[i].getBytes(StandardCharsets.US_ASCII);
        }
        return out;
    }

    /** hourglass's salt_bucket: {@code Math.abs(device.hashCode() % 16)}. */
    static int saltBucket(String device) {
        return Math.abs(device.hashCode() % SALT_BUCKETS);
    }

    /** The salted narrow row key {@code <bucket>_<device>_<Long.MAX_VALUE - ts>}, 19 digits. */
    static byte[] narrowKey(String device, long ts) {
        int n = device.length();
        byte[] key = new byte[3 + n + 1 + 19];
        int bucket = saltBucket(device);
        key[0] = (byte) ('0' + bucket / 10);
        key[1] = (byte) ('0' + bucket % 10);
        key[2] = '_';
        for (int i = 0; i < n; i++) {
            key[3 + i] = (byte) device.charAt(i);
        }
        key[3 + n] = '_';
        long reversed = Long.MAX_VALUE - ts;
        for (int i = key.length - 1; i > 3 + n; i--) {
            key[i] = (byte) ('0' + reversed % 10);
            reversed /= 10;
        }
        return key;
    }

    /** The wide row key {@code <device>_<hourStart>}. */
    static byte[] wideKey(String device, long hourStart) {
        return (device + "_" + hourStart).getBytes(StandardCharsets.US_ASCII);
    }

    /** The room view's row key {@code <room>_<device>}. */
    static byte[] roomKey(String room, String device) {
        return (room + "_" + device).getBytes(StandardCharsets.US_ASCII);
    }

    /** The timestamp of every cell of a wide row: the hour's last millisecond. */
    static long wideCellTsMs(long hourStart) {
        return (hourStart + HOUR_SECS) * 1000 - 1;
    }

    /**
     * The text of a metric value, as hourglass's format_value: Rust's shortest round-trip text
     * ({@code 25.5}, {@code -3}, {@code -0}), plain for 1e-5 <= |v| < 1e16, {@code 1.5e-7}
     * outside. Java 17's Double.toString is the shortest text for the values sensors send; the
     * digest of run.sh would show a value where it is not.
     */
    static byte[] value(double v) {
        double a = Math.abs(v);
        String text;
        if (a == 0.0) {
            text = Double.doubleToRawLongBits(v) < 0 ? "-0" : "0";
        } else if (a >= 1e-5 && a < 1e16) {
            if (v == Math.rint(v)) {
                text = Long.toString((long) v);
            } else {
                text = Double.toString(v);
                if (text.indexOf('E') >= 0) {
                    text = BigDecimal.valueOf(v).toPlainString();
                }
            }
        } else {
            text = Double.toString(v).replace("E", "e").replace(".0e", "e");
        }
        return text.getBytes(StandardCharsets.US_ASCII);
    }
}
