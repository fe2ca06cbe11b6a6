package io.idempotency.testkit;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Free TCP ports for a server that a test starts and that binds its port some time after the port was chosen: an
 * embedded PostgreSQL or MariaDB (which choose their port before they initialise their data directory, seconds before
 * the server binds it), an application started in another process, a server restarted on the port it had.
 *
 * <p>A port found by binding port 0 and closing the socket again comes from the kernel's ephemeral range, the range
 * every other program's {@code bind(0)} and every outgoing connection also take theirs from. On a busy build machine
 * one of them can take the port in those seconds; the server then cannot listen and exits at once, and the embedded
 * PostgreSQL's start waits out its whole time-out for it before it fails. The ports given here lie outside the
 * ephemeral range, so only a program that names the port itself can take it: they were free when chosen, and no port
 * is given twice in one JVM.
 */
public final class FreePorts {

    /** Below this, ports of registered services (databases, brokers, web servers) are left alone. */
    static final int LOWEST = 20_000;

    static final int HIGHEST = 65_535;

    /** Linux's ephemeral range; elsewhere the range of Linux's default and IANA's (macOS, Windows) is assumed. */
    private static final Path LINUX_EPHEMERAL_RANGE = Path.of("/proc/sys/net/ipv4/ip_local_port_range");

    private static final int[] ASSUMED_EPHEMERAL_RANGE = {32_768, HIGHEST};

    private static final int ATTEMPTS = 500;

    private static final Set<Integer> GIVEN = ConcurrentHashMap.newKeySet();

    private FreePorts() {
    }

    /**
     * A port that no other socket uses now, outside the ephemeral range.
     *
     * @throws IllegalStateException if the ephemeral range leaves no room above {@value #LOWEST}, or no free port was
     *                               found there
     */
    public static int outsideEphemeralRange() {
        int[] ephemeral = ephemeralRange();
        // the ports from LOWEST up to the range, and those from above it (and from LOWEST) up to HIGHEST
        int below = Math.max(0, Math.min(ephemeral[0], HIGHEST + 1) - LOWEST);
        int aboveFrom = Math.max(ephemeral[1] + 1, LOWEST);
        int above = Math.max(0, HIGHEST + 1 - aboveFrom);
        if (below + above == 0) {
            throw new IllegalStateException("the ephemeral port range " + ephemeral[0] + "-" + ephemeral[1]
                    + " leaves no port from " + LOWEST + " for a test's server");
        }
        for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
            int index = ThreadLocalRandom.current().nextInt(below + above);
            int port = index < below ? LOWEST + index : aboveFrom + index - below;
            if (isFree(port) && GIVEN.add(port)) {
                return port;
            }
        }
        throw new IllegalStateException("no free port found outside the ephemeral range " + ephemeral[0] + "-"
                + ephemeral[1] + " in " + ATTEMPTS + " attempts");
    }

    /** The kernel's ephemeral range, lowest and highest port. */
    static int[] ephemeralRange() {
        if (!Files.isReadable(LINUX_EPHEMERAL_RANGE)) {
            return ASSUMED_EPHEMERAL_RANGE.clone();
        }
        // Read as a stream: Files.readString, which sizes its read by the size the kernel reports for the file (0),
        // was seen to give its first character only.
        try (BufferedReader reader = Files.newBufferedReader(LINUX_EPHEMERAL_RANGE, StandardCharsets.US_ASCII)) {
            String line = reader.readLine();
            String[] bounds = line == null ? new String[0] : line.trim().split("\\s+");
            if (bounds.length != 2) {
                throw new IllegalStateException(LINUX_EPHEMERAL_RANGE + " holds no range: " + line);
            }
            return new int[] {Integer.parseInt(bounds[0]), Integer.parseInt(bounds[1])};
        } catch (IOException e) {
            throw new UncheckedIOException("could not read " + LINUX_EPHEMERAL_RANGE, e);
        }
    }

    /**
     * Whether no socket uses {@code port} on any address: a bind to the wildcard address without address reuse fails
     * when a socket listens on, is connected from, or waits to close on that port on any local address.
     */
    private static boolean isFree(int port) {
        try (ServerSocket socket = new ServerSocket()) {
            socket.setReuseAddress(false);
            socket.bind(new InetSocketAddress(port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
