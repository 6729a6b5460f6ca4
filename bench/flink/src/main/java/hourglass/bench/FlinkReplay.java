package hourglass.bench;

import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.triggers.Trigger;
import org.apache.flink.streaming.api.windowing.triggers.TriggerResult;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * The computation of {@code hourglass replay} as a Flink DataStream job, for the benchmark in
 * docs/BENCHMARKS.md: decode (bad lines to a side output, counted), narrow rows, and a 1 h
 * tumbling event-time window per device (30 s bounded out-of-orderness, 1 h allowed lateness,
 * late side output, early firings every 10 s of processing time) writing wide rows with the
 * hour's summary.
 *
 * <p>Flink has no embedded store: the sinks build every row's bytes and count them, and store
 * nothing. hourglass's room view is not computed. Usage: {@code FlinkReplay FILE [PARALLELISM]};
 * prints one JSON line of counters.
 */
public final class FlinkReplay {
    static final long BOUND_MS = 30_000;
    static final Duration LATENESS = Duration.ofHours(1);
    static final long EARLY_FIRE_MS = 10_000;

    /** The job's counters. Local execution runs every task in this JVM, so statics add up. */
    static final AtomicLong READ = new AtomicLong();
    static final AtomicLong OK = new AtomicLong();
    static final AtomicLong REJECTED = new AtomicLong();
    static final AtomicLong LATE = new AtomicLong();
    static final AtomicLong NARROW_ROWS = new AtomicLong();
    static final AtomicLong WIDE_CELLS = new AtomicLong();
    static final AtomicLong PANES_EARLY = new AtomicLong();
    static final AtomicLong PANES_ON_TIME = new AtomicLong();
    static final AtomicLong PANES_LATE = new AtomicLong();
    static final AtomicLong BYTES = new AtomicLong();

    static final OutputTag<String> REJECTS = new OutputTag<>("rejected", Types.STRING);
    static final OutputTag<Reading> LATE_READINGS =
            new OutputTag<>("late", Types.POJO(Reading.class));

