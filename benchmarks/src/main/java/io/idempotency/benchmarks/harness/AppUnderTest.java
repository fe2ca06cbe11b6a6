package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.BenchApplication;
import io.idempotency.benchmarks.instrument.CountingSocketFactory;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * The application under test ({@link BenchApplication}) in a JVM of its own, on the harness's classpath, so that
 * client and server do not share a heap or JIT. Its output goes to a log file.
 */
final class AppUnderTest implements AutoCloseable {

    static final String HOST = "127.0.0.1";

    private final Process process;
    private final int port;
    private final Path log;
    private final HttpClient control = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    private final JsonMapper json = JsonMapper.builder().build();

    private AppUnderTest(Process process, int port, Path log) {
        this.process = process;
        this.port = port;
        this.log = log;
    }

    static AppUnderTest start(BenchDatabase database, Path log, String heap) throws IOException, InterruptedException {
        int port;
        try (ServerSocket free = new ServerSocket(0)) {
            port = free.getLocalPort();
        }
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("-Xms" + heap);
        command.add("-Xmx" + heap);
        String extraOptions = System.getenv("BENCH_APP_JAVA_OPTIONS"); // e.g. a profiler's, see docs/performance.md
        if (extraOptions != null && !extraOptions.isBlank()) {
            command.addAll(List.of(extraOptions.trim().split("\\s+")));
        }
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(BenchApplication.class.getName());
        command.add("--server.port=" + port);
        command.add("--server.address=" + HOST);
        command.add("--spring.datasource.url=" + database.applicationUrl(CountingSocketFactory.class.getName()));
        if (database.user() != null) {
            command.add("--spring.datasource.username=" + database.user());
        }
        if (database.password() != null) {
            command.add("--spring.datasource.password=" + database.password());
        }
        Files.createDirectories(log.getParent());
        Process process = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(log.toFile()).start();
        AppUnderTest app = new AppUnderTest(process, port, log);
        Runtime.getRuntime().addShutdownHook(new Thread(process::destroy, "stop-app-under-test"));
        try {
            app.awaitReady(Duration.ofSeconds(120));
        } catch (IOException | InterruptedException | RuntimeException e) {
            // nothing else stops it before this JVM exits, and the schema's drop would wait for the locks it holds
            try {
                app.close();
            } catch (InterruptedException stopping) {
                e.addSuppressed(stopping);
                Thread.currentThread().interrupt();
            }
            throw e;
        }
        return app;
    }

    int port() {
        return port;
    }

    long pid() {
        return process.pid();
    }

    private void awaitReady(Duration timeout) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("the application under test exited with " + process.exitValue()
                        + "; its log (" + log + "):\n" + tail());
            }
            try {
                HttpResponse<String> response = control.send(request("/bench/ready").GET().build(),
                        HttpResponse.BodyHandlers.ofString());
                if (response.statusCode() == 200) {
                    return;
                }
            } catch (IOException notYet) {
                // not listening yet
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("the application under test did not start in " + timeout + "; its log ("
                + log + "):\n" + tail());
    }

    /** Forgets every statistic gathered so far (after a warm-up). */
    void resetStats() throws IOException, InterruptedException {
        HttpResponse<String> response = control.send(request("/bench/reset")
                .POST(HttpRequest.BodyPublishers.noBody()).build(), HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 204) {
            throw new IllegalStateException("reset answered " + response.statusCode());
        }
    }

    /** The statistics of {@code /bench/stats}. */
    JsonNode stats() throws IOException, InterruptedException {
        HttpResponse<String> response = control.send(request("/bench/stats").GET().build(),
                HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IllegalStateException("stats answered " + response.statusCode() + ": " + response.body());
        }
        return json.readTree(response.body());
    }

    private HttpRequest.Builder request(String path) {
        return HttpRequest.newBuilder(URI.create("http://" + HOST + ":" + port + path)).timeout(Duration.ofSeconds(30));
    }

    String tail() {
        try {
            List<String> lines = Files.readAllLines(log);
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e.getMessage() + ")";
        }
    }

    @Override
    public void close() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(20, java.util.concurrent.TimeUnit.SECONDS)) {
            process.destroyForcibly();
            process.waitFor();
        }
    }
}
