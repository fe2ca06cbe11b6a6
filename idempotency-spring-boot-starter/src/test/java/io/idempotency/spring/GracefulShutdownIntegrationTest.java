package io.idempotency.spring;

import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An application shutting down (Spring Boot's default graceful shutdown) while an intent-first request runs: the web
 * server drains it before the engine stops renewing leases, so its claim is never left to another instance while it
 * still runs, and its result is recorded; a duplicate waiting for it in memory is drained too, and gets its answer.
 * No thread the library started outlives the context.
 */
@Tag("container")
class GracefulShutdownIntegrationTest {

    @Test
    void anIntentFirstRequestInFlightKeepsItsLeaseWhileTheServerDrainsAndRecordsItsResult() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        ConfigurableApplicationContext context = application(database, "idempotency.sweeper.enabled=false").run();
        int port = port(context);
        // lease 2 s, renewed every third of it; the handler runs 6 s, most of it after the shutdown began: had the
        // renewals stopped when the shutdown began, the lease would have run out while the handler ran, and a renewal
        // late by up to a second while the closing context takes the machine still keeps it
        CompletableFuture<HttpResponse<String>> answer = HttpClient.newHttpClient().sendAsync(
                HttpRequest.newBuilder(URI.create("http://localhost:" + port
                                + "/intent/charges-with-a-two-second-lease"))
                        .header("Content-Type", "application/json").header("Idempotency-Key", "draining")
                        .header("X-Sleep-Ms", "6000")
                        .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"draining\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (database.queryLong("select count(*) from idempotency_keys where idempotency_key = 'draining'") == 0
                && System.nanoTime() < deadline) { // the intent is committed before the handler runs
            Thread.sleep(20);
        }
        assertThat(answer).as("still running when the shutdown begins").isNotDone();

        CompletableFuture<Void> closed = Async.run(context::close);
        long leftLeast = Long.MAX_VALUE;
        while (!answer.isDone()) {
            // what is left of the lease, by the database clock: a second instance takes the claim over at zero
            String left = database.queryString("select (extract(epoch from locked_until - now()) * 1000)::bigint"
                    + " from idempotency_keys where idempotency_key = 'draining' and status = 'PROCESSING'");
            if (left != null) {
                leftLeast = Math.min(leftLeast, Long.parseLong(left));
            }
            Thread.sleep(50);
        }
        closed.get(30, TimeUnit.SECONDS);

        assertThat(answer.get().statusCode()).isEqualTo(201);
        assertThat(database.queryString("select status from idempotency_keys where idempotency_key = 'draining'"))
                .isEqualTo("SUCCEEDED");
        assertThat(leftLeast).as("the lease never ran out while the handler ran").isPositive();
    }

    @Test
    void aDuplicateWaitingInMemoryWhenTheShutdownBeginsGetsTheAnswerOfTheRequestItWaitsFor() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        // requests on platform threads, where requestsInTheAdvice() sees them (it cannot see virtual threads): an
        // argument, which outranks a system property that would switch them on
        ConfigurableApplicationContext context = application(database, "idempotency.sweeper.enabled=false",
                "idempotency.in-flight-wait=20s").run("--spring.threads.virtual.enabled=false");
        int port = port(context);
        // HTTP/1.1: an h2c upgrade pending on the first request's connection would hold the duplicate back
        HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/intent/charges"))
                .header("Content-Type", "application/json").header("Idempotency-Key", "waiting")
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"waiting\"}"));
        CompletableFuture<HttpResponse<String>> first = http.sendAsync(request.copy().header("X-Sleep-Ms", "3000")
                .build(), HttpResponse.BodyHandlers.ofString());
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (database.queryLong("select count(*) from idempotency_keys") == 0 && System.nanoTime() < deadline) {
            Thread.sleep(20); // the intent is committed before the handler runs
        }
        CompletableFuture<HttpResponse<String>> duplicate = http.sendAsync(request.build(),
                HttpResponse.BodyHandlers.ofString());
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (requestsInTheAdvice() < 2 && System.nanoTime() < deadline) {
            Thread.sleep(20); // the duplicate reaches the server, and waits behind the first request
        }
        assertThat(duplicate).as("waiting when the shutdown begins").isNotDone();

        CompletableFuture<Void> closed = Async.run(context::close);

        assertThat(first.get(30, TimeUnit.SECONDS).statusCode()).isEqualTo(201);
        HttpResponse<String> replayed = duplicate.get(30, TimeUnit.SECONDS);
        assertThat(replayed.statusCode()).isEqualTo(201);
        assertThat(replayed.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replayed.body()).isEqualTo(first.get().body());
        closed.get(30, TimeUnit.SECONDS);
        assertThat(database.queryLong("select count(*) from orders")).as("charged once").isEqualTo(1);
    }

    @Test
    void noThreadOfTheLibraryOutlivesTheContext() throws Exception {
        // other contexts of this test JVM (cached by Spring's test support, say) may still run theirs
        Set<Thread> before = Set.copyOf(libraryThreads());
        TestPostgres.Database database = TestDatabases.withOrders();
        ConfigurableApplicationContext context = application(database, "idempotency.sweeper.interval=50ms",
                "idempotency.retention.cleanup.interval=50ms").run();
        int port = port(context);
        HttpResponse<String> answer = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/intent/charges"))
                        .header("Content-Type", "application/json").header("Idempotency-Key", "threads")
                        .header("X-Sleep-Ms", "500") // long enough for its lease of 1 s to be renewed
                        .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"threads\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertThat(answer.statusCode()).isEqualTo(201);
        List<Thread> started = libraryThreads().stream().filter(thread -> !before.contains(thread)).toList();
        assertThat(started).extracting(Thread::getName)
                .contains("idempotency-lease-renewal", "idempotency-sweeper", "idempotency-cleanup");

        context.close();

        for (Thread thread : started) {
            thread.join(TimeUnit.SECONDS.toMillis(10)); // one may still be on its way out
        }
        assertThat(started).as("threads of the library's context alive after it closed")
                .filteredOn(Thread::isAlive).isEmpty();
        assertThat(started).as("none would keep the JVM from exiting").allMatch(Thread::isDaemon);
    }

    /** The test application on {@code database}, at a random port, with {@code properties} besides: to be run. */
    private static SpringApplicationBuilder application(TestPostgres.Database database, String... properties) {
        List<String> all = new ArrayList<>(database.springPropertyValues());
        all.add("server.port=0");
        all.addAll(List.of(properties));
        return new SpringApplicationBuilder(TestApplication.class).properties(all.toArray(String[]::new));
    }

    private static int port(ConfigurableApplicationContext context) {
        return ((WebServerApplicationContext) context).getWebServer().getPort();
    }

    private static List<Thread> libraryThreads() {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(thread -> thread.getName().startsWith("idempotency-") && thread.isAlive()).toList();
    }

    /**
     * The requests inside the {@code @Idempotent} advice (running their handler, or waiting in memory for a duplicate's
     * outcome), counted by the threads' stacks: the same on every servlet container.
     */
    private static long requestsInTheAdvice() {
        return Thread.getAllStackTraces().values().stream().filter(stack -> Arrays.stream(stack)
                .anyMatch(frame -> frame.getClassName().equals(IdempotentMethodInterceptor.class.getName()))).count();
    }
}
