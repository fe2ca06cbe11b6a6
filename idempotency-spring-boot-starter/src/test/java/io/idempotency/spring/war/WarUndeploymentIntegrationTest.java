package io.idempotency.spring.war;

import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A war undeployed from the container that runs it (a redeploy, a container's manager): the application context is
 * closed by the container, and no thread of the library outlives it — Tomcat's class loader reports none it would
 * have to leave running, which would hold the old application's classes and its pool's connections.
 */
class WarUndeploymentIntegrationTest {

    private StandaloneTomcat tomcat;

    @AfterEach
    void stop() throws Exception {
        if (tomcat != null) {
            tomcat.close();
        }
    }

    @Test
    void undeployingTheWarStopsEveryThreadOfTheLibraryAndTomcatReportsNoLeak() throws Exception {
        Set<Thread> before = Set.copyOf(libraryThreads());
        TestPostgres.Database database = WarDeploymentIntegrationTest.withOrders();
        tomcat = new StandaloneTomcat();
        tomcat.deploy("/shop", WarApplication.class, WarDeploymentIntegrationTest.parameters(
                database, "idempotency.sweeper.interval=50ms", "idempotency.retention.cleanup.interval=50ms"));
        tomcat.start();
        HttpResponse<String> answer = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://localhost:" + tomcat.port() + "/shop/charges"))
                        .header("Content-Type", "application/json").header("Idempotency-Key", "undeploy")
                        .header("X-Sleep-Ms", "1000") // long enough for its lease of 2 s to be renewed
                        .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"undeploy\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertThat(answer.statusCode()).isEqualTo(201);
        List<Thread> started = libraryThreads().stream().filter(thread -> !before.contains(thread)).toList();
        assertThat(started).extracting(Thread::getName)
                .contains("idempotency-lease-renewal", "idempotency-sweeper", "idempotency-cleanup");
        ClassLoader webapp = tomcat.classLoader("/shop");
        assertThat(started).as("threads Tomcat's class loader checks when the application stops")
                .allMatch(thread -> thread.getContextClassLoader() == webapp);
        List<String> reported = new ArrayList<>();
        Logger loader = Logger.getLogger("org.apache.catalina.loader.WebappClassLoaderBase");
        Handler leaks = new Handler() {
            @Override
            public void publish(LogRecord record) {
                reported.add(String.valueOf(record.getMessage()) + " " + java.util.Arrays.toString(
                        record.getParameters()));
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        loader.addHandler(leaks);
        try {
            tomcat.undeploy("/shop");
        } finally {
            loader.removeHandler(leaks);
        }

        assertThat(reported).as("Tomcat's reports of threads the application left running")
                .noneMatch(line -> line.contains("idempotency-"));
        for (Thread thread : started) {
            thread.join(TimeUnit.SECONDS.toMillis(10));
        }
        assertThat(started).as("threads of the library alive after the undeployment").filteredOn(Thread::isAlive)
                .isEmpty();
    }

    /**
     * No embedded server drains the requests of a war: the container waits a moment for them (Tomcat two seconds, its
     * {@code unloadDelay}), then closes the application context under them. The context's shutdown waits for the
     * requests in the idempotency filter instead, so an intent-first request keeps its lease and records its result,
     * as on an embedded server's graceful shutdown.
     */
    @Test
    void anIntentFirstRequestInFlightWhenTheWarIsUndeployedKeepsItsLeaseAndRecordsItsResult() throws Exception {
        TestPostgres.Database database = WarDeploymentIntegrationTest.withOrders();
        tomcat = new StandaloneTomcat();
        tomcat.deploy("/shop", WarApplication.class, WarDeploymentIntegrationTest.parameters(
                database, "idempotency.sweeper.enabled=false"));
        tomcat.start();
        // lease 2 s, renewed every third of it; the handler runs 6 s, most of it after the undeployment began: had the
        // renewals stopped when the context closed (2 s after the undeployment began), the lease would have run out
        // while the handler ran, and a renewal late by up to a second on a loaded machine still keeps it
        CompletableFuture<HttpResponse<String>> answer = HttpClient.newHttpClient().sendAsync(
                HttpRequest.newBuilder(URI.create("http://localhost:" + tomcat.port() + "/shop/charges"))
                        .header("Content-Type", "application/json").header("Idempotency-Key", "in-flight")
                        .header("X-Sleep-Ms", "6000")
                        .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"in-flight\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (database.queryLong("select count(*) from idempotency_keys") == 0 && System.nanoTime() < deadline) {
            Thread.sleep(20); // the intent is committed before the handler runs
        }
        assertThat(answer).as("still running when the undeployment begins").isNotDone();

        CompletableFuture<Void> undeployed = Async.run(() -> tomcat.undeploy("/shop"));
        long leftLeast = Long.MAX_VALUE;
        while (!answer.isDone()) {
            // what is left of the lease, by the database clock: another instance takes the claim over at zero
            String left = database.queryString("select (extract(epoch from locked_until - now()) * 1000)::bigint"
                    + " from idempotency_keys where idempotency_key = 'in-flight' and status = 'PROCESSING'");
            if (left != null) {
                leftLeast = Math.min(leftLeast, Long.parseLong(left));
            }
            Thread.sleep(50);
        }
        undeployed.get(30, TimeUnit.SECONDS);

        assertThat(answer.get().statusCode()).isEqualTo(201);
        assertThat(database.queryString("select status from idempotency_keys where idempotency_key = 'in-flight'"))
                .isEqualTo("SUCCEEDED");
        assertThat(leftLeast).as("the lease never ran out while the handler ran").isPositive();
        assertThat(database.queryLong("select count(*) from orders")).isEqualTo(1);
    }

    private static List<Thread> libraryThreads() {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(thread -> thread.getName().startsWith("idempotency-") && thread.isAlive()).toList();
    }
}
