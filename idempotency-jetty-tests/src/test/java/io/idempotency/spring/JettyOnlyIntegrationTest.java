package io.idempotency.spring;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.test.context.TestPropertySource;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import java.util.zip.Deflater;

import static io.idempotency.spring.CompressedRequestBodiesIntegrationTest.gzip;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * What only Jetty does, on the starter's test application. The starter's tests tagged {@code container} run in this
 * module too; this one also checks that they meet Jetty, not Tomcat. With {@code server.compression.enabled} Jetty
 * inflates gzip request bodies in a handler of its own, before any filter.
 */
@TestPropertySource(properties = {"server.compression.enabled=true", "idempotency.max-stored-body-size=64KB"})
class JettyOnlyIntegrationTest extends OrdersApplicationTest {

    @Autowired
    WebServerApplicationContext context;

    @Test
    void theApplicationIsServedByJetty() {
        assertThat(context.getWebServer().getClass().getName()).contains("Jetty");
    }

    @Test
    void theLibrarysRefusalsKeepTheConnectionOpen() throws Exception {
        // unlike Tomcat, which closes the connection after a 400, 413, 500 or 503 whoever wrote it
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"refusals-" + key + "\"}";
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send("POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + body.length() + "\r\n\r\n" + body);
            String missing = connection.answer();
            connection.send(HttpProtocolIntegrationTest.post("/orders/large?size=65537", key, "application/json",
                    body));
            String tooLarge = connection.answer();
            connection.send(HttpProtocolIntegrationTest.post("/orders", key, "application/json", body));
            String created = connection.answer();

            assertThat(missing).startsWith("HTTP/1.1 400 ").doesNotContain("Connection: close");
            assertThat(tooLarge).startsWith("HTTP/1.1 500 ").contains("idempotency-response-too-large")
                    .doesNotContain("Connection: close");
            assertThat(created).as("the connection serves the next request").startsWith("HTTP/1.1 201 ");
        }
    }

    @Test
    void aFormAboveJettysPostSizeIsRefusedAsABadBody() throws Exception {
        // server.jetty.max-http-form-post-size, 200000 bytes by default; Tomcat's limit is 2 MB
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                        + "/orders/form")).header("Content-Type", "application/x-www-form-urlencoded")
                .header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("amount=1&note=" + "n".repeat(250_000))).build());

        assertThat(answer.statusCode()).as(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(400);
        assertProblem(answer, "idempotency-body-invalid");
        assertThat(keyRows(key)).isZero();
    }

    /**
     * Jetty inflates the body before any filter: the library meets it already decompressed under its
     * {@code Content-Encoding} header, and two compressions of one body are one request.
     */
    @Test
    void aRequestBodyJettyInflatesIsFingerprintedAsTheHandlerReadsIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "inflated-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"1.00\"}";

        HttpResponse<byte[]> first = postGzip(key, gzip(body, Deflater.BEST_COMPRESSION));
        HttpResponse<byte[]> replay = postGzip(key, gzip(body, Deflater.NO_COMPRESSION));
        HttpResponse<byte[]> other = postGzip(key, gzip(body.replace("1.00", "2.00"), Deflater.BEST_COMPRESSION));

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).as("another body under the key").isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * Jetty writes JSON through the servlet's writer in UTF-8 when no charset is set (the one RFC 8259 gives JSON),
     * where it writes other text in ISO-8859-1: the held answer must be the text the container would have sent, not
     * the same text with every character outside ISO-8859-1 lost.
     */
    @Test
    void jsonWrittenThroughTheWriterIsEncodedAsJettyEncodesItAndReplayedAlike() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"json-text-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/orders/json-text/unguarded",
                "{\"note\":\"json-text-unguarded-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/orders/json-text", key, body);
        HttpResponse<byte[]> replay = post("/orders/json-text", key, body);

        byte[] text = "{\"note\":\"caf\u00e9 \u20ac\"}".getBytes(StandardCharsets.UTF_8);
        assertThat(unguarded.body()).as("Jetty alone").isEqualTo(text);
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.ISO_8859_1)).as("the first answer")
                .isEqualTo(new String(text, StandardCharsets.ISO_8859_1));
        assertThat(first.headers().firstValue("Content-Type")).hasValueSatisfying(type -> assertThat(type)
                .doesNotContainIgnoringCase("iso-8859-1"));
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(text);
        assertThat(replay.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(rows("json-text-" + key)).isEqualTo(1);
    }

    /**
     * Jetty sends an interim 102 Processing for {@code sendError(102)}, and the handler goes on to answer: as with
     * Tomcat's 103, that is no error that rolls the request back, and nothing is sent before the commit.
     */
    @Test
    void processingNeitherRollsBackTheRequestNorLosesItsAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "processing-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        String request = "POST /capture/processing HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + "Idempotency-Key: " + key + "\r\nContent-Length: " + body.length() + "\r\nConnection: close\r\n\r\n"
                + body;

        String first = raw(request);
        String replay = raw(request);

        assertThat(first).as("no interim answer before the commit").startsWith("HTTP/1.1 201 ")
                .doesNotContain("HTTP/1.1 102").contains("\r\n\r\norder ");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(replay.substring(replay.indexOf("\r\n\r\n"))).isEqualTo(first.substring(first.indexOf("\r\n\r\n")));
    }

    /**
     * Unlike Tomcat, Jetty takes a request path with raw UTF-8 in it, and hands it on undecoded: a path parameter
     * (which the mapping ignores) may then carry a character that breaks or reorders the line that names the path
     * (NEL, which some log tools take for a line break; a right-to-left override). The library's lines show the path
     * as they show a key, with such characters as Java escapes.
     */
    @Test
    void aPathInTheLibrarysLogLinesIsShownOnOneLine() throws Exception {
        String body = "{\"note\":\"path-" + UUID.randomUUID() + "\"}";
        // the UTF-8 bytes of U+0085 and U+202E, sent as they are
        String path = "/orders/large;x=\u00c2\u0085FORGED\u00e2\u0080\u00aeREV?size=65537";
        Logger logger = (Logger) LoggerFactory.getLogger(IdempotencyFilter.class);
        ListAppender<ILoggingEvent> appender = new ListAppender<>();
        appender.start();
        logger.addAppender(appender);
        String answer;
        try {
            answer = raw(HttpProtocolIntegrationTest.headers(path, UUID.randomUUID().toString(), "application/json",
                    "Content-Length: " + body.length() + "\r\nConnection: close") + body);
        } finally {
            logger.detachAppender(appender);
        }

        assertThat(answer).startsWith("HTTP/1.1 500 ").contains("idempotency-response-too-large");
        List<String> lines = appender.list.stream().map(ILoggingEvent::getFormattedMessage).toList();
        assertThat(lines).anySatisfy(line -> assertThat(line)
                .contains("POST /orders/large;x=\\u0085FORGED\\u202eREV answered 65537 bytes"));
        assertThat(lines).noneSatisfy(line -> assertThat(line).containsAnyOf("\u0085", "\u202e"));
    }

    private HttpResponse<byte[]> postGzip(String key, byte[] body) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                .header("Content-Type", "application/json").header("Content-Encoding", "gzip")
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
    }
}
