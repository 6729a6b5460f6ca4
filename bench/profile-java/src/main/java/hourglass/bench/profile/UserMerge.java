package hourglass.bench.profile;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.hbase.client.Put;

/**
 * The per-user merge of hourglass's {@code UserMerge} (jobs/profile/src/merge.rs) and its
 * flush ({@code job/flush.rs}): checked tag values buffered per user, per tag, by event time;
 * a flush makes one put of {@code user_profile_tag} per user holding, per tag, the value with
 * the newest event time (of two at the same time, the later arrival), stamped with that time
 * in ms, in family {@code dimension} or {@code behavior} by the tag's value type; and one put of
 * {@code user_tag_history} per (user, tag, event time). Short-term tags go to Redis in
 * hourglass, never to HBase: the peer counts them and writes them nowhere.
 *
 * <p>A user counts towards the flush's 500 as soon as one of its events is decoded, whether or
 * not any of its tags is accepted, as in hourglass.
 */
final class UserMerge {
    static final byte[] DIMENSION = "dimension".getBytes(StandardCharsets.US_ASCII);
    static final byte[] BEHAVIOR = "behavior".getBytes(StandardCharsets.US_ASCII);
    static final byte[] HISTORY_FAMILY = {'h'};
    static final byte[] HISTORY_QUALIFIER = {'v'};

    /** One user's buffered tags, by code. */
    static final class User {
        final HashMap<String, TagValues> tags = new HashMap<>(8);
    }

    /** One (user, tag)'s buffered values by event time (seconds). */
    static final class TagValues {
        final Registry.Tag tag;
        final TreeMap<Long, byte[]> byTs = new TreeMap<>();

        TagValues(Registry.Tag tag) {
            this.tag = tag;
        }
    }

    /** What one flush writes, and its counts. */
    static final class Flushed {
        final List<Put> profile = new ArrayList<>();
        final List<Put> history = new ArrayList<>();
        long cells;
        long shortTerm;
        long bytes;
    }

    private final HashMap<String, User> users = new HashMap<>(1024);
    private long oldestNanos = -1;

    /** The buffer of {@code id}, which now counts as buffered. */
    User user(String id) {
        if (oldestNanos < 0) {
            oldestNanos = System.nanoTime();
        }
        User u = users.get(id);
        if (u == null) {
            u = new User();
            users.put(id, u);
        }
        return u;
    }

    static void add(User u, Registry.Tag tag, long ts, byte[] cell) {
        TagValues v = u.tags.get(tag.code);
        if (v == null) {
            v = new TagValues(tag);
            u.tags.put(tag.code, v);
        }
        v.byTs.put(ts, cell);
    }

    int users() {
        return users.size();
    }

    boolean isEmpty() {
        return users.isEmpty();
    }

    /** Nanoseconds since the oldest buffered event arrived (0 when empty). */
    long waitedNanos(long now) {
        return oldestNanos < 0 ? 0 : now - oldestNanos;
    }

    /** Empties the buffer into puts. */
    Flushed flush(Keys keys) {
        Flushed out = new Flushed();
        for (Map.Entry<String, User> e : users.entrySet()) {
            String user = e.getKey();
            Put put = null;
            for (TagValues v : e.getValue().tags.values()) {
                Map.Entry<Long, byte[]> newest = v.byTs.lastEntry();
                if (newest == null) {
                    continue;
                }
                byte[] family = switch (v.tag.valueType) {
                    case DIMENSION -> DIMENSION;
                    case STATISTIC -> BEHAVIOR;
                    case SHORT_TERM -> null;
                };
                if (family == null) {
                    out.shortTerm++;
                    continue;
                }
                if (put == null) {
                    put = new Put(keys.profileRow(user));
                    out.bytes += put.getRow().length;
                }
                put.addColumn(family, v.tag.codeBytes, newest.getKey() * 1000, newest.getValue());
                out.cells++;
                out.bytes += newest.getValue().length;
                for (Map.Entry<Long, byte[]> change : v.byTs.entrySet()) {
                    long tsMs = change.getKey() * 1000;
                    Put h = new Put(keys.historyRow(user, v.tag.codeBytes, tsMs));
                    h.addColumn(HISTORY_FAMILY, HISTORY_QUALIFIER, tsMs, change.getValue());
                    out.history.add(h);
                    out.bytes += h.getRow().length + change.getValue().length;
                }
            }
            if (put != null) {
                out.profile.add(put);
            }
        }
        users.clear();
        oldestNanos = -1;
        return out;
    }
}
