package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
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

    private String post(String key, String form) throws IOException {
        return OrdersApplicationTest.raw(port, "POST /callbacks HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " + form.length() + "\r\n"
                + "Idempotency-Key: " + key + "\r\nConnection: close\r\n\r\n" + form);
    }
}
