package io.idempotency.spring.aot;

import io.idempotency.testkit.FreePorts;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static io.idempotency.spring.aot.AotProcessedApplicationTest.awaitStarted;
import static io.idempotency.spring.TestJvms.java;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Mockito is on the class path of every application's tests. The starter's startup checks skip a test's mock standing
 * in for an {@code @Idempotent} bean, but must not ask Mockito about every bean to do so: that starts Mockito's inline
 * mock maker, which attaches an agent to the JVM, and would cost seconds at each start of an application whose tests
 * made no mock. The application runs in a JVM of its own, so that no other test has started Mockito before; the JVM
 * logs every class it loads.
 */
class MockitoOnTheClassPathTest {

    @TempDir
    Path work;

    @Test
    void anApplicationWithMockitoOnItsClassPathStartsWithoutStartingMockito() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        int port = FreePorts.outsideEphemeralRange();
        List<String> run = new ArrayList<>(List.of(AotApplication.class.getName(), "--server.port=" + port));
        database.springPropertyValues().forEach(property -> run.add("--" + property));
        Path classes = work.resolve("classes.log");
        Path log = work.resolve("run.log");
        Process application = java(List.of("-Xlog:class+load=info:file=" + classes), run, log);
        try {
            awaitStarted(application, log);
        } finally {
            application.destroy();
            if (!application.waitFor(1, TimeUnit.MINUTES)) {
                application.destroyForcibly();
            }
        }
        List<String> loaded = Files.readAllLines(classes);
        assertThat(loaded).as("the startup checks ran")
                .anyMatch(line -> line.contains(" io.idempotency.spring.IdempotencyStartupChecks "));
        assertThat(loaded).as("classes of Mockito's machinery loaded at startup")
                .noneMatch(line -> line.contains(" org.mockito.internal."));
    }
}
