package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Handlers that use what Servlet 6.1 added to requests and responses — {@code ServletOutputStream.write(ByteBuffer)},
 * {@code ServletInputStream.read(ByteBuffer)}, {@code sendRedirect(location, status, clearBuffer)},
 * {@code setCharacterEncoding(Charset)} — read byte for byte off the socket: on an idempotent endpoint the first
 * answer is what the container alone would send, a replay repeats it, and a rolled-back answer leaks nothing; on an
 * endpoint that is not idempotent, whose request still passes the library's filter, they work as without it.
 */
class Servlet61ApiIntegrationTest extends OrdersApplicationTest {

    @Test
    void anAnswerWrittenFromByteBuffersIsHeldForTheCommitAndReplayed() throws Exception {
        for (boolean direct : new boolean[] {false, true}) {
            String key = UUID.randomUUID().toString();
            String note = "byte-buffer-" + direct + "-" + key;

            String failed = raw("/capture/byte-buffer?direct=" + direct + "&failAtCommit=true", key, json(note));
            assertThat(failed).as("direct %s: the commit failed", direct).startsWith("HTTP/1.1 500 ")
                    .contains("idempotency-commit-failed").doesNotContain("order ").doesNotContain("in buffers");
            assertThat(rows(note)).isZero();

            String first = raw("/capture/byte-buffer?direct=" + direct, key, json(note));
            String replay = raw("/capture/byte-buffer?direct=" + direct, key, json(note));
            assertThat(first).as("direct %s", direct).startsWith("HTTP/1.1 201 ");
            assertThat(body(first)).as("direct %s: only the buffers' remaining bytes", direct)
                    .matches("order \\d+ in buffers");
            assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void anAnswerWrittenFromByteBuffersOnAnEndpointThatIsNotIdempotentIsSent() throws Exception {
        for (boolean direct : new boolean[] {false, true}) {
            String note = "byte-buffer-plain-" + direct + "-" + UUID.randomUUID();

            String answer = raw("/capture/byte-buffer-not-idempotent?direct=" + direct, null, json(note));

            assertThat(answer).as("direct %s", direct).startsWith("HTTP/1.1 201 ");
            assertThat(body(answer)).as("direct %s", direct).matches("order \\d+ in buffers");
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void aBodyReadIntoByteBuffersIsFingerprintedAsTheHandlerReadsIt() throws Exception {
        for (boolean direct : new boolean[] {false, true}) {
            String key = UUID.randomUUID().toString();
            String note = "read-byte-buffer-" + direct + "-" + key; // longer than the handler's buffer

            String first = raw("/capture/read-byte-buffer?direct=" + direct, key, note);
            String replay = raw("/capture/read-byte-buffer?direct=" + direct, key, note);
            String other = raw("/capture/read-byte-buffer?direct=" + direct, key, note + "-other");

            assertThat(first).as("direct %s", direct).startsWith("HTTP/1.1 201 ");
            assertThat(body(first)).as("the handler read the whole body").matches("order \\d+ " + note);
            assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(other).as("another body under the key").startsWith("HTTP/1.1 422 ")
                    .contains("idempotency-key-mismatch");
            assertThat(rows(note)).isEqualTo(1);
            assertThat(rows(note + "-other")).isZero();
        }
    }

    @Test
    void aBodyReadIntoByteBuffersOnAnEndpointThatIsNotIdempotentIsReadWhole() throws Exception {
        for (boolean direct : new boolean[] {false, true}) {
            String note = "read-byte-buffer-plain-" + direct + "-" + UUID.randomUUID();

            String answer = raw("/capture/read-byte-buffer-not-idempotent?direct=" + direct, null, note);

            assertThat(answer).as("direct %s", direct).startsWith("HTTP/1.1 201 ");
            assertThat(body(answer)).matches("order \\d+ " + note);
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void aRedirectAfterPartOfTheBodyIsTheContainersAndIsReplayed() throws Exception {
        for (boolean clearBuffer : new boolean[] {true, false}) {
            String key = UUID.randomUUID().toString();
            String note = "redirect-" + clearBuffer + "-" + key;

            String failed = raw("/capture/redirect?clearBuffer=" + clearBuffer + "&failAtCommit=true", key,
                    json(note));
            assertThat(failed).as("clearBuffer %s: the commit failed", clearBuffer).startsWith("HTTP/1.1 500 ")
                    .contains("idempotency-commit-failed").doesNotContain("Location").doesNotContain("see order");
            assertThat(rows(note)).isZero();

            String first = raw("/capture/redirect?clearBuffer=" + clearBuffer, key, json(note));
            String replay = raw("/capture/redirect?clearBuffer=" + clearBuffer, key, json(note));
            String alone = raw("/capture/redirect-not-idempotent?clearBuffer=" + clearBuffer, null,
                    json(note + "-alone"));

            assertThat(first).as("clearBuffer %s", clearBuffer).startsWith("HTTP/1.1 303 ");
            assertThat(header(first, "Location")).matches("(http://localhost:\\d+)?/orders/\\d+");
            assertThat(alone).startsWith("HTTP/1.1 303 ");
            if (!clearBuffer) {
                assertThat(body(alone)).as("the container alone keeps what was written").matches("see order \\d+");
            }
            assertThat(body(first).replaceAll("\\d+", "N")).as("clearBuffer %s: as the container alone", clearBuffer)
                    .isEqualTo(body(alone).replaceAll("\\d+", "N"));
            // kept relative, as the handler gave it (see how-it-works.md); Tomcat alone makes it absolute
            assertThat(header(first, "Location")).matches("/orders/\\d+");
            assertThat(replay).startsWith("HTTP/1.1 303 ").contains("Idempotent-Replayed: true");
            assertThat(header(replay, "Location")).isEqualTo(header(first, "Location"));
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void textInACharsetChosenByCharsetOrContentTypeIsEncodedAsTheContainerEncodesIt() throws Exception {
        for (String charset : new String[] {"UTF-8", "ISO-8859-15", "UTF-16BE"}) {
            for (boolean inContentType : new boolean[] {false, true}) {
                String label = charset + (inContentType ? " in the content type" : " as a Charset");
                String key = UUID.randomUUID().toString();
                String note = "charset-" + charset + inContentType + "-" + key;
                String query = "?charset=" + charset + "&inContentType=" + inContentType;

                String failed = raw("/capture/charset" + query + "&failAtCommit=true", key, json(note));
                assertThat(failed).as(label).startsWith("HTTP/1.1 500 ").contains("idempotency-commit-failed")
                        .doesNotContain("order").doesNotContain("o\u0000r");
                assertThat(rows(note)).isZero();

                String first = raw("/capture/charset" + query, key, json(note));
                String replay = raw("/capture/charset" + query, key, json(note));
                String alone = raw("/capture/charset-not-idempotent" + query, null, json(note + "-alone"));

                assertThat(first).as(label).startsWith("HTTP/1.1 201 ");
                assertThat(header(first, "X-Writer-Error")).as(label).isEqualTo("false");
                assertThat(header(first, "Content-Type").replace(" ", "")).as(label)
                        .isEqualToIgnoringCase(header(alone, "Content-Type").replace(" ", ""));
                String text = new String(body(first).getBytes(StandardCharsets.ISO_8859_1), charset);
                assertThat(text).as(label).matches("order \\d+ \u20ac \u00e9");
                assertThat(new String(body(alone).getBytes(StandardCharsets.ISO_8859_1), charset)).as(label)
                        .matches("order \\d+ \u20ac \u00e9");
                assertThat(replay).as(label).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
                assertThat(header(replay, "Content-Type")).isEqualTo(header(first, "Content-Type"));
                assertThat(body(replay)).isEqualTo(body(first));
                assertThat(rows(note)).isEqualTo(1);
            }
        }
    }

    private static String json(String note) {
        return "{\"note\":\"" + note + "\"}";
    }

    /** The body of {@code answer}, its chunks joined when it was sent chunked. */
    private static String body(String answer) {
        String head = answer.substring(0, answer.indexOf("\r\n\r\n"));
        String body = answer.substring(head.length() + 4);
        if (!"chunked".equalsIgnoreCase(header(answer, "Transfer-Encoding"))) {
            return body;
        }
        StringBuilder joined = new StringBuilder();
        int at = 0;
        while (true) {
            int end = body.indexOf("\r\n", at);
            int size = Integer.parseInt(body.substring(at, end).trim(), 16);
            if (size == 0) {
                return joined.toString();
            }
            joined.append(body, end + 2, end + 2 + size);
            at = end + 2 + size + 2;
        }
    }

    /** The first value of {@code name} in the head of {@code answer}, or null. */
    private static String header(String answer, String name) {
        for (String line : answer.substring(0, answer.indexOf("\r\n\r\n")).split("\r\n")) {
            int colon = line.indexOf(':');
            if (colon > 0 && line.substring(0, colon).equalsIgnoreCase(name)) {
                return line.substring(colon + 1).trim();
            }
        }
        return null;
    }

    /** POSTs {@code body} (with {@code key}, unless null) over a connection of its own, and reads the answer whole. */
    private String raw(String path, String key, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        String request = "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                + (body.startsWith("{") ? "application/json" : "text/plain") + "\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Content-Length: " + bytes.length
                + "\r\nConnection: close\r\n\r\n" + body;
        return raw(request);
    }
}
