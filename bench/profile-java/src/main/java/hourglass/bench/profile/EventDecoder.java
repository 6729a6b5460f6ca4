package hourglass.bench.profile;

import java.io.CharConversionException;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.time.format.DateTimeFormatter;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The envelope of a tag event line, as hourglass's {@code decode_event}
 * (jobs/profile/src/event.rs): a JSON object with {@code user_id} (a string of 1-64 bytes of
 * {@code A-Z a-z 0-9 . : -}, or a non-negative integer taken as its decimal text), {@code ts}
 * (integer epoch seconds 0..9999999999, or RFC 3339) and {@code tags} (an object of at most
 * 256 codes). Other fields are ignored; a repeated key keeps its last value, as serde_json.
 * The tags' values are checked later, against the registry ({@link Values}).
 */
final class EventDecoder {
    static final int MAX_LINE_BYTES = 64 * 1024;
    static final long MAX_TS = 9_999_999_999L;
    static final int MAX_TAGS = 256;
    private static final BigInteger U64_MAX = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

    private final ObjectMapper mapper =
            new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
    private final CharsetDecoder utf8 = StandardCharsets.UTF_8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPORT)
            .onUnmappableCharacter(CodingErrorAction.REPORT);

    /** A decoded event: whose tags, when, and the raw values. */
    static final class Event {
        String user;
        long ts;
        ObjectNode tags;
    }

    Event decode(byte[] raw, Event into) throws Rejection {
        if (raw.length > MAX_LINE_BYTES) {
            throw Rejection.TOO_LONG;
        }
        if (!ascii(raw)) {
            try {
                utf8.reset().decode(ByteBuffer.wrap(raw));
            } catch (CharacterCodingException e) {
                throw Rejection.NOT_UTF8;
            }
        }
        JsonNode tree;
        try {
            tree = mapper.readTree(raw);
        } catch (CharConversionException e) {
            throw Rejection.NOT_UTF8;
        } catch (IOException e) {
            throw Rejection.INVALID_JSON;
        }
        if (tree == null || tree.isMissingNode()) {
            throw Rejection.INVALID_JSON;
        }
        if (!finite(tree)) {
            // serde_json refuses a number out of the f64 range as invalid JSON; Jackson reads
            // it as an infinity.
            throw Rejection.INVALID_JSON;
        }
        if (!(tree instanceof ObjectNode fields)) {
            throw Rejection.NOT_AN_OBJECT;
        }
        JsonNode user = fields.get("user_id");
        if (user == null) {
            throw Rejection.MISSING_FIELD;
        }
        String id;
        if (user.isTextual()) {
            id = user.textValue();
        } else if (user.isIntegralNumber()) {
            BigInteger n = user.bigIntegerValue();
            if (n.signum() < 0 || n.compareTo(U64_MAX) > 0) {
                throw Rejection.BAD_FIELD;
            }
            id = n.toString();
        } else {
            throw Rejection.BAD_FIELD;
        }
        if (!validUserId(id)) {
            throw Rejection.BAD_FIELD;
        }
        JsonNode ts = fields.get("ts");
        if (ts == null) {
            throw Rejection.MISSING_FIELD;
        }
        long seconds = parseTs(ts);
        JsonNode tags = fields.get("tags");
        if (tags == null) {
            throw Rejection.MISSING_FIELD;
        }
        if (!(tags instanceof ObjectNode tagObject)) {
            throw Rejection.BAD_FIELD;
        }
        if (tagObject.size() > MAX_TAGS) {
            throw Rejection.TOO_MANY_TAGS;
        }
        into.user = id;
        into.ts = seconds;
        into.tags = tagObject;
        return into;
    }

    private static boolean ascii(byte[] raw) {
        for (byte b : raw) {
            if (b < 0) {
                return false;
            }
        }
        return true;
    }

    private static boolean finite(JsonNode node) {
        if (node.isContainerNode()) {
            for (JsonNode child : node) {
                if (!finite(child)) {
                    return false;
                }
            }
            return true;
        }
        return !node.isFloatingPointNumber() || Double.isFinite(node.doubleValue());
    }

    /** hourglass's pipeline::json::event_time. */
    private static long parseTs(JsonNode ts) throws Rejection {
        long seconds;
        if (ts.isIntegralNumber()) {
            if (ts.canConvertToLong()) {
                seconds = ts.longValue();
            } else {
                // serde_json's as_i64 fails above i64 (read as too large) and below it.
                throw Rejection.BAD_FIELD;
            }
        } else if (ts.isTextual()) {
            try {
                seconds = OffsetDateTime.parse(ts.textValue(), DateTimeFormatter.ISO_OFFSET_DATE_TIME)
                        .toEpochSecond();
            } catch (RuntimeException e) {
                throw Rejection.BAD_FIELD;
            }
        } else {
            throw Rejection.BAD_FIELD;
        }
        if (seconds < 0 || seconds > MAX_TS) {
            throw Rejection.BAD_FIELD;
        }
        return seconds;
    }

    /** hourglass's validate_user_id: 1-64 bytes of A-Z a-z 0-9 . : - ('_' separates key parts). */
    static boolean validUserId(String id) {
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
}
