package io.idempotency.testkit;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.HashSet;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

class FreePortsTest {

    @Test
    void aPortIsOutsideTheEphemeralRangeAndAServerCanListenOnIt() throws IOException {
        int[] ephemeral = FreePorts.ephemeralRange();
        int port = FreePorts.outsideEphemeralRange();

        assertThat(port).isBetween(FreePorts.LOWEST, FreePorts.HIGHEST)
                .matches(p -> p < ephemeral[0] || p > ephemeral[1], "outside " + ephemeral[0] + "-" + ephemeral[1]);
        try (ServerSocket server = new ServerSocket()) {
            server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
            assertThat(server.getLocalPort()).isEqualTo(port);
        }
    }

    @Test
    void noPortIsGivenTwiceAndEachStaysFreeForItsServer() throws IOException {
        Set<Integer> given = new HashSet<>();
        Set<ServerSocket> held = new HashSet<>();
        try {
            for (int i = 0; i < 300; i++) {
                int port = FreePorts.outsideEphemeralRange();
                assertThat(given.add(port)).as("port %d given twice", port).isTrue();
                ServerSocket server = new ServerSocket();
                held.add(server);
                server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port)); // fails if in use
            }
        } finally {
            for (ServerSocket server : held) {
                server.close();
            }
        }
    }
}
