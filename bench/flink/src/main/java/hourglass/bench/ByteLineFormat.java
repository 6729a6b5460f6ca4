package hourglass.bench;

import java.io.IOException;
import java.util.Arrays;

import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.reader.SimpleStreamFormat;
import org.apache.flink.connector.file.src.reader.StreamFormat;
import org.apache.flink.core.fs.FSDataInputStream;

/**
 * Reads a file as lines of raw bytes, without their newline.
 *
 * <p>Flink's TextLineInputFormat decodes to String and replaces invalid UTF-8 with U+FFFD, which
 * would accept lines that hourglass rejects as not UTF-8; the decoder needs the bytes. Not
 * splittable, like TextLineInputFormat: one reader reads the file in order, as event time needs.
 */
public final class ByteLineFormat extends SimpleStreamFormat<byte[]> {
    private static final long serialVersionUID = 1L;

    @Override
    public StreamFormat.Reader<byte[]> createReader(Configuration config, FSDataInputStream in) {
        return new LineReader(in);
    }

    @Override
    public TypeInformation<byte[]> getProducedType() {
        return PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
    }

    private static final class LineReader implements StreamFormat.Reader<byte[]> {
        private final FSDataInputStream in;
        private final byte[] buf = new byte[1 << 20];
        private int pos;
        private int end;
        private boolean eof;
        /** A line longer than what is left of the buffer is assembled here. */
        private byte[] carry = new byte[256];

        LineReader(FSDataInputStream in) {
            this.in = in;
        }

        @Override
        public byte[] read() throws IOException {
            int carried = 0;
            while (true) {
                if (pos == end) {
                    if (eof || !fill()) {
                        return carried > 0 ? Arrays.copyOf(carry, carried) : null;
                    }
                }
                int nl = -1;
                for (int i = pos; i < end; i++) {
                    if (buf[i] == '\n') {
                        nl = i;
                        break;
                    }
                }
                if (nl >= 0) {
                    byte[] line;
                    if (carried == 0) {
                        line = Arrays.copyOfRange(buf, pos, nl);
                    } else {
                        line = Arrays.copyOf(carry, carried + (nl - pos));
                        System.arraycopy(buf, pos, line, carried, nl - pos);
                    }
                    pos = nl + 1;
                    return line;
                }
                int n = end - pos;
                if (carried + n > carry.length) {
                    carry = Arrays.copyOf(carry, Math.max(carry.length * 2, carried + n));
                }
                System.arraycopy(buf, pos, carry, carried, n);
                carried += n;
                pos = end;
            }
        }

        private boolean fill() throws IOException {
            int n = in.read(buf, 0, buf.length);
            if (n <= 0) {
                eof = true;
                return false;
            }
            pos = 0;
            end = n;
            return true;
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }
}
