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
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code idempotency.max-request-body-size} caps a form body as it is sent, like any other body: a form within the
 * cap is run, however many parameters it has, and one above it is refused before anything is claimed.
 */
@Tag("container")
@SpringBootTest(classes = FormBodySizeIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "idempotency.max-request-body-size=256")
class FormBodySizeIntegrationTest {

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

    /** Takes a provider's form-encoded callback, a field per fact. */
    @RestController
    public static class CallbacksController {

        private final JdbcClient jdbc;

        public CallbacksController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping(path = "/callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent
        public Map<String, Object> callback(@RequestParam Map<String, String> fields) {
            jdbc.sql("insert into orders (note) values (?)").param(fields.get("note")).update();
            return Map.of("fields", fields.size());
        }

        /** A callback whose handler reads the form as sent (its signature covers its bytes), then its fields. */
        @PostMapping(path = "/signed-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent
        public Map<String, Object> signedCallback(HttpServletRequest request) throws IOException {
            int read = request.getInputStream().readAllBytes().length;
            jdbc.sql("insert into orders (note) values (?)").param(request.getParameter("note")).update();
            return Map.of("read", read);
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aFormWithinTheCapIsRunWhateverItsNumberOfParameters() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "form-" + key.substring(0, 8);
        StringBuilder form = new StringBuilder("note=" + note);
        for (int i = 0; i < 32; i++) {
            form.append("&f").append(i).append("=1");
        }
        assertThat(form.toString().getBytes(StandardCharsets.UTF_8).length).as("the body is within the cap")
                .isLessThan(256);

        String first = post(key, form.toString());
        String replay = post(key, form.toString());

        assertThat(first).startsWith("HTTP/1.1 200 ").doesNotContain("idempotency-request-too-large");
        assertThat(replay).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    @Test
    void aFormAboveTheCapIsRefusedAndLeavesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "large-form-" + key.substring(0, 8);
        String form = "note=" + note + "&padding=" + "x".repeat(256);

        String answer = post(key, form);

        assertThat(answer).startsWith("HTTP/1.1 413 ").contains("idempotency-request-too-large");
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
    }

    /**
     * A form the library reads into its copy, for a handler that reads it as sent, is measured as sent, however it is
     * framed: one within the cap whose parameters, many and short, are longer written as JSON is run sent in chunks
     * as with its length, and one above it is refused either way.
     */
    @Test
    void aFormReadAsSentIsMeasuredAsSentWhetherItDeclaresItsLengthOrComesInChunks() throws Exception {
        for (boolean chunkedFirst : new boolean[] {false, true}) {
            String key = UUID.randomUUID().toString();
            String note = "signed-" + key.substring(0, 8);
            StringBuilder form = new StringBuilder("note=" + note);
            for (int i = 0; i < 32; i++) {
                form.append("&f").append(i).append("=1");
            }
            String what = chunkedFirst ? "chunked first" : "with its length first";

            String first = post("/signed-callbacks", key, form.toString(), chunkedFirst);
            String retry = post("/signed-callbacks", key, form.toString(), !chunkedFirst);

            assertThat(first).as(what).startsWith("HTTP/1.1 200 ").contains("\"read\":" + form.length());
            assertThat(retry).as(what).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
            assertThat(TestDatabases.rows(DATABASE, note)).as(what).isEqualTo(1);

            String largeKey = UUID.randomUUID().toString();
            String large = "note=large-" + note + "&padding=" + "x".repeat(256);
            assertThat(post("/signed-callbacks", largeKey, large, chunkedFirst)).as(what)
                    .startsWith("HTTP/1.1 413 ").contains("idempotency-request-too-large");
            assertThat(TestDatabases.keyRows(DATABASE, largeKey)).as(what).isZero();
        }
    }

    private String post(String target, String key, String form, boolean chunked) throws IOException {
        String head = "POST " + target + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\nIdempotency-Key: " + key + "\r\n"
                + "Connection: close\r\n";
        if (!chunked) {
            return OrdersApplicationTest.raw(port, head + "Content-Length: " + form.length() + "\r\n\r\n" + form);
        }
        String start = form.substring(0, form.length() / 2);
        String end = form.substring(form.length() / 2);
        return OrdersApplicationTest.raw(port, head + "Transfer-Encoding: chunked\r\n\r\n"
                + Integer.toHexString(start.length()) + "\r\n" + start + "\r\n" + Integer.toHexString(end.length())
                + "\r\n" + end + "\r\n0\r\n\r\n");
    }

    private String post(String key, String form) throws IOException {
        return OrdersApplicationTest.raw(port, "POST /callbacks HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " + form.length() + "\r\n"
                + "Idempotency-Key: " + key + "\r\nConnection: close\r\n\r\n" + form);
    }
}