    private FlinkReplay() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: FlinkReplay RECORDING.jsonl [PARALLELISM]: a recording "
                    + "written by `hourglass generate --out FILE.jsonl` (uncompressed)");
            System.exit(2);
        }
        String file = args[0];
        int parallelism = args.length > 1 ? Integer.parseInt(args[1]) : 2;

        Configuration conf = new Configuration();
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        conf.set(CoreOptions.DEFAULT_PARALLELISM, parallelism);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);

        // One reader: the file is read in order, as event time needs (a byte-range split would
        // start half the job an hour later in event time); decoding runs on every subtask.
        FileSource<byte[]> source =
                FileSource.forRecordStreamFormat(new ByteLineFormat(), new Path(file)).build();
        DataStream<byte[]> lines = env
                .fromSource(source, WatermarkStrategy.noWatermarks(), "recording")
                .setParallelism(1);

        SingleOutputStreamOperator<Reading> decoded =
                lines.rebalance().process(new Decode()).name("decode");
        decoded.getSideOutput(REJECTS).sinkTo(new CountingSink<>(s -> {
            REJECTED.incrementAndGet();
            return s.length();
        })).name("dead letters");

        DataStream<Reading> readings = decoded.assignTimestampsAndWatermarks(
                WatermarkStrategy.<Reading>forGenerator(ctx -> new SecondsWatermarks())
                        .withTimestampAssigner((r, previous) -> r.ts * 1000));

        readings.map(Rows.NarrowRow::of).name("narrow rows")
                .sinkTo(new CountingSink<>(row -> {
                    NARROW_ROWS.incrementAndGet();
                    return row.bytes();
                })).name("narrow table");

        SingleOutputStreamOperator<Rows.WideRow> wide = readings
                .keyBy(r -> r.device)
                .window(TumblingEventTimeWindows.of(Duration.ofHours(1)))
                .allowedLateness(LATENESS)
                .sideOutputLateData(LATE_READINGS)
                .trigger(new EarlyThenEventTime(EARLY_FIRE_MS))
                .aggregate(new Accumulate(), new Panes())
                .name("hourly window");
        wide.sinkTo(new CountingSink<>(row -> {
            WIDE_CELLS.addAndGet(row.pointCells());
            (switch (row.firing) {
                case EARLY -> PANES_EARLY;
                case ON_TIME -> PANES_ON_TIME;
                case LATE -> PANES_LATE;
            }).incrementAndGet();
            return row.bytes();
        })).name("wide table");
        wide.getSideOutput(LATE_READINGS).sinkTo(new CountingSink<>(r -> {
            LATE.incrementAndGet();
            return r.device.length() + 16;
        })).name("late readings");

        long began = System.nanoTime();
        env.execute("hourglass replay peer");
        double elapsed = (System.nanoTime() - began) / 1e9;
        System.out.println(String.format(Locale.ROOT,
                "{\"read\":%d,\"ok\":%d,\"rejected\":%d,\"late_dropped\":%d,\"narrow_rows\":%d,"
                        + "\"wide_cells\":%d,\"panes_early\":%d,\"panes_on_time\":%d,"
                        + "\"panes_late\":%d,\"bytes\":%d,\"job_s\":%.3f,\"readings_per_s\":%.0f}",
                READ.get(), OK.get(), REJECTED.get(), LATE.get(), NARROW_ROWS.get(),
                WIDE_CELLS.get(), PANES_EARLY.get(), PANES_ON_TIME.get(), PANES_LATE.get(),
                BYTES.get(), elapsed, READ.get() / Math.max(elapsed, 1e-9)));
    }

    /** Lines to readings; rejected lines, with their reason, to the REJECTS side output. */
    static final class Decode extends ProcessFunction<byte[], Reading> {
        private static final long serialVersionUID = 1L;
        private transient Decoder decoder;
        private transient long read;
        private transient long ok;

        @Override
        public void processElement(byte[] line, Context ctx, Collector<Reading> out) {
            if (decoder == null) {
                decoder = new Decoder("temp");
            }
            read++;
            try {
                // A fresh Reading: the watermark assigner and two consumers follow in one chain.
                out.collect(decoder.decode(line, new Reading()));
                ok++;
            } catch (Decoder.Rejection e) {
                ctx.output(REJECTS, e.getMessage() + "\t" + new String(line,
                        java.nio.charset.StandardCharsets.ISO_8859_1));
            }
        }

        @Override
        public void close() {
            READ.addAndGet(read);
            OK.addAndGet(ok);
        }
    }

    /**
     * Bounded out-of-orderness (watermark = newest event time − 30 s − 1 ms), emitted as soon
     * as the newest event time enters a new second, as hourglass's watermark moves with every
     * line: a periodic watermark would lag by up to its period of input and let through lines
     * hourglass counts as late.
     */
    static final class SecondsWatermarks implements WatermarkGenerator<Reading> {
        private long newest = Long.MIN_VALUE + BOUND_MS + 1;

        @Override
        public void onEvent(Reading r, long timestamp, WatermarkOutput out) {
            if (timestamp > newest) {
                newest = timestamp;
                out.emitWatermark(new Watermark(newest - BOUND_MS - 1));
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput out) {}
    }

    /**
     * Fires when the watermark passes the hour (as EventTimeTrigger, and at once for a reading
     * arriving later but within the lateness), and early every 10 s of processing time while
     * readings keep coming, on 10 s boundaries of the clock as hourglass's early firings.
     */
    static final class EarlyThenEventTime extends Trigger<Object, TimeWindow> {
        private static final long serialVersionUID = 1L;
        private final long period;
        private final ValueStateDescriptor<Long> early =
                new ValueStateDescriptor<>("early-timer", Types.LONG);

        EarlyThenEventTime(long period) {
            this.period = period;
        }

        @Override
        public TriggerResult onElement(Object e, long ts, TimeWindow w, TriggerContext ctx)
                throws Exception {
            if (w.maxTimestamp() <= ctx.getCurrentWatermark()) {
                return TriggerResult.FIRE;
            }
            ctx.registerEventTimeTimer(w.maxTimestamp());
            ValueState<Long> timer = ctx.getPartitionedState(early);
            if (timer.value() == null) {
                long now = ctx.getCurrentProcessingTime();
                long at = now - now % period + period;
                ctx.registerProcessingTimeTimer(at);
                timer.update(at);
            }
            return TriggerResult.CONTINUE;
        }

        @Override
        public TriggerResult onProcessingTime(long time, TimeWindow w, TriggerContext ctx)
                throws Exception {
            ctx.getPartitionedState(early).clear();
            return w.maxTimestamp() > ctx.getCurrentWatermark()
                    ? TriggerResult.FIRE
                    : TriggerResult.CONTINUE;
        }

        @Override
        public TriggerResult onEventTime(long time, TimeWindow w, TriggerContext ctx) {
            return time == w.maxTimestamp() ? TriggerResult.FIRE : TriggerResult.CONTINUE;
        }

        @Override
        public void clear(TimeWindow w, TriggerContext ctx) throws Exception {
            ValueState<Long> timer = ctx.getPartitionedState(early);
            Long at = timer.value();
            if (at != null) {
                ctx.deleteProcessingTimeTimer(at);
            }
            timer.clear();
            ctx.deleteEventTimeTimer(w.maxTimestamp());
        }
    }

    /** The hour's state is its own result: panes read it without copying it. */
    static final class Accumulate implements AggregateFunction<Reading, HourState, HourState> {
        private static final long serialVersionUID = 1L;

        @Override
        public HourState createAccumulator() {
            return new HourState();
        }

        @Override
        public HourState add(Reading r, HourState acc) {
            acc.accept(r.ts, r.value);
            return acc;
        }

        @Override
        public HourState getResult(HourState acc) {
            return acc;
        }

        @Override
        public HourState merge(HourState a, HourState b) {
            throw new UnsupportedOperationException("tumbling windows never merge");
        }
    }

    /**
     * Emits a wide-row write holding the points accepted since the window's previous pane and
     * the whole hour's summary; nothing when there is no new point (a duplicate, or a firing
     * without input), as hourglass.
     */
    static final class Panes extends ProcessWindowFunction<HourState, Rows.WideRow, String, TimeWindow> {
        private static final long serialVersionUID = 1L;
        /** Points emitted so far; negative (−count − 1) once the on-time pane has fired. */
        private final ValueStateDescriptor<Integer> emitted =
                new ValueStateDescriptor<>("emitted", Types.INT);

        @Override
        public void process(String device, Context ctx, Iterable<HourState> states,
                Collector<Rows.WideRow> out) throws Exception {
            HourState s = states.iterator().next();
            ValueState<Integer> state = ctx.windowState().getState(emitted);
            Integer stored = state.value();
            boolean onTimeDone = stored != null && stored < 0;
            int done = stored == null ? 0 : (onTimeDone ? -stored - 1 : stored);
            boolean open = ctx.currentWatermark() < ctx.window().maxTimestamp();
            Rows.Firing firing = open ? Rows.Firing.EARLY
                    : (onTimeDone ? Rows.Firing.LATE : Rows.Firing.ON_TIME);
            boolean nowOnTimeDone = onTimeDone || !open;
            if (s.count > done) {
                long hour = ctx.window().getStart() / 1000;
                Rows.WideRow row = new Rows.WideRow();
                row.key = Rows.wideKey(device, hour);
                row.firing = firing;
                row.points = new byte[(s.count - done) * 2][];
                for (int i = done, j = 0; i < s.count; i++) {
                    row.points[j++] = Integer.toString(s.offsets[i]).getBytes(
                            java.nio.charset.StandardCharsets.US_ASCII);
                    row.points[j++] = Rows.value(s.values[i]);
                }
                row.summary = new byte[][] {
                    Integer.toString(s.count).getBytes(java.nio.charset.StandardCharsets.US_ASCII),
                    Rows.value(s.min), Rows.value(s.max), Rows.value(s.sum()),
                    Rows.value(s.first), Rows.value(s.last),
                };
                out.collect(row);
            }
            if (s.count > done || nowOnTimeDone != onTimeDone) {
                state.update(nowOnTimeDone ? -s.count - 1 : s.count);
            }
        }

        @Override
        public void clear(Context ctx) throws Exception {
            ctx.windowState().getState(emitted).clear();
        }
    }

    /** How many bytes a record would write; counted, then dropped. */
    interface Size<T> extends java.io.Serializable {
        long of(T record);
    }

    /** A sink that stores nothing: it counts the rows and the bytes they would write. */
    static final class CountingSink<T> implements Sink<T> {
        private static final long serialVersionUID = 1L;
        private final Size<T> size;

        CountingSink(Size<T> size) {
            this.size = size;
        }

        @Override
        public SinkWriter<T> createWriter(WriterInitContext context) {
            return new SinkWriter<T>() {
                private long bytes;

                @Override
                public void write(T record, Context ctx) {
                    bytes += size.of(record);
                }

                @Override
                public void flush(boolean endOfInput) {}

                @Override
                public void close() {
                    BYTES.addAndGet(bytes);
                }
            };
        }
    }
}
