package io.idempotency.sample.payment;

import io.idempotency.testkit.FreePorts;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class EmbeddedPostgresServerTest {

    @TempDir
    Path dataDir;

    @Test
    void aServerThatDoesNotBecomeReadyInTimeIsNotLeftRunning() throws IOException {
        start(dataDir).close(); // initialised
        // a standby without hot standby runs, but never accepts connections: the start gives up waiting for it
        Files.writeString(dataDir.resolve("standby.signal"), "");
        Files.writeString(dataDir.resolve("postgresql.auto.conf"), "hot_standby = off\n", StandardOpenOption.APPEND);
        try {
            assertThatThrownBy(() -> EmbeddedPostgresServer.start(dataDir, freePort(), Duration.ofSeconds(3)))
                    .isInstanceOf(IOException.class);
            assertThat(PostgresOrphans.runningServer(dataDir)).as("the server of the failed start").isEmpty();
        } finally {
            PostgresOrphans.stopOrphan(dataDir, PostgresOrphans.DEFAULT_STOP_TIMEOUT);
        }
    }

    @Test
    void aStalePidFileNamingTheServerOfAnotherDirectoryLeavesThatServerRunning(@TempDir Path otherDir)
            throws IOException {
        start(dataDir).close(); // initialised, stopped: no postmaster.pid
        try (EmbeddedPostgresServer other = start(otherDir)) {
            long otherPid = PostgresOrphans.runningServer(otherDir).orElseThrow().pid();
            // What a server that died with its machine leaves behind, once its process id has been handed to the
            // server of another directory (another instance of the application, say) after the reboot.
            Files.writeString(dataDir.resolve(PostgresOrphans.PID_FILE), otherPid + "\n" + dataDir + "\n");

            try (EmbeddedPostgresServer restarted = start(dataDir)) {
                assertThat(restarted.port()).isNotEqualTo(other.port());
            }
            assertThat(ProcessHandle.of(otherPid).filter(ProcessHandle::isAlive))
                    .as("the server of %s, which the stale file of %s names", otherDir, dataDir).isPresent();
        }
    }

    private static EmbeddedPostgresServer start(Path dataDir) throws IOException {
        return EmbeddedPostgresServer.start(dataDir, freePort());
    }

    /**
     * Not port 0: the server binds its port seconds after the port is chosen, time enough on a busy machine for another
     * program to take a port of the ephemeral range.
     */
    private static int freePort() {
        return FreePorts.outsideEphemeralRange();
    }
}
