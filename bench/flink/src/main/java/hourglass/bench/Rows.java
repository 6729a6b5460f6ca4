package hourglass.bench;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;

/** The row keys and cell values hourglass writes (pipeline/src/codec/), as bytes. */
final class Rows {
    static final int SALT_BUCKETS = 16;
    static final long HOUR_SECS = 3600;
    static final String[] SUMMARY_QUALIFIERS = {"n", "min", "max", "sum", "first", "last"};

    private Rows() {}

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

    /** The text of a metric value: shortest decimal, integers without ".0", as format_value. */
    static byte[] value(double v) {
        double a = Math.abs(v);
        String text;
        if (a == 0.0 || (a >= 1e-5 && a < 1e16)) {
            if (v == Math.rint(v)) {
                text = Long.toString((long) v);
            } else {
                text = Double.toString(v);
                if (text.indexOf('E') >= 0) {
                    text = BigDecimal.valueOf(v).toPlainString();
                }
            }
        } else {
            text = Double.toString(v).replace("E", "e");
        }
        return text.getBytes(StandardCharsets.US_ASCII);
    }

    /** A narrow row: the key and its t:v and t:x cells (t:x null when there are no fields). */
    public static final class NarrowRow {
        public byte[] key;
        public byte[] v;
        public byte[] x;

        public NarrowRow() {}

        static NarrowRow of(Reading r) {
            NarrowRow row = new NarrowRow();
            row.key = narrowKey(r.device, r.ts);
            row.v = value(r.value);
            row.x = "{}".equals(r.extra) ? null : r.extra.getBytes(StandardCharsets.UTF_8);
            return row;
        }

        long bytes() {
            return key.length + v.length + (x == null ? 0 : x.length);
        }
    }

    /** Why a pane was emitted, as hourglass's Firing. */
    enum Firing {
        EARLY,
        ON_TIME,
        LATE
    }

    /** A wide-row write: one pane's new points and the hour's six summary cells. */
    public static final class WideRow {
        public byte[] key;
        public Firing firing;
        /** Qualifiers then values of the points, interleaved. */
        public byte[][] points;
        /** Values of the summary cells, in SUMMARY_QUALIFIERS order. */
        public byte[][] summary;

        public WideRow() {}

        int pointCells() {
            return points.length / 2;
        }

        long bytes() {
            long n = key.length;
            for (byte[] b : points) {
                n += b.length;
            }
            for (byte[] b : summary) {
                n += b.length;
            }
            return n;
        }
    }
}
