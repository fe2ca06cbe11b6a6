package io.idempotency.spring;

import io.idempotency.spring.app.OrderController;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.test.context.TestPropertySource;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Idempotent endpoints served over HTTP/2 in cleartext ({@code h2c}): the JDK's client upgrades its connection with
 * {@code Upgrade: h2c} on its first request, and sends every later one as a stream of that one connection. First
 * executions, replays and refusals must be the same as over HTTP/1.1, and headers that HTTP/2 forbids, which a handler
 * may still set, must not break the stream, neither when the handler's answer is sent nor when it is replayed.
 * <p>
 * Tomcat serves h2c with what it has; Jetty needs {@code jetty-http2-server}, which {@code spring-boot-starter-jetty}
 * does not bring, and which {@code idempotency-jetty-tests} adds to run these there too.
 */
@TestPropertySource(properties = {"server.http2.enabled=true", "idempotency.in-flight-wait=300ms"})
class Http2CleartextIntegrationTest extends OrdersApplicationTest {

    final HttpClient h2 = HttpClient.newBuilder().version(HttpClient.Version.HTTP_2).build();

    /** Upgrades the client's connection with a GET, so that every request of a test goes over HTTP/2. */
    @BeforeEach
    void upgrade() throws Exception {
        HttpResponse<byte[]> upgraded = h2.send(HttpRequest.newBuilder(uri("/orders/wrapped")).GET().build(),
                HttpResponse.BodyHandlers.ofByteArray());
        assertThat(upgraded.statusCode()).isEqualTo(200);
        assertThat(upgraded.version()).as("the server took the h2c upgrade").isEqualTo(HttpClient.Version.HTTP_2);
    }

    URI uri(String path) {
        return URI.create("http://localhost:" + port + path);
    }

    HttpResponse<byte[]> h2Post(String path, String key, String body) throws Exception {
        HttpResponse<byte[]> response = h2.send(request(path, body).header("Idempotency-Key", key)
                .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofByteArray());
        assertThat(response.version()).as("sent over HTTP/2").isEqualTo(HttpClient.Version.HTTP_2);
        return response;
    }

    @Test
    void aReplayOverHttp2IsTheFirstAnswerByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-" + key + "\",\"amount\":12.5}";

