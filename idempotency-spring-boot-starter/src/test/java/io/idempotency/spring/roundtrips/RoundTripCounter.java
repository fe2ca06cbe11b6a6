package io.idempotency.spring.roundtrips;

import javax.net.SocketFactory;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A socket factory for the PostgreSQL driver ({@code socketFactory} on the JDBC URL, with {@code sslmode=disable}) that
 * counts the server's ReadyForQuery messages on the application's request threads: one per round trip, and one more
 * for the implicit {@code BEGIN} the driver sends ahead of a transaction's first statement. A round trip that carried only an empty query is Hikari's check of an idle connection
 * before lending it ({@code Connection.isValid()}): pool upkeep, not counted. Work on other threads (the pool's own,
 * the background sweeps) is not counted either.
 */
public class RoundTripCounter extends SocketFactory {

    private static final AtomicInteger COUNTED = new AtomicInteger();

    /** The round trips counted since the last call, which starts the count again. */
    public static int takeCount() {
        return COUNTED.getAndSet(0);
    }

    @Override
    public Socket createSocket() {
        return new CountingSocket();
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
        Socket socket = new CountingSocket();
        socket.connect(new java.net.InetSocketAddress(host, port));
        return socket;
    }

    @Override
    public Socket createSocket(String host, int port, InetAddress localHost, int localPort) {
        throw new UnsupportedOperationException();
    }

    @Override
    public Socket createSocket(InetAddress host, int port) {
        throw new UnsupportedOperationException();
    }

    @Override
    public Socket createSocket(InetAddress address, int port, InetAddress localAddress, int localPort) {
        throw new UnsupportedOperationException();
    }

    private static boolean onARequestThread() {
        return Thread.currentThread().getName().contains("-exec-");
    }

    private static final class CountingSocket extends Socket {

        private InputStream in;

        @Override
        public synchronized InputStream getInputStream() throws IOException {
            if (in == null) {
                in = new BackendMessages(super.getInputStream());
            }
            return in;
        }
    }

    /** Follows the framing of the server's messages (a type byte, a length that counts itself, the rest). */
    private static final class BackendMessages extends FilterInputStream {

        private int headerRead; // bytes of the current message's type and length read so far, 0..5
        private char type;
        private int length;
        private long left; // bytes of the current message's body still to come
        private boolean emptyQuery; // the last message was EmptyQueryResponse

        BackendMessages(InputStream in) {
            super(in);
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            if (b >= 0) {
                follow((byte) b);
            }
            return b;
        }

        @Override
        public int read(byte[] buffer, int offset, int count) throws IOException {
            int n = super.read(buffer, offset, count);
            for (int i = 0; i < n; i++) {
                follow(buffer[offset + i]);
            }
            return n;
        }

        @Override
        public long skip(long n) throws IOException {
            throw new IOException("not expected of the driver");
        }

        private void follow(byte b) {
            if (left > 0) {
                left--;
                if (left == 0) {
                    ended();
                }
                return;
            }
            if (headerRead == 0) {
                type = (char) b;
                length = 0;
            } else {
                length = (length << 8) | (b & 0xFF);
            }
            headerRead++;
            if (headerRead == 5) {
                headerRead = 0;
                left = length - 4;
                if (left == 0) {
                    ended();
                }
            }
        }

        private void ended() {
            if (type == 'Z') {
                if (!emptyQuery && onARequestThread()) {
                    COUNTED.incrementAndGet();
                }
                emptyQuery = false;
            } else if (type == 'I') {
                emptyQuery = true;
            }
        }
    }
}
