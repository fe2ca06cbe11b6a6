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
 * storm holds one connection and other endpoints keep answering.
 */
@TestPropertySource(properties = {"spring.datasource.hikari.maximum-pool-size=10",
                "spring.datasource.hikari.connection-timeout=1000",
                "idempotency.in-flight-wait=5s",
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
                    return http.send(postWithTimeout("/orders/slow?millis=1500", body).header("Idempotency-Key", key).build(),
                            HttpResponse.BodyHandlers.ofString());
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }, clients));
        }
        go.countDown();
        Thread.sleep(500); // the storm is waiting on the first request, which holds its connection for 1.5 s

        List<Integer> others = new ArrayList<>();
        for (int i = 0; i < 12; i++) { // more requests than the pool has connections, one after the other
            others.add(http.send(postWithTimeout("/orders/plain", "{\"note\":\"other-" + key + "\"}").build(),
                    HttpResponse.BodyHandlers.ofString()).statusCode());
        }

        Map<Integer, Integer> statuses = new TreeMap<>();
        String created = null;
        for (CompletableFuture<HttpResponse<String>> future : answers) {
            HttpResponse<String> answer = future.get(60, TimeUnit.SECONDS);
            statuses.merge(answer.statusCode(), 1, Integer::sum);
            if (answer.statusCode() == 201) {
                if (created == null) {
                    created = answer.body();
                }
                assertThat(answer.body()).isEqualTo(created);
            } else {
                assertThat(answer.statusCode()).isEqualTo(409);
                assertThat(answer.headers().firstValue("Retry-After")).isPresent();
            }
        }
        System.out.println("[storm] 50 requests with one key, pool of 10: answers " + statuses
                + ", other endpoint meanwhile " + others);
        clients.shutdownNow();

        assertThat(others).as("the other endpoint kept its connections").containsOnly(201);
        assertThat(DATABASE.queryLong("select count(*) from orders where note = '" + note + "'"))
                .as("executions").isEqualTo(1);
        assertThat(statuses.getOrDefault(201, 0)).isPositive();
    }

    private HttpRequest.Builder postWithTimeout(String path, String body) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
    }
}
