package io.idempotency.benchmarks.harness;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The RESULT line stays the last line of the harness's standard output, also when a library logs after the report: the
 * embedded PostgreSQL, which a run without a local server starts, logs its shutdown (through SLF4J, which Logback —
 * on the class path for the application under test — prints to standard output unless told otherwise) when the run
 * closes it, after the report.
 */
class ResultLineTest {

    @Test
    void whatLibrariesLogAfterTheReportDoesNotFollowTheResultLineOnStandardOutput() throws Exception {
        Process harness = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), AfterTheReport.class.getName()).start();
        CompletableFuture<String> out = read(harness.getInputStream());
        CompletableFuture<String> err = read(harness.getErrorStream());
        assertThat(harness.waitFor(60, TimeUnit.SECONDS)).isTrue();

        List<String> lines = out.get().lines().toList();
        assertThat(lines).isNotEmpty();
        assertThat(lines.get(lines.size() - 1)).as("standard output:%n%s%nstandard error:%n%s", out.get(), err.get())
                .isEqualTo("RESULT first_ratio=0.52");
        assertThat(err.get()).contains("shut down postmaster");
    }

    private static CompletableFuture<String> read(InputStream stream) {
        return CompletableFuture.supplyAsync(() -> {
            try (stream) {
                ByteArrayOutputStream bytes = new ByteArrayOutputStream();
                stream.transferTo(bytes);
                return bytes.toString(StandardCharsets.UTF_8);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        });
    }

    /** The harness's entry point, its report's last line, then what the embedded PostgreSQL logs when it stops. */
    public static final class AfterTheReport {
        public static void main(String[] args) throws Exception {
            BenchmarkMain.main(new String[]{"--help"});
            System.out.println("RESULT first_ratio=0.52");
            LoggerFactory.getLogger(EmbeddedPostgres.class).info("{} shut down postmaster in {}", "pg-1", "0.2 s");
        }
    }
}
