package hourglass.bench.hbase;

/** A decoded reading, as hourglass's {@code pipeline::reading::Reading}. */
final class Reading {
    String device;
    /** Event time, epoch seconds. */
    long ts;
    double value;
    /** The other fields as compact JSON with sorted keys: what the narrow row's t:x stores. */
    String extra;
    /** The reading's own {@code room} field, or null. */
    String room;
}