        HttpResponse<byte[]> first = h2Post("/orders", key, body);
        HttpResponse<byte[]> replay = h2Post("/orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        for (String name : List.of("Location", "ETag", "Content-Type")) {
            assertThat(replay.headers().allValues(name)).as(name).isEqualTo(first.headers().allValues(name));
        }
        assertThat(replay.headers().firstValue("Set-Cookie")).as("never stored").isEmpty();
        assertThat(replay.headers().firstValue("X-Not-Replayed")).isEmpty();
        assertThat(rows("h2-" + key)).isOne();
    }

    @Test
    void anotherBodyUnderTheKeyIsRefusedOverHttp2() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> first = h2Post("/orders", key, "{\"note\":\"h2-mismatch-" + key + "\"}");
        HttpResponse<byte[]> other = h2Post("/orders", key, "{\"note\":\"h2-other-" + key + "\"}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(other.statusCode()).isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows("h2-other-" + key)).isZero();
    }

    @Test
    void aDuplicateWhileTheFirstRunsGets409OnTheSameConnection() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-slow-" + key + "\"}";

        CompletableFuture<HttpResponse<byte[]>> slow = h2.sendAsync(request("/orders/slow?millis=3000", body)
                .header("Idempotency-Key", key).build(), HttpResponse.BodyHandlers.ofByteArray());
        awaitHandlerInItsTransaction();
        HttpResponse<byte[]> duplicate = h2Post("/orders/slow?millis=3000", key, body);
        HttpResponse<byte[]> first = slow.get(30, TimeUnit.SECONDS);

        assertThat(duplicate.statusCode()).isEqualTo(409);
        assertProblem(duplicate, "idempotency-request-in-progress");
        assertThat(duplicate.headers().firstValue("Retry-After")).isPresent();
        assertThat(first.version()).isEqualTo(HttpClient.Version.HTTP_2);
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows("h2-slow-" + key)).isOne();
    }

    /**
     * A client that stops waiting over HTTP/2 cancels its stream (RST_STREAM), not the connection: the request goes
     * on, commits with no one to answer, and its retry on the same connection gets its answer; the connection goes on
     * serving. In either mode: in intent-first mode the outcome is known (the handler returned), so the claim must not
     * be left for its lease to run out and the resolver to decide.
     */
    @ParameterizedTest
    @ValueSource(strings = {"/orders/slow?millis=3000", "/intent/long-lease"})
    void aStreamTheClientCancelsWhileTheHandlerRunsIsAnsweredOnRetry(String path) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "h2-cancelled-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        CompletableFuture<HttpResponse<byte[]>> cancelled = h2.sendAsync(request(path, body)
                .header("Idempotency-Key", key).header("X-Sleep-Ms", "3000").build(),
                HttpResponse.BodyHandlers.ofByteArray());
        awaitHandlerInItsTransaction();
        cancelled.cancel(true); // while the handler sleeps its 3 s, on a loaded machine too
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!"SUCCEEDED".equals(status(key))) {
            assertThat(System.nanoTime() - deadline).as("the cancelled request committed (status %s)", status(key))
                    .isNegative();
            Thread.sleep(20);
        }
        HttpResponse<byte[]> retry = h2.send(request(path, body).header("Idempotency-Key", key).build(),
                HttpResponse.BodyHandlers.ofByteArray());
        String next = UUID.randomUUID().toString();
        HttpResponse<byte[]> other = h2Post("/orders", next, "{\"note\":\"h2-after-cancel-" + next + "\"}");

        assertThat(cancelled).as("the client got no answer").isCompletedExceptionally();
        assertThat(retry.version()).isEqualTo(HttpClient.Version.HTTP_2);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isOne();
        assertThat(other.statusCode()).isEqualTo(201);
        assertThat(rows("h2-after-cancel-" + next)).isOne();
    }

    /**
     * A body above {@code idempotency.max-request-body-size} (1 MB) is refused over HTTP/2 as over HTTP/1.1, before
     * any database work, and the stream's refusal leaves the connection serving: HTTP/2 ends a stream, not the
     * connection, where HTTP/1.1 may have to close it to skip the body's rest.
     */
    @Test
    void aBodyAboveTheCapIsRefusedAndTheConnectionGoesOn() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "h2-large-" + key;
        String body = "{\"note\":\"" + note + "\",\"padding\":\"" + "x".repeat(1_100_000) + "\"}";

        HttpResponse<byte[]> refused = h2Post("/orders", key, body);
        String next = UUID.randomUUID().toString();
        HttpResponse<byte[]> other = h2Post("/orders", next, "{\"note\":\"h2-after-large-" + next + "\"}");

        assertThat(refused.statusCode()).isEqualTo(413);
        assertProblem(refused, "idempotency-request-too-large");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
        assertThat(other.statusCode()).isEqualTo(201);
        assertThat(rows("h2-after-large-" + next)).isOne();
    }

    /**
     * Connection, Keep-Alive, Proxy-Connection and Upgrade are connection-specific: HTTP/2 forbids them (RFC 9113,
     * section 8.2.2). The first answer is sent as the handler made it, and what the container does with them is its own
     * (Tomcat passes them on, and a strict client such as one built on nghttp2 resets the stream; the JDK's client
     * reads past them); the replay never carries them, and the connection goes on serving.
     */
    @Test
    void connectionSpecificHeadersOfAHandlerAreNeverReplayedOverHttp2() throws Exception {
        for (String path : List.of("/orders/upstream", "/orders/hop-by-hop")) {
            String key = UUID.randomUUID().toString();
            String body = "{\"note\":\"h2-hop-" + key + "\"}";

            // the first answer carries what the handler set, which a strict client (Java 25's, curl) refuses: the
            // request ran all the same, and its retry is the clean replay
            HttpResponse<byte[]> first;
            try {
                first = h2Post(path, key, body);
            } catch (java.net.ProtocolException refused) {
                assertThat(refused).as(path).hasMessageContaining("Prohibited header name");
                first = null;
            }
            HttpResponse<byte[]> replay = h2Post(path, key, body);

            assertThat(replay.statusCode()).as(path).isEqualTo(201);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(path).hasValue("true");
            if (first != null) {
                assertThat(first.statusCode()).as(path).isEqualTo(201);
                assertThat(replay.body()).as(path).isEqualTo(first.body());
                assertThat(replay.headers().firstValue("Location")).as(path)
                        .isEqualTo(first.headers().firstValue("Location"));
            }
            for (String name : List.of("Connection", "Keep-Alive", "Upgrade", "Transfer-Encoding",
                    "Proxy-Connection", "TE", "Trailer")) {
                assertThat(replay.headers().firstValue(name)).as(path + " replay " + name).isEmpty();
            }
            assertThat(rows("h2-hop-" + key)).as(path).isOne();
        }
        HttpResponse<byte[]> after = h2Post("/orders", UUID.randomUUID().toString(), "{\"note\":\"h2-after\"}");
        assertThat(after.statusCode()).as("the connection still serves").isEqualTo(201);
    }

    @Test
    void anAnswerLargerThanTheFlowControlWindowIsSentWholeFirstAndOnReplay() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-large-" + key + "\"}";
        int size = 300_000; // over four times the initial window of 65,535 bytes

        HttpResponse<byte[]> first = h2Post("/orders/large?size=" + size, key, body);
        HttpResponse<byte[]> replay = h2Post("/orders/large?size=" + size, key, body);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(first.body()).hasSize(size);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows("h2-large-" + key)).isOne();
    }

    /**
     * A 204 and a 205 have no body (RFC 9110, sections 15.3.5 and 15.3.6), yet a handler may write one: an object
     * returned under {@code @ResponseStatus(NO_CONTENT)}, say. Over HTTP/1.1 both servers drop it from a 204, and
     * Tomcat does over HTTP/2; Jetty sends it over HTTP/2, which a client refuses. The answer the client gets has no
     * body, first and on replay, and none is stored.
     */
    @ParameterizedTest
    @ValueSource(ints = {204, 205})
    void aNoContentAnswerIsSentWithoutTheBodyItsHandlerWroteFirstAndOnReplay(int status) throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-no-content-" + key + "\"}";

        HttpResponse<byte[]> first = h2Post("/orders/status/" + status, key, body);
        HttpResponse<byte[]> replay = h2Post("/orders/status/" + status, key, body);

        assertThat(first.statusCode()).isEqualTo(status);
        assertThat(first.body()).isEmpty();
        assertThat(replay.statusCode()).isEqualTo(status);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEmpty();
        assertThat(DATABASE.queryLong("select octet_length(response_body) from idempotency_keys where idempotency_key = '"
                + key + "'")).as("the body stored").isZero();
        assertThat(rows("h2-no-content-" + key)).isOne();
    }

    /**
     * HTTP/2 sends header names in lower case, and a field repeated as fields of its own (HPACK has no folding): the key
     * header is found whatever the case of its name, and sent twice it is refused as over HTTP/1.1.
     */
    @Test
    void theKeyHeaderOverHttp2IsReadAsOverHttp11() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-key-" + key + "\"}";

        HttpResponse<byte[]> twice = h2.send(request("/orders", body).header("Idempotency-Key", key)
                .header("idempotency-key", key).build(), HttpResponse.BodyHandlers.ofByteArray());
        HttpResponse<byte[]> first = h2.send(request("/orders", body).header("IDEMPOTENCY-KEY", key).build(),
                HttpResponse.BodyHandlers.ofByteArray());
        HttpResponse<byte[]> replay = h2Post("/orders", key, body);

        assertThat(twice.version()).isEqualTo(HttpClient.Version.HTTP_2);
        assertThat(twice.statusCode()).isEqualTo(400);
        assertProblem(twice, "idempotency-key-malformed");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows("h2-key-" + key)).isOne();
    }

    /** Sends {@code path} with {@code key} over HTTP/1.1, on a connection of its own, and reads the whole answer. */
    String http11Post(String path, String key, String note) throws Exception {
        String body = "{\"note\":\"" + note + "\"}";
        return raw("POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nIdempotency-Key: "
                + key + "\r\nContent-Length: " + body.length() + "\r\nConnection: close\r\n\r\n" + body);
    }

    /**
     * The server that serves HTTP/2 serves HTTP/1.1 on the same port, and a retry may come over either (a new
     * connection, a proxy that speaks HTTP/1.1 to the application). Around the limit of the header section the server
     * sends over HTTP/1.1, an answer given over HTTP/2 is either refused and kept nothing, or stored and replayed over
     * both protocols: never stored where a retry over HTTP/1.1 would get the container's bare 500 (Tomcat) or nothing
     * at all (Jetty) until the record expired.
     */
    @Test
    void anAnswerGivenOverHttp2IsStoredOnlyIfItsReplaysCanBeSentOverHttp11Too() throws Exception {
        int stored = 0;
        int refused = 0;
        for (int length = 7_000; length <= 8_200; length += 20) {
            String key = UUID.randomUUID().toString();
            String note = "h2-link-" + key;

            HttpResponse<byte[]> first = h2Post("/shapes/link?length=" + length, key, "{\"note\":\"" + note + "\"}");

            if (first.statusCode() == 500) {
                assertProblem(first, "idempotency-response-too-large");
                assertThat(rows(note)).as("length %d: nothing of it was kept", length).isZero();
                assertThat(keyRows(key)).as("length %d: the key was released", length).isZero();
                refused++;
                continue;
            }
            assertThat(first.statusCode()).as("length %d", length).isEqualTo(201);
            String overHttp11 = http11Post("/shapes/link?length=" + length, key, note);
            HttpResponse<byte[]> overHttp2 = h2Post("/shapes/link?length=" + length, key, "{\"note\":\"" + note + "\"}");
            assertThat(overHttp11).as("length %d: the replay over HTTP/1.1 of an answer stored over HTTP/2", length)
                    .startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                    .endsWith(new String(first.body(), StandardCharsets.UTF_8));
            assertThat(overHttp2.statusCode()).as("length %d", length).isEqualTo(201);
            assertThat(overHttp2.headers().allValues("Link")).isEqualTo(first.headers().allValues("Link"));
            assertThat(rows(note)).isOne();
            stored++;
        }
        assertThat(stored).as("answers stored below the limit").isPositive();
        assertThat(refused).as("answers refused near it").isPositive();
    }

    /** An answer stored over HTTP/1.1 is replayed over HTTP/2 whole, without the headers HTTP/1.1 framed it with. */
    @Test
    void anAnswerStoredOverHttp11IsReplayedOverHttp2Whole() throws Exception {
        for (String path : List.of("/shapes/link?length=6800", "/orders/upstream", "/orders/hop-by-hop")) {
            String key = UUID.randomUUID().toString();
            String note = "h1-then-h2-" + key;

            String first = http11Post(path, key, note);
            HttpResponse<byte[]> replay = h2Post(path, key, "{\"note\":\"" + note + "\"}");

            assertThat(first).as(path).startsWith("HTTP/1.1 201 ");
            assertThat(replay.statusCode()).as(path).isEqualTo(201);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(path).hasValue("true");
            assertThat(first).as(path).endsWith("\r\n\r\n" + new String(replay.body(), StandardCharsets.UTF_8));
            for (String name : List.of("Connection", "Keep-Alive", "Upgrade", "Transfer-Encoding", "Proxy-Connection",
                    "TE", "Trailer", "X-Upstream-Trace")) {
                assertThat(replay.headers().firstValue(name)).as(path + " replay " + name).isEmpty();
            }
            assertThat(rows(note)).as(path).isOne();
        }
    }

    /**
     * Twelve duplicates sent at once as streams of one connection. The handler runs longer than the in-flight wait
     * (300 ms), so a duplicate that arrives while it runs is answered 409: at least one 409 proves the streams were
     * served side by side, not one after the other (which would give one first answer and eleven replays, and would
     * prove nothing of concurrent duplicates).
     */
    @Test
    void duplicatesMultiplexedOnOneConnectionExecuteOnce() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-multiplexed-" + key + "\"}";
        List<CompletableFuture<HttpResponse<byte[]>>> answers = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            answers.add(h2.sendAsync(request("/orders/slow?millis=1500", body).header("Idempotency-Key", key)
                    .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofByteArray()));
        }

        Map<Integer, Integer> statuses = new TreeMap<>();
        int firstAnswers = 0;
        for (CompletableFuture<HttpResponse<byte[]>> future : answers) {
            HttpResponse<byte[]> answer = future.get(60, TimeUnit.SECONDS);
            assertThat(answer.version()).isEqualTo(HttpClient.Version.HTTP_2);
            statuses.merge(answer.statusCode(), 1, Integer::sum);
            if (answer.statusCode() == 201) {
                if (answer.headers().firstValue("Idempotent-Replayed").isEmpty()) {
                    firstAnswers++;
                }
            } else {
                assertThat(answer.statusCode()).as(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(409);
                assertProblem(answer, "idempotency-request-in-progress");
            }
        }
        assertThat(firstAnswers).as("answers that ran the handler, of %s", statuses).isOne();
        assertThat(statuses).as("a duplicate arrived while the first ran").containsKey(409);
        assertThat(rows("h2-multiplexed-" + key)).isOne();
        assertThat(keyRows(key)).isOne();
    }

    /**
     * The late async work of a handler the library answered, with the request and response it took before the answer,
     * over HTTP/2: the next request is another stream of the same connection, which the container may serve with the
     * objects behind them; it must neither get what the work writes nor lose its body to what the work reads.
     */
    @ParameterizedTest
    @ValueSource(strings = {"raw", "read"})
    void lateAsyncWorkOverHttp2LeavesTheNextStreamAlone(String kind) throws Exception {
        for (int i = 0; i < 3; i++) {
            OrderController.LateAsyncWork.reset();
            String key = UUID.randomUUID().toString();
            String note = "h2-async-late-" + kind + "-" + key;

            HttpResponse<byte[]> answer = h2Post("/orders/async-servlet-late?kind=" + kind, key,
                    "{\"note\":\"" + note + "\"}");
            HttpResponse<byte[]> next = h2.send(request("/orders/after-late-async", "{\"next\":" + i + "}")
                    .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofByteArray());

            assertThat(answer.statusCode()).isEqualTo(500);
            assertThat(next.version()).isEqualTo(HttpClient.Version.HTTP_2);
            assertThat(next.statusCode()).as("round %d", i).isEqualTo(200);
            assertThat(new String(next.body(), StandardCharsets.UTF_8)).as("round %d", i)
                    .isEqualTo("{\"next\":" + i + "}");
            assertThat(rows(note)).isZero();
        }
    }
}
