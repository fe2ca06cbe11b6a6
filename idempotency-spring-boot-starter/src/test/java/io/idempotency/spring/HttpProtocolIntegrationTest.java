package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * HTTP/1.1 as clients speak it, off a raw socket: {@code Expect: 100-continue}, chunked bodies, several requests on
 * one connection, clients that leave mid-body. A replay must leave the connection usable, and a request whose body
 * never arrived whole must leave nothing behind.
 */
class HttpProtocolIntegrationTest extends OrdersApplicationTest {

    static String post(String path, String key, String contentType, String body) {
        return headers(path, key, contentType, "Content-Length: " + body.getBytes(StandardCharsets.ISO_8859_1).length)
                + body;
    }

    static String headers(String path, String key, String contentType, String framing) {
        return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + contentType
                + "\r\nIdempotency-Key: " + key + "\r\n" + framing + "\r\n\r\n";
    }

    static String chunked(String body, int chunk) {
        StringBuilder chunks = new StringBuilder();
        for (int at = 0; at < body.length(); at += chunk) {
            String part = body.substring(at, Math.min(body.length(), at + chunk));
            chunks.append(Integer.toHexString(part.length())).append("\r\n").append(part).append("\r\n");
        }
        return chunks.append("0\r\n\r\n").toString();
    }

    private static String body(String answer) {
        return answer.substring(answer.indexOf("\r\n\r\n") + 4);
    }

    @Test
    void expectContinueFirstAndOnReplayOnOneConnection() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"expect-" + key + "\"}";
        String head = headers("/orders", key, "application/json",
                "Expect: 100-continue\r\nContent-Length: " + body.length());
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(head);
            assertThat(connection.answer()).startsWith("HTTP/1.1 100 ");
            connection.send(body);
            String first = connection.answer();
            connection.send(head);
            assertThat(connection.answer()).startsWith("HTTP/1.1 100 ");
            connection.send(body);
            String replay = connection.answer();
            String next = UUID.randomUUID().toString();
            connection.send(post("/orders", next, "application/json", "{\"note\":\"expect-" + next + "\"}"));
            String afterwards = connection.answer();

