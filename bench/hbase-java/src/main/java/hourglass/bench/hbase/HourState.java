package hourglass.bench.hbase;

import java.util.Arrays;

/**
 * One device's hour, as hourglass's HourAccumulator (pipeline/src/summary.rs): the seconds seen
 * (a repeated second is a duplicate: the first value stays), the accepted points, and the
 * summary, whose sum is the exactly rounded sum of Shewchuk's partials.
 */
final class HourState {
    private final long[] seen = new long[(int) ((Rows.HOUR_SECS + 63) / 64)];
    short[] offsets = new short[16];
    double[] values = new double[16];
    int count;
    double min;
    double max;
    private double[] partials = new double[4];
    private int nPartials;
    private long firstTs = Long.MAX_VALUE;
    private long lastTs = -1;
    double first;
    double last;

    /** Takes a reading; false for a duplicate second. */
    boolean accept(long ts, double v) {
        int offset = (int) Math.floorMod(ts, Rows.HOUR_SECS);
        long bit = 1L << (offset & 63);
        if ((seen[offset >>> 6] & bit) != 0) {
            return false;
        }
        seen[offset >>> 6] |= bit;
        if (count == offsets.length) {
            offsets = Arrays.copyOf(offsets, count * 2);
            values = Arrays.copyOf(values, count * 2);
        }
        offsets[count] = (short) offset;
        values[count] = v;
        if (count == 0) {
            min = v;
            max = v;
        } else {
            min = Math.min(min, v);
            max = Math.max(max, v);
        }
        count++;
        addExact(v);
        if (ts < firstTs) {
            firstTs = ts;
            first = v;
        }
        if (ts >= lastTs) {
            lastTs = ts;
            last = v;
        }
        return true;
    }

    /** The partials summed in order from -0.0, as Rust's {@code Iterator<f64>::sum}. */
    double sum() {
        double s = -0.0;
        for (int i = 0; i < nPartials; i++) {
            s += partials[i];
        }
        return s;
    }

    private void addExact(double x) {
        int i = 0;
        for (int j = 0; j < nPartials; j++) {
            double y = partials[j];
            if (Math.abs(x) < Math.abs(y)) {
                double t = x;
                x = y;
                y = t;
            }
            double hi = x + y;
            double lo = y - (hi - x);
            if (lo != 0.0) {
                partials[i++] = lo;
            }
            x = hi;
        }
        if (i == partials.length) {
            partials = Arrays.copyOf(partials, i * 2);
        }
        partials[i++] = x;
        nPartials = i;
    }
}
