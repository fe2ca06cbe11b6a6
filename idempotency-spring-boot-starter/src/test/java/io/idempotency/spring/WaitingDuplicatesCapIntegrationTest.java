package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code idempotency.max-waiting-duplicates}: while one request holds its key, no more duplicates wait for it in the
 * instance than the setting allows; the others are answered 409 at once, with {@code Retry-After}, instead of holding
 * a thread each for the in-flight wait. Those that waited get the first request's answer.
 */
@TestPropertySource(properties = {"idempotency.max-waiting-duplicates=3", "idempotency.in-flight-wait=20s"})
class WaitingDuplicatesCapIntegrationTest extends OrdersApplicationTest {

    @Test
    void duplicatesBeyondTheCapAreAnsweredInProgressAtOnce() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"capped-" + key + "\"}";
        CompletableFuture<HttpResponse<String>> first = http.sendAsync(slowRequest(key, body),
                HttpResponse.BodyHandlers.ofString());
        awaitHandlerInItsTransaction(); // it holds the key for 6 s

        List<CompletableFuture<HttpResponse<String>>> duplicates = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            duplicates.add(http.sendAsync(slowRequest(key, body), HttpResponse.BodyHandlers.ofString()));
        }
        // seven of them cannot wait: answered while the first still runs
        List<HttpResponse<String>> atOnce = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (atOnce.size() < 7 && System.nanoTime() - deadline < 0) {
            atOnce.clear();
            for (CompletableFuture<HttpResponse<String>> duplicate : duplicates) {
                if (duplicate.isDone()) {
                    atOnce.add(duplicate.get());
                }
            }
            Thread.sleep(10);
        }
        assertThat(first).as("the first request, still running").isNotDone();
        assertThat(atOnce).as("duplicates answered while the first runs").hasSize(7).allSatisfy(answer -> {
            assertThat(answer.statusCode()).isEqualTo(409);
            assertThat(answer.headers().firstValue("Retry-After")).isPresent();
            assertThat(answer.body()).contains("idempotency-request-in-progress");
        });

        HttpResponse<String> created = first.get(30, TimeUnit.SECONDS);
        assertThat(created.statusCode()).isEqualTo(201);
        List<HttpResponse<String>> waited = new ArrayList<>();
        for (CompletableFuture<HttpResponse<String>> duplicate : duplicates) {
            HttpResponse<String> answer = duplicate.get(30, TimeUnit.SECONDS);
            if (answer.statusCode() != 409) {
                waited.add(answer);
            }
        }
        assertThat(waited).as("the duplicates that waited").hasSize(3).allSatisfy(answer -> {
            assertThat(answer.statusCode()).isEqualTo(201);
            assertThat(answer.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(answer.body()).isEqualTo(created.body());
        });
        assertThat(rows("capped-" + key)).isEqualTo(1);
    }

    private HttpRequest slowRequest(String key, String body) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders/slow?millis=6000"))
                .timeout(Duration.ofSeconds(60))
                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build();
    }
}
