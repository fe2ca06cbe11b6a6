package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletRequest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A handler that reads a form body as it was sent (a provider's callback whose signature covers its bytes), from the
 * request itself, gets every byte of it, as it does without the library.
 */
@Tag("container")
@SpringBootTest(classes = RawFormBodyIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class RawFormBodyIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(CallbacksController.class)
    static class App {
    }

    @RestController
    public static class CallbacksController {

        @PostMapping(path = "/signed-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent(keyRequired = false)
        public String callback(HttpServletRequest request) throws IOException {
            return "read:" + new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }

        @PostMapping(path = "/read-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent(keyRequired = false)
        public String parameters(HttpServletRequest request) {
            return "amounts:" + String.join(",", request.getParameterValues("amount")) + ";";
        }
    }

    @LocalServerPort
    int port;

    @Test
    void theHandlerReadsTheFormAsSentWithAKeyAsWithout() throws Exception {
        String form = "txn=42&amount=12.50&sig=abc";

        String key = UUID.randomUUID().toString();

        String withoutKey = post(null, form);
        String withKey = post(key, form);
        String replay = post(key, "amount=12.50&txn=42&sig=abc");
        String other = post(key, "txn=42&amount=999&sig=abc");

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ").contains("read:" + form);
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains("read:" + form);
        assertThat(replay).as("the same parameters").startsWith("HTTP/1.1 200 ")
                .contains("Idempotent-Replayed: true").contains("read:" + form);
        assertThat(other).as("another amount under the key").startsWith("HTTP/1.1 422 ")
                .contains("idempotency-key-mismatch");
    }

    @Test
    void aHandlerThatReadsTheParametersGetsTheQuerysAndTheFormsWithAKeyAsWithout() throws Exception {
        String form = "txn=43&amount=1&amount=2";

        String withoutKey = post("/read-callbacks?amount=0", null, form);
        String withKey = post("/read-callbacks?amount=0", UUID.randomUUID().toString(), form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ").contains("amounts:0,1,2;");
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains("amounts:0,1,2;");
    }

    /**
     * {@link #theHandlerReadsTheFormAsSentWithAKeyAsWithout}, for a form sent in chunks, without a declared length:
     * without a key the container leaves it in the body for the handler, which must find it there with a key too.
     */
    @Test
    void theHandlerReadsAFormSentInChunksAsSentWithAKeyAsWithout() throws Exception {
        String form = "txn=44&amount=12.50&sig=abc";
        String key = UUID.randomUUID().toString();

        String withoutKey = postInChunks(null, form);
        String withKey = postInChunks(key, form);
        String replay = post(key, form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ").contains("read:" + form);
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains("read:" + form);
        assertThat(replay).as("the same form with its length").startsWith("HTTP/1.1 200 ")
                .contains("Idempotent-Replayed: true").contains("read:" + form);
    }

    /**
     * {@link #theHandlerReadsTheFormAsSentWithAKeyAsWithout}, for a form whose media type is spelled in another case:
     * media types are case-insensitive, and the containers parse it as a form (Tomcat, as Jetty, compares the type
     * in lower case), so it is read as any other form.
     */
    @Test
    void theHandlerReadsAFormWhoseTypeIsInAnotherCaseAsSentWithAKeyAsWithout() throws Exception {
        String form = "txn=45&amount=12.50&sig=abc";
        String type = "Application/X-WWW-Form-Urlencoded";
        String key = UUID.randomUUID().toString();

        String withoutKey = post("/signed-callbacks", type, null, form);
        String withKey = post("/signed-callbacks", type, key, form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ").contains("read:" + form);
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains("read:" + form);
    }

    private String post(String key, String form) throws IOException {
        return post("/signed-callbacks", key, form);
    }

    private String postInChunks(String key, String form) throws IOException {
        String start = form.substring(0, form.length() / 2);
        String end = form.substring(form.length() / 2);
        return OrdersApplicationTest.raw(port, "POST /signed-callbacks HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n"
                + Integer.toHexString(start.length()) + "\r\n" + start + "\r\n" + Integer.toHexString(end.length())
                + "\r\n" + end + "\r\n0\r\n\r\n");
    }

    private String post(String target, String key, String form) throws IOException {
        return post(target, "application/x-www-form-urlencoded", key, form);
    }

    private String post(String target, String type, String key, String form) throws IOException {
        return OrdersApplicationTest.raw(port, "POST " + target + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: " + type + "\r\nContent-Length: " + form.length() + "\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n" + form);
    }
}
