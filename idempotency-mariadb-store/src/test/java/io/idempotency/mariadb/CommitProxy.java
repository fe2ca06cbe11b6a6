package io.idempotency.mariadb;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A TCP proxy in front of a MariaDB server that cuts a connection at a {@code COMMIT} the client sends, when told
 * to: before the server has it (the server rolls the transaction back when the connection goes), or once the server
 * has it (it commits, and the client never hears so); or that stops passing anything on, its connections left open.
 */
final class CommitProxy implements AutoCloseable {

    /** When the connection is cut. */
    enum Cut {
        /** the COMMIT never reaches the server */
        BEFORE_THE_SERVER_HAS_IT,
        /** the server gets the COMMIT and answers it; the answer is lost */
        AFTER_THE_SERVER_HAS_IT
    }

    private static final byte[] COMMIT = "\u0003COMMIT".getBytes(StandardCharsets.US_ASCII);

    private final ServerSocket listener;
    private final String targetHost;
    private final int targetPort;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    /** The COMMITs to let through before the one that is cut, and how it is cut; null: cut none. */
    private final AtomicReference<Cut> cut = new AtomicReference<>();
    private final AtomicInteger commitsToSpare = new AtomicInteger();
    private final AtomicInteger cuts = new AtomicInteger();
    private volatile boolean frozen;

    CommitProxy(String targetHost, int targetPort) throws IOException {
        this.targetHost = targetHost;
        this.targetPort = targetPort;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread accepting = new Thread(this::accept, "commit-proxy");
        accepting.setDaemon(true);
        accepting.start();
    }

    /** {@code url} (a MariaDB JDBC URL) through this proxy. */
    static CommitProxy in(String url) throws IOException {
        URI uri = URI.create(url.substring("jdbc:".length()));
        return new CommitProxy(uri.getHost(), uri.getPort() < 0 ? 3306 : uri.getPort());
    }

    /** {@code url} with this proxy's address instead of the server's. */
    String through(String url) {
        URI uri = URI.create(url.substring("jdbc:".length()));
        return url.replace(uri.getHost() + (uri.getPort() < 0 ? "" : ":" + uri.getPort()),
                "127.0.0.1:" + listener.getLocalPort());
    }

    /** Cuts the connection that sends the {@code (spare + 1)}-th COMMIT from now, as {@code how} says. */
    void cutAtCommit(int spare, Cut how) {
        commitsToSpare.set(spare);
        cut.set(how);
    }

    /**
     * Passes nothing more either way, the connections left open: a cut network, or a stalled process, as the server
     * sees it.
     */
    void freeze() {
        frozen = true;
    }

    /** How many connections were cut at a COMMIT. */
    int cuts() {
        return cuts.get();
    }

    private void accept() {
        while (!listener.isClosed()) {
            try {
                Socket client = listener.accept();
                Socket server = new Socket(targetHost, targetPort);
                client.setTcpNoDelay(true);
                server.setTcpNoDelay(true);
                sockets.add(client);
                sockets.add(server);
                AtomicBoolean answersLost = new AtomicBoolean();
                pump(client, server, true, answersLost);
                pump(server, client, false, answersLost);
            } catch (IOException e) {
                return;
            }
        }
    }

    private void pump(Socket from, Socket to, boolean fromClient, AtomicBoolean answersLost) {
        Thread thread = new Thread(() -> {
            byte[] buffer = new byte[65536];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                int n;
                while ((n = in.read(buffer)) > 0) {
                    if (!fromClient && answersLost.get()) {
                        return;
                    }
                    while (frozen && !listener.isClosed()) {
                        Thread.sleep(10);
                    }
                    Cut how = fromClient && contains(buffer, n) ? takeCut() : null;
                    if (how == Cut.BEFORE_THE_SERVER_HAS_IT) {
                        closeBoth(from, to);
                        return;
                    }
                    if (how == Cut.AFTER_THE_SERVER_HAS_IT) {
                        answersLost.set(true); // the server's answer is not passed on
                    }
                    out.write(buffer, 0, n);
                    out.flush();
                    if (how == Cut.AFTER_THE_SERVER_HAS_IT) {
                        Thread.sleep(300); // the server has committed by then
                        return;
                    }
                }
            } catch (IOException | InterruptedException e) {
                // a side closed
            } finally {
                closeBoth(from, to);
            }
        }, "commit-proxy-pump");
        thread.setDaemon(true);
        thread.start();
    }

    private Cut takeCut() {
        if (cut.get() == null) {
            return null;
        }
        if (commitsToSpare.getAndDecrement() > 0) {
            return null;
        }
        Cut how = cut.getAndSet(null);
        if (how != null) {
            cuts.incrementAndGet();
        }
        return how;
    }

    private static boolean contains(byte[] buffer, int length) {
        outer:
        for (int i = 0; i + COMMIT.length <= length; i++) {
            for (int j = 0; j < COMMIT.length; j++) {
                if (buffer[i + j] != COMMIT[j]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    private static void closeBoth(Socket a, Socket b) {
        try {
            a.close();
        } catch (IOException ignored) {
            // already closed
        }
        try {
            b.close();
        } catch (IOException ignored) {
            // already closed
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        for (Socket socket : sockets) {
            socket.close();
        }
    }
}
