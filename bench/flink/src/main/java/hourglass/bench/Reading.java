package hourglass.bench;

/** A decoded reading, as hourglass's {@code pipeline::reading::Reading}. A Flink POJO. */
public final class Reading {
    public String device;
    /** Event time, epoch seconds. */
    public long ts;
    public double value;
    /** The other fields as compact JSON with sorted keys, what the narrow row's t:x stores. */
    public String extra;
    /** The room, or null. */
    public String room;

    public Reading() {}
}
