package hourglass.bench.profile;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The profile tables' row keys, as hourglass's {@code jobs/profile/src/key.rs}: the salt is the
 * first four lowercase hex digits of MD5(user id).
 */
final class Keys {
    static final int SALT_LEN = 4;
    private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    private final MessageDigest md5;

    Keys() {
        try {
            md5 = MessageDigest.getInstance("MD5");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JVM has MD5", e);
        }
    }

    /** {@code <salt><user>}: the salt is fixed-length, so there is no separator. */
    byte[] profileRow(String user) {
        byte[] id = user.getBytes(StandardCharsets.US_ASCII);
        byte[] row = new byte[SALT_LEN + id.length];
        salt(id, row);
        System.arraycopy(id, 0, row, SALT_LEN, id.length);
        return row;
    }

    /**
     * {@code <salt>_<user>_<code>_<Long.MAX_VALUE - tsMs, 19 digits>}: a tag's newest change
     * sorts first.
     */
    byte[] historyRow(String user, byte[] code, long tsMs) {
        byte[] id = user.getBytes(StandardCharsets.US_ASCII);
        byte[] row = new byte[SALT_LEN + 1 + id.length + 1 + code.length + 1 + 19];
        salt(id, row);
        int at = SALT_LEN;
        row[at++] = '_';
        System.arraycopy(id, 0, row, at, id.length);
        at += id.length;
        row[at++] = '_';
        System.arraycopy(code, 0, row, at, code.length);
        at += code.length;
        row[at++] = '_';
        long reversed = Long.MAX_VALUE - Math.max(tsMs, 0);
        for (int i = row.length - 1; i >= at; i--) {
            row[i] = (byte) ('0' + reversed % 10);
            reversed /= 10;
        }
        return row;
    }

    private void salt(byte[] id, byte[] into) {
        byte[] d = md5.digest(id);
        into[0] = HEX[(d[0] >> 4) & 0xf];
        into[1] = HEX[d[0] & 0xf];
        into[2] = HEX[(d[1] >> 4) & 0xf];
        into[3] = HEX[d[1] & 0xf];
    }
}
