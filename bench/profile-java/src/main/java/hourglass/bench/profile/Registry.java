package hourglass.bench.profile;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The tag registry read from the CSV that {@code hourglass profile generate --registry-out}
 * writes and {@code hourglass tags import} reads (header
 * {@code tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency}).
 *
 * <p>Read once at the start: hourglass reads its registry once per flush so that a status
 * change applies within one flush interval; a benchmark's registry does not change during a
 * run, so reading it again would only cost the peer time. As hourglass's import, fields are
 * trimmed and a code given twice keeps its first row.
 */
final class Registry {
    enum DataType { BOOLEAN, INT, FLOAT, STRING, MULTI_VALUE }

    enum ValueType { DIMENSION, STATISTIC, SHORT_TERM }

    enum Status { ONLINE, GRAY, OFFLINE }

    /** One tag's definition, what the merge needs of it. */
    static final class Tag {
        final String code;
        final byte[] codeBytes;
        final DataType dataType;
        final ValueType valueType;
        final Status status;

        Tag(String code, DataType dataType, ValueType valueType, Status status) {
            this.code = code;
            this.codeBytes = code.getBytes(StandardCharsets.UTF_8);
            this.dataType = dataType;
            this.valueType = valueType;
            this.status = status;
        }
    }

    private final Map<String, Tag> tags = new HashMap<>();

    private Registry() {}

    Tag get(String code) {
        return tags.get(code);
    }

    int size() {
        return tags.size();
    }

    static Registry load(Path csv) throws IOException {
        List<List<String>> rows = parse(new String(Files.readAllBytes(csv), StandardCharsets.UTF_8));
        if (rows.isEmpty()) {
            throw new IOException(csv + ": empty, expected a registry CSV");
        }
        List<String> header = rows.get(0);
        if (header.size() != 9 || !header.get(0).trim().equals("tag_code")) {
            throw new IOException(csv + ": header " + header + " is not a registry CSV's");
        }
        Registry r = new Registry();
        for (int i = 1; i < rows.size(); i++) {
            List<String> f = rows.get(i);
            if (f.size() == 1 && f.get(0).isBlank()) {
                continue;
            }
            if (f.size() != 9) {
                throw new IOException(csv + ": row " + (i + 1) + " has " + f.size() + " fields, not 9");
            }
            String code = f.get(0).trim();
            Tag tag = new Tag(code,
                    DataType.valueOf(f.get(2).trim()),
                    ValueType.valueOf(f.get(3).trim().toUpperCase(java.util.Locale.ROOT)),
                    Status.valueOf(f.get(4).trim().toUpperCase(java.util.Locale.ROOT)));
            r.tags.putIfAbsent(code, tag);
        }
        return r;
    }

    /** RFC 4180 rows: quoted fields may hold commas, doubled quotes and line breaks. */
    private static List<List<String>> parse(String text) {
        List<List<String>> rows = new ArrayList<>();
        List<String> row = new ArrayList<>();
        StringBuilder field = new StringBuilder();
        boolean quoted = false;
        int n = text.length();
        for (int i = 0; i < n; i++) {
            char c = text.charAt(i);
            if (quoted) {
                if (c == '"') {
                    if (i + 1 < n && text.charAt(i + 1) == '"') {
                        field.append('"');
                        i++;
                    } else {
                        quoted = false;
                    }
                } else {
                    field.append(c);
                }
            } else if (c == '"') {
                quoted = true;
            } else if (c == ',') {
                row.add(field.toString());
                field.setLength(0);
            } else if (c == '\n' || c == '\r') {
                if (c == '\r' && i + 1 < n && text.charAt(i + 1) == '\n') {
                    i++;
                }
                row.add(field.toString());
                field.setLength(0);
                rows.add(row);
                row = new ArrayList<>();
            } else {
                field.append(c);
            }
        }
        if (field.length() > 0 || !row.isEmpty()) {
            row.add(field.toString());
            rows.add(row);
        }
        return rows;
    }
}
