package io.idempotency.spring;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An application shutting down while its sweeper asks the resolver about a stale claim: the sweep neither holds up
 * the web server's graceful shutdown nor keeps the claim from the other instances.
 */
@Tag("container")
class ShutdownDuringSweepIntegrationTest {

    /** Counted down when the resolver is asked. */
    static volatile CountDownLatch asked;
    /** What the resolver waits for. */
    static volatile CountDownLatch answer;
    /** Whether the resolver's wait ends on an interrupt (a call that can be cancelled) or only on {@link #answer}. */
    static volatile boolean interruptible;

    @Configuration(proxyBeanMethods = false)
    @EnableAutoConfiguration
    @Import(UnknownOutcomeController.class)
    static class SweepingApplication {

        /** Asks a third party that does not answer. */
        @Bean
        StaleClaimResolver slowResolver() {
            return claim -> {
                asked.countDown();
                boolean interrupted = false;
                try {
                    while (true) {
                        try {
                            answer.await();
                            break;
                        } catch (InterruptedException e) {
                            if (interruptible) {
                                Thread.currentThread().interrupt();
                                throw new IllegalStateException("the call to the third party was interrupted", e);
                            }
                            interrupted = true;
                        }
                    }
                } finally {
                    if (interrupted) {
                        Thread.currentThread().interrupt();
                    }
                }
                return StaleClaimResolver.Resolution.rerun();
            };
        }
    }

    @RestController
    static class UnknownOutcomeController {

        /** Leaves its claim PROCESSING: the outcome of its call is unknown. */
        @PostMapping("/unknown")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "100ms")
        String unknown(@RequestBody String body) {
            throw new IllegalStateException("the third party did not answer: did the charge happen?");
        }

        @GetMapping("/ping")
        String ping() {
            return "pong";
        }
    }

    private ConfigurableApplicationContext context;
    private int port;

    @AfterEach
    void releaseTheResolver() {
        if (answer != null) {
            answer.countDown();
        }
        if (context != null) {
            context.close();
        }
    }

    /** Starts the application with a stale claim its sweeper is asking the resolver about. */
    private TestPostgres.Database sweeping(boolean resolverInterruptible, String... extra) throws Exception {
        asked = new CountDownLatch(1);
        answer = new CountDownLatch(1);
        interruptible = resolverInterruptible;
        TestPostgres.Database database = TestDatabases.withOrders();
        List<String> properties = new ArrayList<>(database.springPropertyValues());
        properties.add("server.port=0");
        properties.add("idempotency.downstream-key-secret=shutdown-test");
        properties.add("idempotency.sweeper.interval=100ms");
        properties.addAll(List.of(extra));
        context = new SpringApplicationBuilder(SweepingApplication.class).properties(properties.toArray(String[]::new))
                .run();
        port = ((WebServerApplicationContext) context).getWebServer().getPort();
        HttpResponse<String> failed = HttpClient.newHttpClient().send(HttpRequest.newBuilder(uri("/unknown"))
                        .header("Content-Type", "application/json").header("Idempotency-Key", "stale")
                        .POST(HttpRequest.BodyPublishers.ofString("{}")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertThat(failed.statusCode()).isEqualTo(500);
        assertThat(asked.await(10, TimeUnit.SECONDS)).as("the sweeper asks the resolver about the stale claim")
                .isTrue();
        return database;
    }

    private URI uri(String path) {
        return URI.create("http://localhost:" + port + path);
    }

    @Test
    void aSweepThatDoesNotEndWhenAskedDoesNotKeepTheWebServerTakingRequests() throws Exception {
        sweeping(false, "spring.lifecycle.timeout-per-shutdown-phase=20s");

        long closing = System.nanoTime();
        Async.run(context::close);
        // the web server stops taking requests as soon as its graceful shutdown begins
        Duration taking = null;
        while (taking == null && System.nanoTime() - closing < TimeUnit.SECONDS.toNanos(30)) {
            try {
                HttpClient.newHttpClient().send(HttpRequest.newBuilder(uri("/ping")).timeout(Duration.ofSeconds(5))
                        .build(), HttpResponse.BodyHandlers.ofString());
                Thread.sleep(50);
            } catch (IOException refused) {
                taking = Duration.ofNanos(System.nanoTime() - closing);
            }
        }

        assertThat(taking).as("how long the web server still took requests after the shutdown began")
                .isNotNull().isLessThan(Duration.ofSeconds(5));
    }

    @Test
    void aClaimWhoseResolverTheShutdownInterruptedIsLeftToTheOtherInstancesAtOnce() throws Exception {
        TestPostgres.Database database = sweeping(true);

        context.close();

        assertThat(database.queryString("select status from idempotency_keys where idempotency_key = 'stale'"))
                .as("nothing was decided about the claim").isEqualTo("PROCESSING");
        // the sweeper took the claim over with the lease of idempotency.lease (5 min): held that long, every retry of
        // the request would be told "in progress", and no sweeper of another instance could ask about it
        assertThat(database.queryString("select locked_until < now() + interval '1 second' from idempotency_keys"
                + " where idempotency_key = 'stale'")).as("the claim can be taken over at once").isEqualTo("t");
    }
}
