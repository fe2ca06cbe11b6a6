package io.idempotency.spring.aot;

import io.idempotency.spring.AotProcessingTest.OnlyCreated;
import io.idempotency.testkit.FreePorts;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.springframework.boot.web.servlet.DelegatingFilterProxyRegistrationBean;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;
import tools.jackson.databind.node.MissingNode;

import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static io.idempotency.spring.TestJvms.java;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * An application processed ahead of time, as {@code spring-boot:process-aot} does before a native image is built,
 * then run on the JVM with the generated code ({@code -Dspring.aot.enabled=true}): it starts, its idempotent
 * endpoint claims, replays and refuses a mismatch as without the processing, and the {@code @Idempotent} method of a
 * service that a functional route calls (proxied by a class the processing generated) is keyed by the body and
 * replayed.
 */
class AotProcessedApplicationTest {

    private static final Duration START = Duration.ofMinutes(3);

    @TempDir
    Path work;

    @Test
    void anApplicationProcessedAheadOfTimeClaimsReplaysAndRefusesAMismatch() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table aot_orders (id bigserial primary key, note text not null)");
        List<String> arguments = database.springPropertyValues().stream().map(property -> "--" + property).toList();

        String classPath = processed(arguments);
        Path metadata = work.resolve("resources/META-INF/native-image/io.idempotency/aot-test/reachability-metadata.json");
        assertThat(Files.readString(metadata).replace("\\/", "/")).as("the hints a native image is built with")
                .contains("io/idempotency/jdbc/postgresql/schema.sql");
        // the startup checks call it to learn which filter a DelegatingFilterProxyRegistrationBean (Spring Security's)
        // registers; a native image invokes only the methods it was told of
        assertThat(reflectedMethods(metadata, DelegatingFilterProxyRegistrationBean.class))
                .as("the methods of DelegatingFilterProxyRegistrationBean a native image can invoke")
                .contains("getTargetBeanName");
        assertThat(reflection(metadata, OnlyCreated.class).path("allDeclaredConstructors").asBoolean())
                .as("the constructor of the storage policy a service's @Idempotent names: "
                        + reflection(metadata, OnlyCreated.class)).isTrue();

        int port = FreePorts.outsideEphemeralRange();
        List<String> run = new ArrayList<>(List.of(AotApplication.class.getName(), "--server.port=" + port));
        run.addAll(arguments);
        Path log = work.resolve("run.log");
        Process application = java(List.of("-Dspring.aot.enabled=true", "-cp", classPath), run, log);
        try {
            awaitStarted(application, log);
            assertThat(Files.readString(log)).contains("Starting AOT-processed AotApplication");

            HttpResponse<String> first = post(port, "/aot/orders", "aot-1", "{\"note\":\"a\",\"n\":1.0}");
            HttpResponse<String> replay = post(port, "/aot/orders", "aot-1", "{ \"n\":1.00, \"note\":\"a\" }");
            HttpResponse<String> mismatch = post(port, "/aot/orders", "aot-1", "{\"note\":\"b\",\"n\":1}");

            assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
            assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
            assertThat(replay.statusCode()).isEqualTo(201);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
            assertThat(replay.body()).isEqualTo(first.body());
            assertThat(mismatch.statusCode()).isEqualTo(422);
            assertThat(mismatch.headers().firstValue("Content-Type")).hasValue("application/problem+json");
            assertThat(database.queryLong("select count(*) from aot_orders")).isEqualTo(1);

            // a service's @Idempotent method that a functional route calls, keyed by the body's reference
            HttpResponse<String> refund = post(port, "/aot/refunds", null, "{\"reference\":\"r-1\",\"note\":\"c\"}");
            HttpResponse<String> refundReplay = post(port, "/aot/refunds", null,
                    "{ \"note\":\"c\", \"reference\":\"r-1\" }");
            HttpResponse<String> otherRefund = post(port, "/aot/refunds", null,
                    "{\"reference\":\"r-2\",\"note\":\"c\"}");

            assertThat(refund.statusCode()).as(refund.body()).isEqualTo(201);
            assertThat(refund.headers().firstValue("Idempotent-Replayed")).isEmpty();
            assertThat(refundReplay.statusCode()).as(refundReplay.body()).isEqualTo(201);
            assertThat(refundReplay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(refundReplay.body()).isEqualTo(refund.body());
            assertThat(otherRefund.statusCode()).as(otherRefund.body()).isEqualTo(201);
            assertThat(otherRefund.headers().firstValue("Idempotent-Replayed")).isEmpty();
            assertThat(otherRefund.body()).isNotEqualTo(refund.body());
            assertThat(database.queryLong("select count(*) from aot_orders")).isEqualTo(3);
        } finally {
            application.destroy();
            if (!application.waitFor(1, TimeUnit.MINUTES)) {
                application.destroyForcibly();
            }
        }
    }

