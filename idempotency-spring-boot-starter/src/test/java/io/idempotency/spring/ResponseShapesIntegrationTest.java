package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The many shapes in which a Spring MVC handler gives its answer — a {@code Resource}, {@code byte[]} or
 * {@code String} body with {@code produces}, a {@code ResponseEntity<Void>}, an {@code HttpEntity}, {@code HttpHeaders}
 * alone, a body larger than the response buffer, an exception class carrying {@code @ResponseStatus} — read byte for
 * byte off the socket: the first answer and its replay are the same, and a failure keeps nothing.
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

    @Test
    void theHandlersBodySeesNoRangeHoweverItReadsTheHeaders() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "range-seen-" + key;

        String first = raw("/shapes/range-seen", key, note, "Range: bytes=0-9\r\nIf-Range: \"v1\"\r\n");

        assertThat(first).startsWith("HTTP/1.1 200 ");
        assertThat(body(first)).isEqualTo("header=null if-range=null headers=[][] names=[]");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aRangeRequestToAnEndpointThatIsNotIdempotentGetsThePartAskedFor() throws Exception {
        // nothing is held for a commit there: the request runs as it would without the library
        String note = "range-unguarded-" + UUID.randomUUID();

        String part = raw("/shapes/resource/unguarded", "unused", note, "Range: bytes=0-9\r\n");

        assertThat(part).startsWith("HTTP/1.1 206 ").contains("Content-Range: bytes 0-9/");
        assertThat(body(part)).isEqualTo("receipt of");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void everyShapeOfBodyIsReplayedByteForByte() throws Exception {
        for (String shape : new String[] {"resource", "bytes", "text", "created", "entity"}) {
            String key = UUID.randomUUID().toString();
            String note = shape + "-" + key;

            String first = raw("/shapes/" + shape, key, note, "");
            String replay = raw("/shapes/" + shape, key, note, "");

            assertThat(first).as(shape).startsWith(shape.equals("created") ? "HTTP/1.1 201 " : "HTTP/1.1 200 ")
                    .doesNotContain("Idempotent-Replayed")
                    .contains("Content-Length: " + body(first).getBytes(StandardCharsets.ISO_8859_1).length + "\r\n");
            assertThat(replay).as(shape).contains("Idempotent-Replayed: true");
            assertThat(statusLine(replay)).as(shape).isEqualTo(statusLine(first));
            assertThat(header(replay, "Content-Type")).as(shape).isEqualTo(header(first, "Content-Type"));
            assertThat(header(replay, "Location")).as(shape).isEqualTo(header(first, "Location"));
            assertThat(header(replay, "Content-Length")).as(shape).isEqualTo(header(first, "Content-Length"));
            assertThat(body(replay)).as(shape).isEqualTo(body(first));
            assertThat(rows(note)).as(shape).isEqualTo(1);
        }
    }

    @Test
    void aNoContentAnswerIsSentWithoutTheLengthOfTheBodyItsHandlerWroteFirstAndOnReplay() throws Exception {
        // Spring MVC's converters of text and bytes set the body's length as a header before writing the body; the
        // body of a 204 or 205 is neither stored nor sent, and its length must not be either: a server frames the
        // answer by it (a 205 is read for that many bytes it does not carry) or refuses to send it after the commit
        for (int status : new int[] {204, 205}) {
            String key = UUID.randomUUID().toString();
            String note = "no-content-text-" + status + "-" + key;

            String first = raw("/shapes/no-content-text?status=" + status, key, note, "");
            String replay = raw("/shapes/no-content-text?status=" + status, key, note, "");

            assertThat(first).as("status %d", status).startsWith("HTTP/1.1 " + status + " ")
                    .doesNotContain("Idempotent-Replayed");
            assertThat(header(first, "Content-Length")).as("status %d", status).isIn(null, "Content-Length: 0");
            assertThat(body(first)).as("status %d", status).isEmpty();
            assertThat(replay).as("status %d", status).startsWith("HTTP/1.1 " + status + " ")
                    .contains("Idempotent-Replayed: true");
            assertThat(header(replay, "Content-Length")).as("status %d", status)
                    .isEqualTo(header(first, "Content-Length"));
            assertThat(body(replay)).as("status %d", status).isEmpty();
            assertThat(rows(note)).as("status %d", status).isEqualTo(1);
        }
    }

    @Test
    void theContentTypeAHandlerSetsIsTheSameInTheFirstAnswerAndInEveryReplay() throws Exception {
        // a charset the container writes another way (Jetty writes UTF-16 as utf-16, and a quoted one unquoted, when
        // it is set as the response's encoding), or among other parameters: the first answer must not carry what
        // the container makes of it while the replays carry it as it was set
        for (String type : new String[] {"text/plain;charset=UTF-16", "text/plain; charset=\"UTF-16\"",
                "text/csv; charset=UTF-16; header=present"}) {
            String key = UUID.randomUUID().toString();
            String note = "typed-" + key;
            String query = "?type=" + URLEncoder.encode(type, StandardCharsets.UTF_8);

            String first = raw("/shapes/typed" + query, key, note, "");
            String replay = raw("/shapes/typed" + query, key, note, "");
            String alone = raw("/shapes/typed/unguarded" + query, key, note + "-alone", "");

            assertThat(first).as(type).startsWith("HTTP/1.1 200 ");
            assertThat(header(first, "Content-Type").replace(" ", "").replace("\"", "")).as(type)
                    .isEqualToIgnoringCase(header(alone, "Content-Type").replace(" ", "").replace("\"", ""));
            assertThat(replay).as(type).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
            assertThat(header(replay, "Content-Type")).as(type).isEqualTo(header(first, "Content-Type"));
            assertThat(body(replay)).as(type).isEqualTo(body(first));
            assertThat(rows(note)).as(type).isEqualTo(1);
        }
    }

    @Test
    void anAnswerLargerThanTheResponseBufferIsSentWholeWithItsLengthFirstAndOnReplay() throws Exception {
        // far above the container's buffer, which would otherwise have committed it in chunks as it was written
        String key = UUID.randomUUID().toString();
        String note = "large-" + key;

        String first = raw("/orders/large?size=200000", key, note, "");
        String replay = raw("/orders/large?size=200000", key, note, "");

        assertThat(first).startsWith("HTTP/1.1 200 ").contains("Content-Length: 200000\r\n")
                .doesNotContain("Transfer-Encoding");
        assertThat(body(first)).isEqualTo("x".repeat(200000));
        assertThat(replay).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true")
                .contains("Content-Length: 200000\r\n").doesNotContain("Transfer-Encoding");
        assertThat(header(replay, "Content-Type")).isEqualTo(header(first, "Content-Type"));
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anAnswerWithMoreHeadersThanTheServerSendsIsRolledBackRatherThanStoredUnsendable() throws Exception {
        // Tomcat sends no header section above 8 KB (server.tomcat.max-http-response-header-size), and fails after
        // the commit: stored, such an answer would keep its effects while it and every replay failed
        String key = UUID.randomUUID().toString();
        String note = "links-" + key;

        String tooMany = raw("/shapes/links?count=400", key, note, "");

        assertThat(rows(note)).as("nothing of it was kept").isZero();
        assertThat(keyRows(key)).as("the key was released").isZero();
        assertThat(tooMany).startsWith("HTTP/1.1 500 ").contains("idempotency-response-too-large")
                .doesNotContain("Link:");

        String fewer = raw("/shapes/links?count=10", key, note, "");
        String replay = raw("/shapes/links?count=10", key, note, "");

        assertThat(fewer).startsWith("HTTP/1.1 201 ");
        assertThat(fewer.lines().filter(line -> line.startsWith("Link: ")).count()).isEqualTo(10);
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(replay.lines().filter(line -> line.startsWith("Link: ")).count()).isEqualTo(10);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anAnswerNearTheServersHeaderLimitIsStoredOnlyIfItsReplaysCanBeSentToo() throws Exception {
        // a replay carries Idempotent-Replayed: true besides the stored headers, and the container adds its own
        // (Date, Content-Length, Keep-Alive…) to both: across the sizes around the limit, every answer is either
        // refused and kept nothing, or sent, stored and replayed (and both are seen)
        int stored = 0;
        int refused = 0;
        for (int length = 7_000; length <= 8_200; length += 8) {
            String key = UUID.randomUUID().toString();
            String note = "link-" + key;

            String first = raw("/shapes/link?length=" + length, key, note, "");

            if (first.startsWith("HTTP/1.1 500 ")) {
                assertThat(first).as("length %d", length).contains("idempotency-response-too-large");
                assertThat(rows(note)).as("length %d: nothing of it was kept", length).isZero();
                assertThat(keyRows(key)).as("length %d: the key was released", length).isZero();
                refused++;
                continue;
            }
            assertThat(first).as("length %d", length).startsWith("HTTP/1.1 201 ");
            String replay = raw("/shapes/link?length=" + length, key, note, "");
            assertThat(replay).as("length %d: the replay of a stored answer", length).startsWith("HTTP/1.1 201 ")
                    .contains("Idempotent-Replayed: true");
            assertThat(rows(note)).isEqualTo(1);
            stored++;
        }
        assertThat(stored).as("answers stored below the limit").isPositive();
        assertThat(refused).as("answers refused near it").isPositive();
    }

    @Test
    void headersAloneAreReplayedAndAKeyReusedForThemIsRefused() throws Exception {
        // Spring MVC refuses a null HttpHeaders, which is what the handler gives back when it did not run
        String key = UUID.randomUUID().toString();
        String note = "headers-" + key;

        String first = raw("/shapes/headers", key, note, "");
        String replay = raw("/shapes/headers", key, note, "");
        String other = raw("/shapes/headers", key, note + "-other", "");

        assertThat(first).startsWith("HTTP/1.1 200 ").contains("Location: /orders/");
        assertThat(replay).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        assertThat(header(replay, "Location")).isEqualTo(header(first, "Location"));
        assertThat(body(replay)).isEqualTo(body(first)).isEmpty();
        assertThat(other).startsWith("HTTP/1.1 422 ").contains("idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(note + "-other")).isZero();
    }

    @Test
    void anExceptionCarryingResponseStatusIsAnsweredByTheErrorPageAndKeepsNothing() throws Exception {
        for (boolean flushFirst : new boolean[] {false, true}) {
            failureIsAnsweredByTheErrorPageAndKeepsNothing("flushFirst=" + flushFirst, 422);
        }
    }

    @Test
    void anExceptionNoHandlerResolvesIsAnsweredByTheErrorPageAndKeepsNothing() throws Exception {
        for (boolean flushFirst : new boolean[] {false, true}) {
            failureIsAnsweredByTheErrorPageAndKeepsNothing("unresolved=true&flushFirst=" + flushFirst, 500);
        }
    }

    @Test
    void anExceptionHandlersAnswerReplacesWhatTheHandlerWroteAndFlushedBeforeItThrew() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "problem-" + key;

        String first = raw("/shapes/rejected?problem=true&flushFirst=true", key, note, "");

        assertThat(first).startsWith("HTTP/1.1 409 ").contains("Content-Type: application/problem+json")
                .contains("Content-Length: " + body(first).length() + "\r\n");
        assertThat(body(first)).as("the exception handler's answer alone, not after the handler's")
                .startsWith("{\"").endsWith("}").contains("\"status\":409");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    private void failureIsAnsweredByTheErrorPageAndKeepsNothing(String query, int status) throws IOException {
        String key = UUID.randomUUID().toString();
        String note = "rejected-" + key;
        String path = "/shapes/rejected?" + query;

        String first = raw(path, key, note, "");
        String retry = raw(path, key, note, "");

        assertThat(first).as(query).startsWith("HTTP/1.1 " + status + " ")
                .as("nothing the handler wrote before it threw").doesNotContain("order ");
        assertThat(body(first)).contains("\"status\":" + status).contains("\"path\":\"/shapes/rejected\"");
        assertThat(retry).startsWith("HTTP/1.1 " + status + " ").doesNotContain("Idempotent-Replayed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    private static String statusLine(String answer) {
        return answer.substring(0, answer.indexOf("\r\n"));
    }

    private static String header(String answer, String name) {
        return answer.substring(0, answer.indexOf("\r\n\r\n")).lines()
                .filter(line -> line.regionMatches(true, 0, name + ":", 0, name.length() + 1))
                .findFirst().orElse(null);
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
