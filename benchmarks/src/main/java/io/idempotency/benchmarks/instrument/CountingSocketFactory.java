package io.idempotency.benchmarks.instrument;

import javax.net.SocketFactory;
import java.io.FilterInputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;

/**
 * A pgjdbc socket factory ({@code socketFactory=} in the JDBC URL) whose sockets count the driver's round trips with
 * PostgreSQL — every time it has written and then waits to read ({@link WireTap}) — and read the statements it sends
 * ({@link FrontendMessageParser}), for {@link WireTraffic}. It sees the exact bytes on the wire, also what the driver
 * sends on its own (such as {@code SHOW TRANSACTION ISOLATION LEVEL} for {@code Connection.getTransactionIsolation()}),
 * in the thread that uses the connection, and without the proxy hop that would add latency to every round trip.
 * Requires an unencrypted connection ({@code sslmode=disable&gssEncMode=disable}) for the statement texts.
 */
public class CountingSocketFactory extends SocketFactory {

    @Override
    public Socket createSocket() {
        return new CountingSocket();
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
        Socket socket = createSocket();
        socket.connect(new InetSocketAddress(host, port));
        return socket;
    }

    @Override
    public Socket createSocket(String host, int port, InetAddress localHost, int localPort) throws IOException {
        Socket socket = createSocket();
        socket.bind(new InetSocketAddress(localHost, localPort));
        socket.connect(new InetSocketAddress(host, port));
        return socket;
    }

    @Override
    public Socket createSocket(InetAddress host, int port) throws IOException {
        Socket socket = createSocket();
        socket.connect(new InetSocketAddress(host, port));
        return socket;
    }

    @Override
    public Socket createSocket(InetAddress address, int port, InetAddress localAddress, int localPort)
            throws IOException {
        Socket socket = createSocket();
        socket.bind(new InetSocketAddress(localAddress, localPort));
        socket.connect(new InetSocketAddress(address, port));
        return socket;
    }

    private static final class CountingSocket extends Socket {

        private final WireTap tap = WireTraffic.newTap();
        private OutputStream out;
        private InputStream in;

        @Override
        public synchronized OutputStream getOutputStream() throws IOException {
            if (out == null) {
                out = new FilterOutputStream(super.getOutputStream()) {
                    @Override
                    public void write(int b) throws IOException {
                        out.write(b);
                        tap.wrote(new byte[]{(byte) b}, 0, 1);
                    }

                    @Override
                    public void write(byte[] b, int off, int len) throws IOException {
                        out.write(b, off, len);
                        tap.wrote(b, off, len);
                    }
                };
            }
            return out;
        }

        @Override
        public synchronized InputStream getInputStream() throws IOException {
            if (in == null) {
                in = new FilterInputStream(super.getInputStream()) {
                    @Override
                    public int read() throws IOException {
                        tap.reading();
                        return in.read();
                    }

                    @Override
                    public int read(byte[] b, int off, int len) throws IOException {
                        tap.reading();
                        return in.read(b, off, len);
                    }
                };
            }
            return in;
        }
    }
}
