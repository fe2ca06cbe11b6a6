package io.idempotency.spring;

import io.idempotency.testkit.Async;
import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** The HTTP-facing properties set to other values than their defaults, and used as set. */
@TestPropertySource(properties = {
        "idempotency.header-name=X-Request-Key",
        "idempotency.retry-after=6200ms",
        "idempotency.in-flight-wait=200ms",
        "idempotency.problem-type-base=https://errors.example.com/",
        "idempotency.body-fingerprint=bytes",
        "idempotency.max-request-body-size=2KB"})
class ConfiguredHttpPropertiesIntegrationTest extends OrdersApplicationTest {

    @Test
    void theKeyIsReadFromTheConfiguredHeaderOnly() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "header-name-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> defaultHeader = post("/orders", key, body); // Idempotency-Key: not this endpoint's
        HttpResponse<byte[]> first = send(request("/orders", body).header("X-Request-Key", key).build());
        HttpResponse<byte[]> replay = send(request("/orders", body).header("X-Request-Key", key).build());

        assertThat(defaultHeader.statusCode()).isEqualTo(400);
        assertThat(new String(defaultHeader.body(), StandardCharsets.UTF_8))
                .contains("\"type\":\"https://errors.example.com/idempotency-key-missing\"")
                .contains("X-Request-Key");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void bodiesAreComparedByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "bytes-" + key;

        HttpResponse<byte[]> first = send(request("/orders", "{\"note\":\"" + note + "\",\"amount\":\"1\"}")
                .header("X-Request-Key", key).build());
        HttpResponse<byte[]> reordered = send(request("/orders", "{\"amount\":\"1\",\"note\":\"" + note + "\"}")
                .header("X-Request-Key", key).build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(reordered.statusCode()).as("the same JSON, other bytes").isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aJsonBodyThatCannotBeReadCanonicallyIsStillComparedByteForByte() throws Exception {
        // duplicate member names, or a byte order mark, which the handler's JSON reader takes: the canonical form
        // refuses them, bytes need no canonical form
        String key = UUID.randomUUID().toString();
        String note = "duplicate-bytes-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"1\",\"amount\":\"2\"}";

        HttpResponse<byte[]> first = send(request("/orders", body).header("X-Request-Key", key).build());
        HttpResponse<byte[]> replay = send(request("/orders", body).header("X-Request-Key", key).build());
        HttpResponse<byte[]> other = send(request("/orders", body.replace("\"2\"", "\"3\""))
                .header("X-Request-Key", key).build());
        HttpResponse<byte[]> marked = send(request("/orders", "\uFEFF{\"note\":\"bom-" + key + "\"}")
                .header("X-Request-Key", UUID.randomUUID().toString()).build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(other.statusCode()).as("other bytes under the key").isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(marked.statusCode()).isEqualTo(201);
        assertThat(rows("bom-" + key)).isEqualTo(1);
    }

    @Test
    void aBodyOverTheConfiguredSizeIsRefusedBeforeAnythingIsWritten() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "large-" + key;

        HttpResponse<byte[]> large = send(request("/orders", "{\"note\":\"" + note + "-" + "x".repeat(3000) + "\"}")
                .header("X-Request-Key", key).build());
        HttpResponse<byte[]> small = send(request("/orders", "{\"note\":\"" + note + "\"}")
                .header("X-Request-Key", UUID.randomUUID().toString()).build());

        assertThat(large.statusCode()).isEqualTo(413);
        assertThat(new String(large.body(), StandardCharsets.UTF_8))
                .contains("\"type\":\"https://errors.example.com/idempotency-request-too-large\"");
        assertThat(keyRows(key)).isZero();
        assertThat(small.statusCode()).isEqualTo(201);
    }

    @Test
    void aBodyOfExactlyTheConfiguredSizeIsRunAndOneByteMoreRefusedWhetherItsLengthIsDeclaredOrNot() throws Exception {
        for (boolean chunked : new boolean[] {false, true}) {
            String key = UUID.randomUUID().toString();
            String note = "at-cap-" + chunked + "-" + key;
            String head = "{\"note\":\"" + note + "\",\"amount\":\"";
            String atCap = head + "1".repeat(2048 - head.length() - 2) + "\"}";
            assertThat(atCap.getBytes(StandardCharsets.UTF_8)).hasSize(2048);

            HttpResponse<byte[]> fits = send(sized(atCap, chunked).header("X-Request-Key", key).build());
            HttpResponse<byte[]> over = send(sized(atCap + " ", chunked)
                    .header("X-Request-Key", UUID.randomUUID().toString()).build());

            assertThat(fits.statusCode()).as("chunked: %s", chunked).isEqualTo(201);
            assertThat(rows(note)).isEqualTo(1);
            assertThat(over.statusCode()).as("chunked: %s", chunked).isEqualTo(413);
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    /** A request to /orders with {@code body}, its length declared, or sent in chunks without one. */
    private java.net.http.HttpRequest.Builder sized(String body, boolean chunked) {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        return request("/orders", body).POST(chunked
                ? java.net.http.HttpRequest.BodyPublishers.ofInputStream(() -> new java.io.ByteArrayInputStream(bytes))
                : java.net.http.HttpRequest.BodyPublishers.ofByteArray(bytes));
    }

    @Test
    void aDuplicateInFlightGetsTheConfiguredRetryAfterRoundedUpToWholeSeconds() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"retry-after-" + key + "\"}";

        CompletableFuture<HttpResponse<byte[]>> slow = Async.supply(() -> slow(key, body));
        Thread.sleep(400); // the first request holds the key, unless this machine was slower: then it is the waiter
        HttpResponse<byte[]> other = slow(key, body);
        HttpResponse<byte[]> first = slow.get(30, TimeUnit.SECONDS);

        HttpResponse<byte[]> duplicate = first.statusCode() == 409 ? first : other;
        assertThat(java.util.List.of(first.statusCode(), other.statusCode())).containsExactlyInAnyOrder(201, 409);
        assertThat(duplicate.headers().firstValue("Retry-After")).as("6.2 s, rounded up").hasValue("7");
        assertThat(new String(duplicate.body(), StandardCharsets.UTF_8))
                .contains("\"type\":\"https://errors.example.com/idempotency-request-in-progress\"");
    }

    private HttpResponse<byte[]> slow(String key, String body) {
        try {
            return send(request("/orders/slow?millis=2500", body).header("X-Request-Key", key).build());
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
