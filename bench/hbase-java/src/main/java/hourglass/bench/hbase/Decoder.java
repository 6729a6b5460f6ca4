package hourglass.bench.hbase;

import java.time.OffsetDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The decode of hourglass's {@code pipeline/src/decode.rs}: the same accepted lines, the same
 * rejected ones (reasons worded alike, not byte for byte).
 *
 * <p>Like serde_json it builds the whole JSON tree, refuses trailing content, NaN and Infinity,
 * and keeps the other fields as compact JSON with sorted keys (the narrow row's t:x).
 *
 * <p>The same class as bench/flink's: the two benchmarks build separately.
 */
final class Decoder {
    static final int MAX_LINE_BYTES = 64 * 1024;
    static final long MAX_TS = 9_999_999_999L;

    private final ObjectMapper mapper =
            new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
    private final String metric;

    Decoder(String metric) {
        this.metric = metric;
    }

    /** Why a line was rejected; thrown by {@link #decode} and never escaping the job. */
    static final class Rejection extends Exception {
        private static final long serialVersionUID = 1L;

        Rejection(String reason) {
            super(reason, null, false, false);
        }
    }

    /** Decodes {@code raw} into {@code into} (reused between lines), or throws why not. */
    Reading decode(byte[] raw, Reading into) throws Rejection {
        if (raw.length > MAX_LINE_BYTES) {
            throw new Rejection("too_long");
        }
        JsonNode tree;
        try {
            // Jackson's byte parser refuses invalid UTF-8 as serde_json's from_str's check does.
            tree = mapper.readTree(raw);
        } catch (java.io.CharConversionException e) {
            throw new Rejection("not_utf8");
        } catch (java.io.IOException e) {
            throw new Rejection("invalid_json");
        }
        if (tree == null || tree.isMissingNode()) {
            throw new Rejection("invalid_json");
        }
        if (!(tree instanceof ObjectNode fields)) {
            throw new Rejection("not_an_object");
        }

        JsonNode device = fields.remove("device");
        if (device == null) {
            throw new Rejection("missing_field device");
        }
        if (!device.isTextual() || !validId(device.textValue())) {
            throw new Rejection("bad_field device");
        }

        JsonNode ts = fields.remove("ts");
        if (ts == null) {
            throw new Rejection("missing_field ts");
        }
        long seconds = parseTs(ts);

        JsonNode value = fields.remove(metric);
        if (value == null) {
            throw new Rejection("missing_field " + metric);
        }
        if (!value.isNumber()) {
            throw new Rejection("bad_field " + metric);
        }
        double v = value.doubleValue();
        if (!Double.isFinite(v)) {
            throw new Rejection("bad_field " + metric);
        }

        JsonNode room = fields.get("room");
        String roomId = null;
        if (room != null && !room.isNull()) {
            if (!room.isTextual() || !validId(room.textValue())) {
                throw new Rejection("bad_field room");
            }
            roomId = room.textValue();
        }

        into.device = device.textValue();
        into.ts = seconds;
        into.value = v;
        into.extra = compact(fields);
        into.room = roomId;
        return into;
    }

    private static long parseTs(JsonNode ts) throws Rejection {
        long seconds;
        if (ts.isIntegralNumber()) {
            // serde_json's as_i64, with a u64 above i64 read as "too large" like hourglass does.
            if (ts.canConvertToLong()) {
                seconds = ts.longValue();
            } else if (ts.bigIntegerValue().signum() > 0) {
                seconds = Long.MAX_VALUE;
            } else {
                throw new Rejection("bad_field ts");
            }
        } else if (ts.isTextual()) {
            try {
                seconds = OffsetDateTime.parse(ts.textValue(), DateTimeFormatter.ISO_OFFSET_DATE_TIME)
                        .toEpochSecond();
            } catch (RuntimeException e) {
                throw new Rejection("bad_field ts");
            }
        } else {
            throw new Rejection("bad_field ts");
        }
        if (seconds < 0 || seconds > MAX_TS) {
            throw new Rejection("bad_field ts");
        }
        return seconds;
    }

    /** hourglass's validate_device: 1-64 bytes of [A-Za-z0-9.:-]. */
    static boolean validId(String id) {
        int n = id.length();
        if (n == 0 || n > 64) {
            return false;
        }
        for (int i = 0; i < n; i++) {
            char c = id.charAt(i);
            boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || c == '.' || c == ':' || c == '-';
            if (!ok) {
                return false;
            }
        }
        return true;
    }

    private String compact(ObjectNode fields) {
        if (fields.isEmpty()) {
            return "{}";
        }
        List<String> names = new ArrayList<>(fields.size());
        for (Iterator<String> it = fields.fieldNames(); it.hasNext(); ) {
            names.add(it.next());
        }
        names.sort(null);
        ObjectNode sorted = mapper.createObjectNode();
        for (String name : names) {
            sorted.set(name, fields.get(name));
        }
        try {
            return mapper.writeValueAsString(sorted);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            // Serialising a tree that was just parsed cannot fail.
            return "{}";
        }
    }
}
