package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Handlers that drive the servlet response the way low-level code does — flushing, closing, declaring lengths,
 * early hints, trailer fields — read byte for byte off the socket: nothing may reach the client before the commit,
 * and what the first client gets is what a replay gets.
 */
class ResponseCaptureIntegrationTest extends OrdersApplicationTest {

    @Test
    void flushingAndClosingALargeAnswerSendsNothingBeforeTheCommit() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "flushing-" + key;

        assertCommitFailsAndSendsNothingOf("order ", "/capture/flushing?size=20000&failAtCommit=true", key, note);

        String first = raw("/capture/flushing?size=20000", key, note);
        String replay = raw("/capture/flushing?size=20000", key, note);
        assertThat(first).startsWith("HTTP/1.1 201 ").contains("Content-Length: 20000\r\n");
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                .contains("Content-Length: 20000\r\n");
        assertThat(body(replay)).isEqualTo(body(first)).hasSize(20000);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void closingTheWriterSendsNothingBeforeTheCommit() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "writer-closed-" + key;

        assertCommitFailsAndSendsNothingOf("order ", "/capture/writer-closed?failAtCommit=true", key, note);

        String first = raw("/capture/writer-closed", key, note);
        String replay = raw("/capture/writer-closed", key, note);
        assertThat(first).startsWith("HTTP/1.1 201 ").containsIgnoringCase("charset=UTF-8");
        assertThat(body(first)).startsWith("order ").endsWith(" \u00e2\u0082\u00ac"); // the euro sign's UTF-8 bytes
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * The container refuses an answer written through both the writer and the output stream (the Servlet
     * specification allows one of them). Held for the commit, the two parts were accepted and stored out of order
     * (the writer's text after the stream's bytes): the request fails as it does without the library, and is rolled
     * back.
     */
    @Test
    void anAnswerWrittenThroughBothTheWriterAndTheStreamFailsAsWithoutTheLibrary() throws Exception {
        String unguardedNote = "both-unguarded-" + UUID.randomUUID();
        HttpResponse<byte[]> unguarded = send(request("/capture/unguarded/writer-then-stream",
                "{\"note\":\"" + unguardedNote + "\"}").build());
        assertThat(unguarded.statusCode()).isEqualTo(500);

        for (String path : new String[] {"/capture/writer-then-stream", "/capture/stream-then-writer"}) {
            String key = UUID.randomUUID().toString();
            String note = "both-" + key;

            HttpResponse<byte[]> first = post(path, key, "{\"note\":\"" + note + "\"}");

            assertThat(first.statusCode()).as("%s: %s", path, new String(first.body(), StandardCharsets.UTF_8))
                    .isEqualTo(500);
            assertThat(rows(note)).as(path).isZero();
            assertThat(keyRows(key)).as(path).isZero();
        }
    }

    @Test
    void aDeclaredLengthThatIsWrongNeitherCutsNorStallsTheAnswer() throws Exception {
        for (int declared : new int[] {10, 1000}) {
            String key = UUID.randomUUID().toString();
            String note = "declared-" + key;

            String first = raw("/capture/flushing?size=100&declared=" + declared, key, note);
            String replay = raw("/capture/flushing?size=100&declared=" + declared, key, note);

            assertThat(first).as("declared %s", declared).startsWith("HTTP/1.1 201 ")
                    .contains("Content-Length: 100\r\n");
            assertThat(body(first)).hasSize(100);
            assertThat(body(replay)).isEqualTo(body(first));
        }
    }

    @Test
    void aTransferEncodingPassedOnFromUpstreamDoesNotContradictTheLengthTheAnswerIsFramedWith() throws Exception {
        // the held answer is sent with its length; with the upstream's "chunked" as well, a client reads the body as
        // chunks it is not in (RFC 9112, section 6.3: Transfer-Encoding overrides Content-Length)
        String key = UUID.randomUUID().toString();
        String note = "upstream-chunked-" + key;

        String first = raw("/capture/upstream-chunked", key, note);
        String replay = raw("/capture/upstream-chunked", key, note);

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(body(first)).startsWith("order ");
        assertThat(first.substring(0, first.indexOf("\r\n\r\n"))).as("one framing, the one the body is sent in")
                .contains("Content-Length: " + body(first).length() + "\r\n").doesNotContain("Transfer-Encoding");
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                .doesNotContain("Transfer-Encoding");
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void earlyHintsNeitherRollBackTheRequestNorLoseItsAnswer() throws Exception {
        // Tomcat sends 103 Early Hints through sendError(103), and the handler goes on to answer
        String key = UUID.randomUUID().toString();
        String note = "early-hints-" + key;

        String first = raw("/capture/early-hints", key, note);
        String replay = raw("/capture/early-hints", key, note);

        assertThat(first).as("no interim answer before the commit").startsWith("HTTP/1.1 201 ")
                .doesNotContain("HTTP/1.1 103");
        assertThat(body(first)).startsWith("order ");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(body(replay)).isEqualTo(body(first));
    }

    @Test
    void trailerFieldsOfAHandlerWhoseCommitFailedAreNotSent() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "trailers-" + key;

        assertCommitFailsAndSendsNothingOf("x-checksum", "/capture/trailers?failAtCommit=true", key, note);

        String first = raw("/capture/trailers", key, note);
        assertThat(first).startsWith("HTTP/1.1 201 ").contains("x-checksum: order-");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void trailerFieldsTheContainerCannotSendAreRefusedToTheHandlerNotAfterTheCommit() throws Exception {
        // over HTTP/1.0 the container refuses trailer fields when the handler sets them, and the handler can answer
        // without them; refused only once the request had committed, the client would get an error for kept effects
        String key = UUID.randomUUID().toString();
        String note = "trailers-http10-" + key;

        String first = raw("/capture/trailers-or-header", key, note, "HTTP/1.0");
        assertThat(first).startsWith("HTTP/1.1 201 ").contains("X-Checksum: order-");
        assertThat(body(first)).startsWith("order ");
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * Sends the request to {@code path}, whose commit fails: the client gets the failure, not a 201, and nothing of
     * {@code unsent}, which the handler had written (its body, its trailer); the order rolled back.
     */
    private void assertCommitFailsAndSendsNothingOf(String unsent, String path, String key, String note)
            throws IOException {
        String failed = raw(path, key, note);
        assertThat(failed).as("the commit failed: no 201, nothing of %s", unsent).startsWith("HTTP/1.1 500 ")
                .contains("idempotency-commit-failed").doesNotContain(unsent);
        assertThat(rows(note)).isZero();
    }

    private static String body(String answer) {
        return answer.substring(answer.indexOf("\r\n\r\n") + 4);
    }

    private String raw(String path, String key, String note) throws IOException {
        return raw(path, key, note, "HTTP/1.1");
    }

    private String raw(String path, String key, String note, String protocol) throws IOException {
        String body = "{\"note\":\"" + note + "\"}";
        String request = "POST " + path + " " + protocol + "\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + "TE: trailers\r\nIdempotency-Key: " + key + "\r\nContent-Length: " + body.length()
                + "\r\nConnection: close\r\n\r\n" + body;
        return raw(request);
    }
}
