package hourglass.bench;

import java.util.Arrays;

/**
 * One device's hour, as hourglass's HourAccumulator: the seconds seen (a repeated second is a
 * duplicate: the first value stays), the accepted points in arrival order (panes emit the ones
 * not emitted before), and the summary, with the exactly rounded sum of Shewchuk's partials.
 */
public final class HourState {
    public long[] seen = new long[(int) ((Rows.HOUR_SECS + 63) / 64)];
    public short[] offsets = new short[16];
    public double[] values = new double[16];
    public int count;
    public double min;
    public double max;
    public double[] partials = new double[4];
    public int nPartials;
    public long firstTs = Long.MAX_VALUE;
    public long lastTs = -1;
    public double first;
    public double last;

    public HourState() {}

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

    double sum() {
        double s = 0;
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