            assertThat(first).startsWith("HTTP/1.1 201 ");
            assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(afterwards).as("the connection serves the next request").startsWith("HTTP/1.1 201 ")
                    .doesNotContain("Idempotent-Replayed");
        }
        assertThat(rows("expect-" + key)).isEqualTo(1);
    }

    @Test
    void aBodyTheAdviceReadsAheadIsReadWholeOnReplayAndMismatch() throws Exception {
        // the handler reads its body from an InputStream after the advice: on a replay or a mismatch the advice is the
        // only reader, and what it leaves unread would be taken for the next request on the connection
        String key = UUID.randomUUID().toString();
        String note = "streamed-" + key + "-" + "s".repeat(20_000);
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(post("/orders/streams", key, "text/plain", note));
            String first = connection.answer();
            connection.send(headers("/orders/streams", key, "text/plain", "Transfer-Encoding: chunked")
                    + chunked(note, 4096));
            String replay = connection.answer();
            connection.send(post("/orders/streams", key, "text/plain", note + "!"));
            String mismatch = connection.answer();
            connection.send(post("/orders/streams", key, "text/plain", note));
            String again = connection.answer();

            assertThat(first).startsWith("HTTP/1.1 201 ");
            assertThat(replay).as("chunked or not, one request").startsWith("HTTP/1.1 201 ")
                    .contains("Idempotent-Replayed: true");
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(mismatch).startsWith("HTTP/1.1 422 ");
            assertThat(again).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        }
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void noBodyAnEmptyBodyAndNoChunksAreOneRequest() throws Exception {
        // a POST without framing has no body (RFC 9112, section 6.3), as one of length 0 and one of no chunks has
        String key = UUID.randomUUID().toString();
        String noFraming = "POST /orders/streams HTTP/1.1\r\nHost: localhost\r\nIdempotency-Key: " + key + "\r\n\r\n";
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(noFraming);
            String first = connection.answer();
            connection.send(headers("/orders/streams", key, "text/plain", "Content-Length: 0"));
            String empty = connection.answer();
            connection.send(headers("/orders/streams", key, "text/plain", "Transfer-Encoding: chunked") + "0\r\n\r\n");
            String noChunks = connection.answer();
            connection.send(post("/orders/streams", key, "text/plain", " "));
            String aSpace = connection.answer();

            assertThat(first).startsWith("HTTP/1.1 201 ").doesNotContain("Idempotent-Replayed");
            assertThat(body(first)).matches("order \\d+ for ");
            assertThat(empty).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
            assertThat(body(empty)).isEqualTo(body(first));
            assertThat(noChunks).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
            assertThat(body(noChunks)).isEqualTo(body(first));
            assertThat(aSpace).as("a body of one space is another request").startsWith("HTTP/1.1 422 ");
        }
    }

    @Test
    void aClientThatLeavesMidBodyLeavesNothingAndItsRetryRuns() throws Exception {
        for (String path : new String[] {"/orders", "/orders/streams"}) {
            String key = UUID.randomUUID().toString();
            String note = "mid-body-" + key;
            String body = "{\"note\":\"" + note + "\"}";
            try (KeepAliveConnection connection = new KeepAliveConnection()) {
                connection.send(headers(path, key, "application/json", "Content-Length: " + (body.length() + 50))
                        + body);
            }
            try (KeepAliveConnection connection = new KeepAliveConnection()) {
                connection.send(headers(path, key, "application/json", "Transfer-Encoding: chunked")
                        + Integer.toHexString(body.length()) + "\r\n" + body + "\r\n");
            }
            Thread.sleep(500);
            assertThat(rows(note)).as(path).isZero();
            assertThat(keyRows(key)).as(path).isZero();

            try (KeepAliveConnection connection = new KeepAliveConnection()) {
                connection.send(post(path, key, "application/json", body));
                assertThat(connection.answer()).as(path).startsWith("HTTP/1.1 201 ")
                        .doesNotContain("Idempotent-Replayed");
            }
            assertThat(rows(path.equals("/orders") ? note : body)).as(path).isEqualTo(1);
        }
    }

    @Test
    void aClientStalledMidBodyHoldsNoKey() throws Exception {
        // the body is read whole before the key is claimed: a client that stops sending holds nothing, and its retry
        // on another connection runs at once instead of waiting for it and getting 409
        for (String path : new String[] {"/orders", "/orders/streams", "/orders/form"}) {
            String key = UUID.randomUUID().toString();
            String note = "stalled-" + key;
            boolean form = path.endsWith("form");
            String type = form ? "application/x-www-form-urlencoded" : "application/json";
            String body = form ? "note=" + note : "{\"note\":\"" + note + "\"}";
            try (KeepAliveConnection stalled = new KeepAliveConnection();
                 KeepAliveConnection retry = new KeepAliveConnection()) {
                stalled.send(headers(path, key, type, "Content-Length: " + (body.length() + 50)) + body);

                retry.send(post(path, key, type, body));

                assertThat(retry.answer()).as(path).startsWith("HTTP/1.1 201 ").doesNotContain("Idempotent-Replayed");
            }
            assertThat(rows(path.equals("/orders/streams") ? body : note)).as(path).isEqualTo(1);
            assertThat(keyRows(key)).as(path).isEqualTo(1);
        }
    }

    /**
     * A 204 and a 205 have no content (RFC 9110, sections 15.3.5 and 15.3.6), yet a handler may write some. HTTP/1.1
     * frames a 204 as ending with its header section, but not a 205 (RFC 9112, section 6.3): it must say that its
     * content is empty, or close the connection. First and on replay the answer carries none, and the connection
     * serves the next request.
     */
    @ParameterizedTest
    @ValueSource(ints = {204, 205})
    void aNoContentAnswerEndsWhereItsFramingSaysAndLeavesTheConnectionUsable(int status) throws Exception {
        String key = UUID.randomUUID().toString();
        String request = post("/orders/status/" + status, key, "application/json",
                "{\"note\":\"h1-no-content-" + key + "\"}");
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(request);
            String first = connection.answer();
            connection.send(request);
            String replay = connection.answer();
            String next = UUID.randomUUID().toString();
            connection.send(post("/orders", next, "application/json", "{\"note\":\"h1-after-" + next + "\"}"));
            String afterwards = connection.answer();

            for (String answer : new String[] {first, replay}) {
                assertThat(answer).startsWith("HTTP/1.1 " + status + " ");
                assertThat(body(answer)).isEmpty();
                if (status == 205) {
                    assertThat(answer.toLowerCase(Locale.ROOT))
                            .containsAnyOf("content-length: 0\r\n", "transfer-encoding: chunked\r\n");
                }
            }
            assertThat(replay).contains("Idempotent-Replayed: true");
            assertThat(afterwards).as("the next request on the connection").startsWith("HTTP/1.1 201 ");
        }
        assertThat(DATABASE.queryLong("select octet_length(response_body) from idempotency_keys"
                + " where idempotency_key = '" + key + "'")).as("stored body").isZero();
    }

    @Test
    void anHttp10ClientGetsTheReplayWithItsLength() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"http10-" + key + "\"}";
        String request = "POST /orders HTTP/1.0\r\nContent-Type: application/json\r\nIdempotency-Key: " + key
                + "\r\nContent-Length: " + body.length() + "\r\n\r\n" + body;

        String first = raw(request);
        String replay = raw(request);

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                .contains("Content-Length: " + body(first).length() + "\r\n");
        assertThat(body(replay)).isEqualTo(body(first));
    }
}
