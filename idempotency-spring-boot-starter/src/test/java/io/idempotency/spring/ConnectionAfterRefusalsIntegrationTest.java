package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.test.context.TestPropertySource;

import java.io.IOException;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What becomes of the connection after the library's refusals, as docs/http-responses.md says: Tomcat closes it after a
 * 400, 413 or 500 (its own rule, whoever wrote the answer) and says so with {@code Connection: close}, and keeps it
 * after a 409 or 422; Jetty keeps it after all of them, but for the answer to a handler that went async, which the
 * library closes on both. Runs on both containers.
 */
@TestPropertySource(properties = {"idempotency.in-flight-wait=200ms", "idempotency.max-request-body-size=2KB",
        "idempotency.max-stored-body-size=64KB"})
class ConnectionAfterRefusalsIntegrationTest extends OrdersApplicationTest {

    @Autowired
    WebServerApplicationContext context;

    private boolean tomcat() {
        return context.getWebServer().getClass().getName().contains("Tomcat");
    }

    @Test
    void aMissingKeyIsAnsweredWith400() throws Exception {
        String body = "{\"note\":\"missing-" + UUID.randomUUID() + "\"}";
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send("POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + body.length() + "\r\n\r\n" + body);
            String missing = connection.answer();

            assertThat(missing).startsWith("HTTP/1.1 400 ").contains("idempotency-key-missing");
            assertConnection(connection, missing, tomcat());
        }
    }

