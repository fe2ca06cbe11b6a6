package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A storm of one key must not drain the connection pool: 50 concurrent requests with one key against a pool of 10
 * connections that gives up after 1 s. Duplicates wait in memory behind the one request that claimed the key, so the
 * storm holds one connection (none of its duplicates waits in the database) and other endpoints keep answering
 * meanwhile.
 */
@TestPropertySource(properties = {"spring.datasource.hikari.maximum-pool-size=10",
                "spring.datasource.hikari.connection-timeout=1000",
                "idempotency.in-flight-wait=8s",
                "server.tomcat.threads.max=100"})
class InFlightStormIntegrationTest extends OrdersApplicationTest {

    @Test
    void fiftyRequestsWithOneKeyExecuteOnceWhileOtherEndpointsStillAnswer() throws Exception {
        HttpClient http = HttpClient.newBuilder().executor(Executors.newFixedThreadPool(60)).build();
        String key = UUID.randomUUID().toString();
        String note = "storm-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        int storm = 50;
        ExecutorService clients = Executors.newFixedThreadPool(storm);
        CountDownLatch go = new CountDownLatch(1);
        List<CompletableFuture<HttpResponse<String>>> answers = new ArrayList<>();
        for (int i = 0; i < storm; i++) {
            answers.add(CompletableFuture.supplyAsync(() -> {
                try {
                    go.await();
                    return http.send(postWithTimeout("/orders/slow?millis=5000", body)
                            .header("Idempotency-Key", key).build(), HttpResponse.BodyHandlers.ofString());
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }, clients));
        }
        go.countDown();
        awaitHandlerInItsTransaction(); // the first request holds its connection for 5 s; the others wait behind it
        // a duplicate that took a connection would wait in the database, for the first request's uncommitted claim
        // (the database is shared with the other test classes' applications, whose background work waits for no lock)
        int waitingInTheDatabase = 0;
        for (int i = 0; i < 20; i++) {
            waitingInTheDatabase = Math.max(waitingInTheDatabase, (int) DATABASE.queryLong("select count(*) from"
                    + " pg_stat_activity where application_name = '" + DATABASE.schema() + "'"
                    + " and wait_event_type = 'Lock'"));
            Thread.sleep(10);
        }

        List<Integer> others = new ArrayList<>();
        for (int i = 0; i < 12; i++) { // more requests than the pool has connections, one after the other
            others.add(http.send(postWithTimeout("/orders/plain", "{\"note\":\"other-" + key + "\"}").build(),
                    HttpResponse.BodyHandlers.ofString()).statusCode());
        }
        assertThat(answers).as("the storm was still waiting for its first request while the others were answered")
                .noneMatch(CompletableFuture::isDone);

        Map<Integer, Integer> statuses = new TreeMap<>();
        String created = null;
        int executed = 0;
        int replayed = 0;
        for (CompletableFuture<HttpResponse<String>> future : answers) {
            HttpResponse<String> answer = future.get(60, TimeUnit.SECONDS);
            statuses.merge(answer.statusCode(), 1, Integer::sum);
            if (answer.statusCode() == 201) {
                if (created == null) {
                    created = answer.body();
                }
                assertThat(answer.body()).isEqualTo(created);
                if (answer.headers().firstValue("Idempotent-Replayed").isPresent()) {
                    replayed++;
                } else {
                    executed++;
                }
            } else {
                assertThat(answer.statusCode()).isEqualTo(409);
                assertThat(answer.headers().firstValue("Retry-After")).isPresent();
            }
        }
        System.out.println("[storm] 50 requests with one key, pool of 10: answers " + statuses + " (" + replayed
                + " replays), duplicates waiting in the database at most " + waitingInTheDatabase
                + ", other endpoint meanwhile " + others);
        clients.shutdownNow();

        assertThat(others).as("the other endpoint kept its connections").containsOnly(201);
        assertThat(DATABASE.queryLong("select count(*) from orders where note = '" + note + "'"))
                .as("executions").isEqualTo(1);
        assertThat(executed).as("answers of a run of the handler").isEqualTo(1);
        assertThat(replayed).as("duplicates answered with its replay once it completed").isPositive();
        assertThat(waitingInTheDatabase).as("duplicates that took a connection to wait in the database").isZero();
    }

    private HttpRequest.Builder postWithTimeout(String path, String body) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
    }
}