    /**
     * The retention scheduler, which also makes the partitions ahead, and the sweeper exist or not as the settings
     * were when the application was processed, while the store and the table follow the settings it starts with: an
     * instance started in the partitioned mode from an image processed with cleanup off and the default mode would have
     * a partitioned table that no one makes partitions for, and one started with cleanup or the sweeper off from an
     * image processed with the defaults would clean up or sweep all the same. It refuses to start, and says why.
     */
    @ParameterizedTest
    @CsvSource({
            "idempotency.retention.cleanup.enabled=false, idempotency.retention.cleanup.mode=drop-partitions,"
                    + " idempotency.retention.cleanup.mode",
            "idempotency.enabled=true, idempotency.sweeper.enabled=false, idempotency.sweeper.enabled"})
    void anInstanceStartedWithSchedulerSettingsTheProcessingDecidedOtherwiseRefusesToStart(
            String processedWith, String startedWith, String named) throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table aot_orders (id bigserial primary key, note text not null)");
        List<String> arguments = database.springPropertyValues().stream().map(property -> "--" + property).toList();
        List<String> process = new ArrayList<>(arguments);
        process.add("--" + processedWith);
        String classPath = processed(process);

        int port = FreePorts.outsideEphemeralRange();
        List<String> run = new ArrayList<>(List.of(AotApplication.class.getName(), "--server.port=" + port,
                "--" + startedWith));
        run.addAll(arguments);
        Path log = work.resolve("run.log");
        Process application = java(List.of("-Dspring.aot.enabled=true", "-cp", classPath), run, log);
        try {
            awaitStartedOrStopped(application, log);
            if (application.isAlive()) {
                HttpResponse<String> claim = post(port, "/aot/orders", "aot-partitioned", "{\"note\":\"p\"}");
                throw new AssertionError("the instance started, and a request was answered " + claim.statusCode()
                        + " " + claim.body());
            }
            assertThat(Files.readString(log)).contains("processed ahead of time", named);
        } finally {
            application.destroy();
            if (!application.waitFor(1, TimeUnit.MINUTES)) {
                application.destroyForcibly();
            }
        }
    }

    /**
     * An image processed with the starter off has no advice: one started with it on refuses to start, as an application
     * whose starter could not be configured does, and says that the processing is why, not a cause of its own.
     */
    @Test
    void anInstanceStartedWithTheStarterOnFromAnImageProcessedWithItOffSaysWhy() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        List<String> arguments = database.springPropertyValues().stream().map(property -> "--" + property).toList();
        List<String> process = new ArrayList<>(arguments);
        process.add("--idempotency.enabled=false");
        String classPath = processed(process);

        List<String> run = new ArrayList<>(List.of(AotApplication.class.getName(), "--server.port=0"));
        run.addAll(arguments);
        Path log = work.resolve("run.log");
        Process application = java(List.of("-Dspring.aot.enabled=true", "-cp", classPath), run, log);
        try {
            awaitStartedOrStopped(application, log);
            String text = Files.readString(log);
            assertThat(application.isAlive()).as(text).isFalse();
            assertThat(text).contains("@Idempotent has no effect in this application")
                    .contains("processed ahead of time with the starter off");
        } finally {
            application.destroy();
            if (!application.waitFor(1, TimeUnit.MINUTES)) {
                application.destroyForcibly();
            }
        }
    }

    private static void awaitStartedOrStopped(Process application, Path log) throws Exception {
        long deadline = System.nanoTime() + START.toNanos();
        while (application.isAlive() && !Files.readString(log).contains("Started AotApplication")
                && System.nanoTime() < deadline) {
            Thread.sleep(200);
        }
    }

    /**
     * The application processed ahead of time with {@code arguments} (as {@code spring-boot:process-aot} runs it), its
     * generated sources compiled: the class path it runs on with the generated code.
     */
    private String processed(List<String> arguments) throws Exception {
        Path sources = Files.createDirectories(work.resolve("sources"));
        Path resources = Files.createDirectories(work.resolve("resources"));
        Path classes = Files.createDirectories(work.resolve("classes"));
        List<String> process = new ArrayList<>(List.of("org.springframework.boot.SpringApplicationAotProcessor",
                AotApplication.class.getName(), sources.toString(), resources.toString(), classes.toString(),
                "io.idempotency", "aot-test"));
        process.addAll(arguments);
        assertThat(java(List.of(), process, work.resolve("process.log")).waitFor(5, TimeUnit.MINUTES)).isTrue();
        assertThat(sources.resolve("io/idempotency/spring/aot/AotApplication__ApplicationContextInitializer.java"))
                .as(Files.readString(work.resolve("process.log"))).exists();

        JavaCompiler compiler = ToolProvider.getSystemJavaCompiler();
        // the classes the processing generated as bytecode (CGLIB proxies) are referenced by the generated sources
        List<String> javac = new ArrayList<>(List.of("-d", classes.toString(), "-cp",
                classes + File.pathSeparator + System.getProperty("java.class.path"), "-parameters", "-proc:none",
                "-nowarn"));
        try (Stream<Path> files = Files.walk(sources)) {
            files.filter(file -> file.toString().endsWith(".java")).forEach(file -> javac.add(file.toString()));
        }
        assertThat(compiler.run(null, null, null, javac.toArray(String[]::new))).isZero();
        return resources + File.pathSeparator + classes + File.pathSeparator + System.getProperty("java.class.path");
    }

    /** The names of the methods of {@code type} that the reachability metadata lets a native image invoke. */
    private static List<String> reflectedMethods(Path metadata, Class<?> type) throws IOException {
        List<String> methods = new ArrayList<>();
        reflection(metadata, type).path("methods").forEach(method -> methods.add(method.path("name").asString()));
        return methods;
    }

    /** The reachability metadata's reflection entry of {@code type}; a missing node if it has none. */
    private static JsonNode reflection(Path metadata, Class<?> type) throws IOException {
        for (JsonNode hint : JsonMapper.builder().build().readTree(Files.readString(metadata)).path("reflection")) {
            if (type.getName().equals(hint.path("type").stringValue(null))) {
                return hint;
            }
        }
        return MissingNode.getInstance();
    }

    /** @param key the Idempotency-Key header's value; none if null */
    private static HttpResponse<String> post(int port, String path, String key, String body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .header("Content-Type", "application/json").timeout(Duration.ofMinutes(1))
                .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    static void awaitStarted(Process application, Path log) throws Exception {
        long deadline = System.nanoTime() + START.toNanos();
        while (System.nanoTime() < deadline) {
            String text = Files.exists(log) ? Files.readString(log) : "";
            if (text.contains("Started AotApplication")) {
                return;
            }
            assertThat(application.isAlive()).as("the application stopped:\n" + text).isTrue();
            Thread.sleep(200);
        }
        throw new AssertionError("not started within " + START + ":\n" + Files.readString(log));
    }
}