    /**
     * A refusal made before anyone read the body (the handler reads it from an {@code InputStream} argument, after
     * the advice): the rest of the body is still in the connection, which the container closes rather than read it.
     * The answer says so, on Jetty too, which closed it after an answer that looked as if it kept it.
     */
    @Test
    void aMissingKeyWithTheBodyUnreadEndsTheConnectionSayingSo() throws Exception {
        String body = "streamed-" + UUID.randomUUID() + "-" + "x".repeat(1000);
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send("POST /orders/streams HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
                    + "Content-Length: " + body.length() + "\r\n\r\n" + body);
            String missing = connection.answer();

            assertThat(missing).startsWith("HTTP/1.1 400 ").contains("idempotency-key-missing");
            assertThat(missing).as("Connection: close").contains("\r\nConnection: close\r\n");
            assertThat(connection.in.read()).as("the connection ends after the answer").isEqualTo(-1);
        }
    }

    /**
     * A body sent in chunks, larger than the cap, to a handler that reads it itself: the library reads up to the cap
     * to fingerprint it and refuses it, the rest still in the connection, which ends, saying so.
     */
    @Test
    void aChunkedBodyAboveTheCapEndsTheConnectionSayingSo() throws Exception {
        String key = UUID.randomUUID().toString();
        String chunk = "x".repeat(1000);
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send("POST /orders/streams HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
                    + "Idempotency-Key: " + key + "\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + ("3e8\r\n" + chunk + "\r\n").repeat(10) + "0\r\n\r\n");
            String tooLarge = connection.answer();

            assertThat(tooLarge).startsWith("HTTP/1.1 413 ").contains("idempotency-request-too-large");
            assertConnection(connection, tooLarge, true);
        }
        assertThat(keyRows(key)).isZero();
    }

    /**
     * A multipart body, refused (it cannot be fingerprinted), was read whole by the container, which parsed its parts
     * before the handler was called: nothing of it is left in the connection, which serves the next request.
     */
    @Test
    void aMultipartBodyIsRefusedAndTheConnectionServesTheNextRequest() throws Exception {
        String boundary = "----part" + UUID.randomUUID();
        String body = "--" + boundary + "\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nmultipart-"
                + UUID.randomUUID() + "\r\n--" + boundary + "--\r\n";
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send("POST /orders/multipart HTTP/1.1\r\nHost: localhost\r\n"
                    + "Content-Type: multipart/form-data; boundary=" + boundary + "\r\n"
                    + "Idempotency-Key: " + UUID.randomUUID() + "\r\nContent-Length: " + body.length() + "\r\n\r\n"
                    + body);
            String refused = connection.answer();

            assertThat(refused).startsWith("HTTP/1.1 415 ").contains("idempotency-body-unsupported");
            assertConnection(connection, refused, false);
        }
    }

    @Test
    void aBodyAboveTheCapIsAnsweredWith413() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "too-large-" + key;
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(HttpProtocolIntegrationTest.post("/orders", key, "application/json",
                    "{\"note\":\"" + note + "\",\"amount\":\"" + "1".repeat(3000) + "\"}"));
            String tooLarge = connection.answer();

            assertThat(tooLarge).startsWith("HTTP/1.1 413 ").contains("idempotency-request-too-large");
            assertConnection(connection, tooLarge, tomcat());
        }
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anAnswerAboveTheStoredCapIsAnsweredWith500() throws Exception {
        String key = UUID.randomUUID().toString();
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(HttpProtocolIntegrationTest.post("/orders/large?size=65537", key, "application/json",
                    "{\"note\":\"large-" + key + "\"}"));
            String tooLarge = connection.answer();

            assertThat(tooLarge).startsWith("HTTP/1.1 500 ").contains("idempotency-response-too-large");
            assertConnection(connection, tooLarge, tomcat());
        }
    }

    /**
     * The handler's async work may outlive the request and keep objects of the connection: the connection ends with
     * the answer, on Jetty too, so that no later request on it can meet that work.
     */
    @Test
    void aHandlerThatGoesAsyncIsAnsweredWith500AndTheConnectionEnds() throws Exception {
        String key = UUID.randomUUID().toString();
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(HttpProtocolIntegrationTest.post("/orders/async-left-open", key, "application/json",
                    "{\"note\":\"async-left-open-" + key + "\"}"));
            String refused = connection.answer();

            assertThat(refused).startsWith("HTTP/1.1 500 ").contains("idempotency-commit-failed");
            assertConnection(connection, refused, true);
        }
        assertThat(keyRows(key)).isZero();
    }

    /**
     * The same answer to an HTTP/1.0 client, one that asks to keep the connection too: it arrives whole, says
     * {@code Connection: close}, and the connection ends after it rather than waiting for another request.
     */
    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void aHandlerThatGoesAsyncIsAnsweredWith500AndTheConnectionEndsOverHttp10(boolean keepAlive) throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"async-left-open-http10-" + key + "\"}";
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send("POST /orders/async-left-open HTTP/1.0\r\nContent-Type: application/json\r\n"
                    + (keepAlive ? "Connection: keep-alive\r\n" : "") + "Idempotency-Key: " + key
                    + "\r\nContent-Length: " + body.length() + "\r\n\r\n" + body);
            String refused = connection.answer();

            assertThat(refused).matches("(?s)HTTP/1\\.[01] 500 .*").contains("idempotency-commit-failed")
                    .containsIgnoringCase("\r\nContent-Type: application/problem+json");
            assertThat(refused).as("Connection: close").contains("\r\nConnection: close\r\n");
            assertThat(refused.substring(refused.indexOf("\r\n\r\n") + 4)).startsWith("{").endsWith("}");
            assertThat(connection.in.read()).as("the connection ends after the answer").isEqualTo(-1);
        }
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anotherBodyUnderTheKeyIsAnsweredWith422() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "mismatch-" + key;
        try (KeepAliveConnection connection = new KeepAliveConnection()) {
            connection.send(HttpProtocolIntegrationTest.post("/orders", key, "application/json",
                    "{\"note\":\"" + note + "\"}"));
            assertThat(connection.answer()).startsWith("HTTP/1.1 201 ");
            connection.send(HttpProtocolIntegrationTest.post("/orders", key, "application/json",
                    "{\"note\":\"other-" + note + "\"}"));
            String mismatch = connection.answer();

            assertThat(mismatch).startsWith("HTTP/1.1 422 ");
            assertConnection(connection, mismatch, false);
        }
    }

    @Test
    void aDuplicateWhileTheFirstRunsIsAnsweredWith409() throws Exception {
        String key = UUID.randomUUID().toString();
        String request = HttpProtocolIntegrationTest.post("/orders/slow?millis=2000", key, "application/json",
                "{\"note\":\"in-flight-" + key + "\"}");
        try (KeepAliveConnection first = new KeepAliveConnection();
             KeepAliveConnection duplicate = new KeepAliveConnection()) {
            first.send(request);
            awaitHandlerInItsTransaction();
            duplicate.send(request);
            String inFlight = duplicate.answer();

            assertThat(inFlight).startsWith("HTTP/1.1 409 ").contains("idempotency-request-in-progress");
            assertConnection(duplicate, inFlight, false);
            assertThat(first.answer()).startsWith("HTTP/1.1 201 ");
        }
    }

    /**
     * A closed connection says so in the answer and ends after it; an open one serves the next request. The end is
     * read before anything more is sent, so a connection the container keeps cannot pass for a closed one.
     */
    private void assertConnection(KeepAliveConnection connection, String answer, boolean closed) throws IOException {
        if (closed) {
            assertThat(answer).as("Connection: close").contains("\r\nConnection: close\r\n");
            assertThat(connection.in.read()).as("the connection ends after the answer").isEqualTo(-1);
        } else {
            assertThat(answer).doesNotContainIgnoringCase("Connection: close");
            String key = UUID.randomUUID().toString();
            connection.send(HttpProtocolIntegrationTest.post("/orders", key, "application/json",
                    "{\"note\":\"next-" + key + "\"}"));
            assertThat(connection.answer()).as("the connection serves the next request").startsWith("HTTP/1.1 201 ");
        }
    }
}
