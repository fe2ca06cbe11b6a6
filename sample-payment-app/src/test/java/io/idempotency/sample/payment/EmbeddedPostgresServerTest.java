package io.idempotency.sample.payment;

import io.idempotency.testkit.FreePorts;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
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

    /**
     * A second start on the directory of a running server is refused before it touches anything there, whatever the
     * directory holds (here: the embedded library's own lock file is gone, removed by a clean-up script, say, which
     * the earlier check relied on alone): the running server is not taken for an orphan and stopped.
     */
    @Test
    void aSecondStartOnTheDirectoryOfARunningServerIsRefusedAndLeavesItRunning() throws IOException {
        try (EmbeddedPostgresServer running = start(dataDir)) {
            long pid = PostgresOrphans.runningServer(dataDir).orElseThrow().pid();
            Files.delete(dataDir.resolve(EmbeddedPostgresServer.OWNER_LOCK_FILE));

            assertThatThrownBy(() -> start(dataDir)).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("is in use by another running instance");
            Path link = Files.createSymbolicLink(dataDir.resolveSibling(dataDir.getFileName() + "-link"), dataDir);
            try {
                assertThatThrownBy(() -> start(link)).as("the same directory through a link")
                        .isInstanceOf(IllegalStateException.class)
                        .hasMessageContaining("is in use by another running instance");
            } finally {
                Files.delete(link);
            }
            // the refused attempts let go of nothing: another process still cannot take the lock
            assertThat(lockableByAnotherProcess(EmbeddedPostgresServer.instanceLockFile(dataDir))).isFalse();

            assertThat(ProcessHandle.of(pid).filter(ProcessHandle::isAlive)).as("the running server").isPresent();
            try (Connection connection = DriverManager.getConnection(running.jdbcUrl(), running.username(), null)) {
                assertThat(connection.isValid(5)).isTrue();
            }
        } catch (SQLException e) {
            throw new AssertionError(e);
        }
        // let go with the server: the directory can be started again
        start(dataDir).close();
    }

    /**
     * The application started on the directory of a running server (the first instance not stopped): Spring Boot's
     * failure report says why and what to do, rather than a page of nested bean creation errors.
     */
    @Test
    @ExtendWith(OutputCaptureExtension.class)
    void theApplicationOnTheDirectoryOfARunningServerStopsWithAReportSayingWhy(CapturedOutput output)
            throws IOException {
        try (EmbeddedPostgresServer running = start(dataDir)) {
            // as arguments: application.yml sets the directory, over properties given as defaults
            assertThatThrownBy(() -> new SpringApplicationBuilder(SamplePaymentApplication.class)
                    .run("--server.port=0", "--sample.embedded.data-dir=" + dataDir,
                            "--idempotency.sweeper.enabled=false").close())
                    .hasRootCauseInstanceOf(EmbeddedPostgresServer.DataDirectoryInUseException.class);
            assertThat(output.getOut() + output.getErr()).contains("APPLICATION FAILED TO START")
                    .contains("is in use by another running instance")
                    .contains("Stop the instance that is running");
        }
    }

    /**
     * Whether another process can lock {@code file} as the server's start does: a second JVM, launched on a one-file
     * program that tries the lock (FileChannel's locks are the operating system's record locks, which another tool,
     * flock(1), would not see).
     */
    private boolean lockableByAnotherProcess(Path file) throws IOException {
        Path probe = dataDir.resolveSibling(dataDir.getFileName() + "-probe").resolve("LockProbe.java");
        Files.createDirectories(probe.getParent());
        Files.writeString(probe, """
                import java.nio.channels.FileChannel;
                import java.nio.file.Path;
                import java.nio.file.StandardOpenOption;

                public class LockProbe {
                    public static void main(String[] args) throws Exception {
                        try (FileChannel channel = FileChannel.open(Path.of(args[0]), StandardOpenOption.WRITE)) {
                            System.exit(channel.tryLock() != null ? 10 : 11);
                        }
                    }
                }
                """);
        try {
            Process java = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    probe.toString(), file.toString()).redirectErrorStream(true).start();
            String output = new String(java.getInputStream().readAllBytes());
            int status = java.waitFor();
            if (status != 10 && status != 11) {
                // its own statuses only: the launcher's 1 (a program that does not compile, say) proves nothing
                throw new IOException("the lock probe failed (" + status + "): " + output);
            }
            return status == 10;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException(e);
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
