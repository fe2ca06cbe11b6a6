package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
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
 * After {@code sendError} the response counts as committed (the Servlet specification): Tomcat takes no more headers
 * (nor cookies), so a handler that sets one then does not send it; Jetty still sends it. The library ignores it on
 * both, for the answer it stores and replays and for an error it rolls back, so that a replay carries what the first
 * answer did, and a late content type cannot break the container's error page.
 */
@Tag("container")
@SpringBootTest(classes = HeadersAfterSendErrorIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class HeadersAfterSendErrorIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(LateHeadersController.class)
    static class App {
    }

    @RestController
    public static class LateHeadersController {

        private final JdbcClient jdbc;

        public LateHeadersController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/late-headers/{status}")
        @Idempotent
        public void answer(@PathVariable int status, @RequestBody Map<String, String> payment,
                           HttpServletResponse response) throws IOException {
            jdbc.sql("insert into orders (note) values (?)").param(payment.get("note")).update();
            response.setHeader("X-Before", "sent");
            response.sendError(status);
            response.setHeader("Location", "/payments/late");
            response.addHeader("X-After", "ignored");
            response.setIntHeader("X-After-Int", 1);
            response.setDateHeader("Last-Modified", 0);
            response.setContentType("text/late");
            response.addCookie(new Cookie("late", "ignored"));
        }

        /**
         * Refuses the payment, then goes on as if it had not (a missing {@code return}): {@code then} is what it does
         * after {@code sendError}, each of which the container refuses once the response counts as committed.
         */
        @PostMapping("/refused-then/{then}")
        @Idempotent
        public void refusedThen(@PathVariable String then, @RequestBody Map<String, String> payment,
                                HttpServletResponse response) throws IOException {
            jdbc.sql("insert into orders (note) values (?)").param(payment.get("note")).update();
            response.sendError(400, "no such account");
            switch (then) {
                case "redirect" -> response.sendRedirect("/payments/late");
                case "redirect-303" -> response.sendRedirect("/payments/late", 303);
                case "accepted" -> response.sendError(202);
                case "reset" -> {
                    response.reset();
                    response.setStatus(201);
                    response.getWriter().write("created");
                }
                default -> throw new IllegalArgumentException(then);
            }
        }

        @PostMapping("/refused-then/{then}/unguarded")
        public void refusedThenUnguarded(@PathVariable String then, @RequestBody Map<String, String> payment,
                                         HttpServletResponse response) throws IOException {
            refusedThen(then, payment, response);
        }

        @PostMapping("/late-headers/{status}/unguarded")
        public void unguarded(@PathVariable int status, @RequestBody Map<String, String> payment,
                              HttpServletResponse response) throws IOException {
            answer(status, payment, response);
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aSuccessSentThroughSendErrorCarriesNoHeaderSetAfterIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"late-accepted-" + key + "\"}";

        String unguarded = post("/late-headers/202/unguarded", null, "{\"note\":\"late-unguarded-" + key + "\"}");
        String first = post("/late-headers/202", key, body);
        String replay = post("/late-headers/202", key, body);

        assertThat(unguarded).as("the container alone").startsWith("HTTP/1.1 202 ").contains("X-Before: sent");
        for (String answer : new String[] {first, replay}) {
            assertThat(answer).startsWith("HTTP/1.1 202 ")
                    .doesNotContain("Location:", "X-After", "Last-Modified", "text/late", "late=ignored");
        }
        assertThat(first).contains("X-Before: sent");
        assertThat(replay).contains("Idempotent-Replayed: true");
    }

    @Test
    void anErrorSentThroughSendErrorCarriesNoHeaderSetAfterIt() throws Exception {
        String key = UUID.randomUUID().toString();

        String unguarded = post("/late-headers/400/unguarded", null, "{\"note\":\"late-unguarded-" + key + "\"}");
        String first = post("/late-headers/400", key, "{\"note\":\"late-refused-" + key + "\"}");

        assertThat(unguarded).as("the container alone").startsWith("HTTP/1.1 400 ").contains("X-Before: sent");
        for (String answer : new String[] {first}) {
            assertThat(answer).startsWith("HTTP/1.1 400 ")
                    .doesNotContain("Location:", "X-After", "Last-Modified", "text/late", "late=ignored");
        }
        assertThat(first).contains("X-Before: sent");
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
    }

    @ParameterizedTest
    @ValueSource(strings = {"redirect", "redirect-303", "accepted", "reset"})
    void whatTheContainerRefusesAfterSendErrorDoesNotTurnTheErrorIntoAStoredAnswer(String then) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "refused-then-" + then + "-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        String unguarded = post("/refused-then/" + then + "/unguarded", null,
                "{\"note\":\"refused-unguarded-" + then + "-" + key + "\"}");
        String first = post("/refused-then/" + then, key, body);
        String retry = post("/refused-then/" + then, key, body);

        // the container alone takes none of it: Tomcat throws (500), Jetty keeps the error sent (400)
        assertThat(status(unguarded)).as(unguarded).isGreaterThanOrEqualTo(400);
        assertThat(unguarded).doesNotContain("Location:");
        // the library throws as Tomcat does, on either container
        assertThat(first).as("an error, as without the library").startsWith("HTTP/1.1 500 ")
                .doesNotContain("Location:");
        assertThat(retry).as("nothing was stored: the retry runs again").startsWith("HTTP/1.1 500 ")
                .doesNotContain("Idempotent-Replayed");
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
        assertThat(TestDatabases.rows(DATABASE, note)).as("the refused payment was not kept").isZero();
    }

    private static int status(String answer) {
        return Integer.parseInt(answer.substring("HTTP/1.1 ".length(), "HTTP/1.1 ".length() + 3));
    }

    private String post(String path, String key, String body) throws IOException {
        return OrdersApplicationTest.raw(port, "POST " + path + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/json\r\nContent-Length: " + body.length() + "\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n" + body);
    }
}
