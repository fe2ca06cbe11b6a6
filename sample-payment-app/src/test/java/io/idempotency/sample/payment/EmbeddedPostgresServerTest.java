package io.idempotency.sample.payment;

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
        EmbeddedPostgresServer.start(dataDir, 0).close(); // initialised
        // a standby without hot standby runs, but never accepts connections: the start gives up waiting for it
        Files.writeString(dataDir.resolve("standby.signal"), "");
        Files.writeString(dataDir.resolve("postgresql.auto.conf"), "hot_standby = off\n", StandardOpenOption.APPEND);
        try {
            assertThatThrownBy(() -> EmbeddedPostgresServer.start(dataDir, 0, Duration.ofSeconds(3)))
                    .isInstanceOf(IOException.class);
            assertThat(PostgresOrphans.runningServer(dataDir)).as("the server of the failed start").isEmpty();
        } finally {
            PostgresOrphans.stopOrphan(dataDir, PostgresOrphans.DEFAULT_STOP_TIMEOUT);
        }
    }
}
