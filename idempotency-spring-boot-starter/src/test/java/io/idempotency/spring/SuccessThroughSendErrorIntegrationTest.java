package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletResponse;
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
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A handler that answers a success or a redirect through {@code sendError}: the client is told the request succeeded,
 * so its effects must be kept, and a retry replayed. The error page the container would render after the filter for
 * that status cannot be stored, so the answer is the status and the headers without a body, the first time and on
 * replay. An error status still keeps nothing.
 */
@Tag("container")
@SpringBootTest(classes = SuccessThroughSendErrorIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class SuccessThroughSendErrorIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(PaymentsController.class)
    static class App {
    }

    @RestController
    public static class PaymentsController {

        private final JdbcClient jdbc;

        public PaymentsController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/send-error/{status}")
        @Idempotent
        public void sendError(@PathVariable int status, @RequestBody Map<String, String> payment,
                              HttpServletResponse response) throws IOException {
            jdbc.sql("insert into orders (note) values (?)").param(payment.get("note")).update();
            response.setHeader("Location", "/payments/" + payment.get("note"));
            response.getWriter().write("dropped, as sendError drops what was written");
            response.sendError(status, "answered by the handler");
            response.getWriter().write("dropped, written after sendError");
        }

        @PostMapping("/send-error/{status}/unguarded")
        public void sendErrorUnguarded(@PathVariable int status, @RequestBody Map<String, String> payment,
                                       HttpServletResponse response) throws IOException {
            sendError(status, payment, response);
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aSuccessAnsweredThroughSendErrorIsKeptAndReplayedAsTheContainerSendsIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "accepted-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        String unguarded = post("/send-error/202/unguarded", null, "{\"note\":\"unguarded-" + key + "\"}");
        String first = post("/send-error/202", key, body);
        long rowsAfterFirst = TestDatabases.rows(DATABASE, note);
        String replay = post("/send-error/202", key, body);

        assertThat(unguarded).as("the container alone").startsWith("HTTP/1.1 202 ");
        assertThat(first).startsWith("HTTP/1.1 202 ");
        assertThat(rowsAfterFirst).as("the client was told 202 Accepted: the payment must have been kept")
                .isEqualTo(1);
        assertThat(replay).startsWith("HTTP/1.1 202 ").contains("Idempotent-Replayed: true");
        assertThat(body(first)).isEmpty();
        assertThat(body(replay)).isEmpty();
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    @Test
    void aRedirectAnsweredThroughSendErrorIsKeptAndReplayedWithItsLocation() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "see-other-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        String unguarded = post("/send-error/303/unguarded", null, "{\"note\":\"unguarded-" + key + "\"}");
        String first = post("/send-error/303", key, body);
        long rowsAfterFirst = TestDatabases.rows(DATABASE, note);
        String replay = post("/send-error/303", key, body);

        assertThat(unguarded).as("the container alone").startsWith("HTTP/1.1 303 ");
        assertThat(first).startsWith("HTTP/1.1 303 ").contains("Location: /payments/" + note + "\r\n");
        assertThat(rowsAfterFirst).isEqualTo(1);
        assertThat(replay).startsWith("HTTP/1.1 303 ").contains("Idempotent-Replayed: true")
                .contains("Location: /payments/" + note + "\r\n");
        assertThat(body(first)).isEmpty();
        assertThat(body(replay)).isEmpty();
    }

    @Test
    void anErrorAnsweredThroughSendErrorStillKeepsNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "refused-" + key;

        String first = post("/send-error/400", key, "{\"note\":\"" + note + "\"}");

        assertThat(first).startsWith("HTTP/1.1 400 ");
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
    }

    private static String body(String answer) {
        return answer.substring(answer.indexOf("\r\n\r\n") + 4);
    }

    private String post(String path, String key, String body) throws IOException {
        return OrdersApplicationTest.raw(port, "POST " + path + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/json\r\nContent-Length: " + body.length() + "\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n" + body);
    }
}
