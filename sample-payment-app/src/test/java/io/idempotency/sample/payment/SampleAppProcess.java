package io.idempotency.sample.payment;

import io.idempotency.testkit.FreePorts;

import java.io.IOException;
import java.io.UncheckedIOException;
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

/**
 * The sample application running in a JVM of its own, so that tests can kill it for real ({@code Runtime.halt}
 * inside it, or SIGKILL from outside) and start it again. It runs from the test's own class path, with an archive of
 * the classes it loads ({@link SampleAppClasses}); its output goes to a log file, which is shown when it fails to come
 * up.
 */
final class SampleAppProcess implements AutoCloseable {

    private static final Duration STARTUP_TIMEOUT = Duration.ofSeconds(60);

    private final String name;
    private final int port;
    private final Path log;
    private final Process process;

    private SampleAppProcess(String name, int port, Path log, Process process) {
        this.name = name;
        this.port = port;
        this.log = log;
        this.process = process;
    }

    /**
     * Launches the application with {@code args} (Spring Boot command-line properties such as
     * {@code --sample.chaos.enabled=true}) on a free port; does not wait for it to be ready.
     */
    static SampleAppProcess launch(String name, Path logDir, List<String> args) throws IOException {
        int port = FreePorts.outsideEphemeralRange();
        Files.createDirectories(logDir);
        Path log = logDir.resolve(name + "-" + System.currentTimeMillis() + ".log");
        SampleAppClasses.Launch launch = SampleAppClasses.launch();
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(SampleAppClasses.jvmOptions());
        command.addAll(launch.options());
        command.addAll(List.of("-cp", launch.classPath(), SamplePaymentApplication.class.getName(),
                "--server.port=" + port, "--spring.main.banner-mode=off"));
        command.addAll(args);
        Process process = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(log.toFile())
                .start();
        return new SampleAppProcess(name, port, log, process);
    }

    /** Launches and waits until {@code /actuator/health} is UP. */
    static SampleAppProcess start(String name, Path logDir, List<String> args) throws IOException,
            InterruptedException {
        SampleAppProcess app = launch(name, logDir, args);
        app.awaitHealthy();
        return app;
    }

    int port() {
        return port;
    }

    PaymentApi api() {
        return PaymentApi.onPort(port);
    }

    Process process() {
        return process;
    }

    /** Waits until the application answers {@code /actuator/health} with UP; fails with its log otherwise. */
    void awaitHealthy() throws InterruptedException {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(1)).build();
        HttpRequest health = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/actuator/health"))
                .timeout(Duration.ofSeconds(2))
                .build();
        long deadline = System.nanoTime() + STARTUP_TIMEOUT.toNanos();
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException(name + " exited with " + process.exitValue()
                        + " while starting:\n" + output());
            }
            try {
                HttpResponse<String> response = http.send(health, HttpResponse.BodyHandlers.ofString());
                if (response.statusCode() == 200 && response.body().contains("\"UP\"")) {
                    return;
                }
            } catch (IOException e) {
                // not listening yet
            }
            TimeUnit.MILLISECONDS.sleep(200);
        }
        process.destroyForcibly();
        throw new IllegalStateException(name + " was not healthy within " + STARTUP_TIMEOUT + ":\n" + output());
    }

    /** Waits for the process to end by itself (e.g. after a halt) and returns its exit status. */
    int awaitExit(Duration timeout) throws InterruptedException {
        if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException(name + " did not exit within " + timeout + ":\n" + output());
        }
        return process.exitValue();
    }

    /** Stops the application gracefully (SIGTERM, so it closes its context and database), killing it if it hangs. */
    @Override
    public void close() throws InterruptedException {
        if (!process.isAlive()) {
            return;
        }
        process.destroy();
        if (!process.waitFor(30, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }

    /** Everything the application printed so far. */
    String output() {
        try {
            return Files.readString(log, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    Path log() {
        return log;
    }
}
