package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The many shapes in which a Spring MVC handler gives its answer — a {@code Resource}, {@code byte[]} or
 * {@code String} body with {@code produces}, a {@code ResponseEntity<Void>}, an {@code HttpEntity}, an exception
 * class carrying {@code @ResponseStatus} — read byte for byte off the socket: the first answer and its replay are
 * the same, and a failure keeps nothing.
 */
class ResponseShapesIntegrationTest extends OrdersApplicationTest {

    @Test
    void aRangeRequestGetsTheWholeAnswerThatEveryRetryIsReplayed() throws Exception {
        // Spring MVC answers a Range header on a Resource with 206 and the part asked for, whatever the method; the
        // fingerprint does not cover the header, so that part would be replayed to a retry asking for the whole
        String key = UUID.randomUUID().toString();
        String note = "range-" + key;

        String first = raw("/shapes/resource", key, note, "Range: bytes=0-9\r\n");
        String replay = raw("/shapes/resource", key, note, "");
        String rangedReplay = raw("/shapes/resource", key, note, "Range: bytes=10-19\r\n");

        assertThat(first).startsWith("HTTP/1.1 200 ").doesNotContain("Content-Range")
                .contains("Content-Length: " + body(first).length() + "\r\n");
        String receipt = body(first).substring(0, body(first).indexOf(' ', "receipt of order ".length()) + 1);
        assertThat(body(first)).as("the whole resource").isEqualTo(receipt.repeat(20));
        assertThat(replay).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rangedReplay).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        assertThat(body(rangedReplay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    private static String body(String answer) {
        return answer.substring(answer.indexOf("\r\n\r\n") + 4);
    }

    private String raw(String path, String key, String note, String extraHeaders) throws IOException {
        String body = "{\"note\":\"" + note + "\"}";
        return raw("POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + extraHeaders + "Idempotency-Key: " + key + "\r\nContent-Length: " + body.length()
                + "\r\nConnection: close\r\n\r\n" + body);
    }
}
