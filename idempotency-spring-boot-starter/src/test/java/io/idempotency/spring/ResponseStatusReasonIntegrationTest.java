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
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.util.Map;
import java.util.UUID;

import static io.idempotency.spring.StartupFailures.assertStartFails;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code @ResponseStatus} with a reason makes Spring MVC answer through {@code sendError} once the handler returned.
 * With a success or a redirect status that is an answer like any other: kept, stored and replayed, so such a handler
 * starts. With an error status it can never be stored, and every request would be rolled back: refused at startup.
 */
@Tag("container")
@SpringBootTest(classes = ResponseStatusReasonIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class ResponseStatusReasonIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({AcceptingController.class, SeeOtherController.class})
    static class App {
    }

    @RestController
    public static class AcceptingController {

        private final JdbcClient jdbc;

        public AcceptingController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/reason/accepted")
        @Idempotent
        @ResponseStatus(code = HttpStatus.ACCEPTED, reason = "Payment accepted")
        public String accept(@RequestBody Map<String, String> payment) {
            jdbc.sql("insert into orders (note) values (?)").param(payment.get("note")).update();
            return "not written: the reason answers";
        }
    }

    /** The reason on the class, as Spring MVC finds it too. */
    @RestController
    @ResponseStatus(code = HttpStatus.SEE_OTHER, reason = "See the payment")
    public static class SeeOtherController {

        private final JdbcClient jdbc;

        public SeeOtherController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/reason/see-other")
        @Idempotent
        public String redirect(@RequestBody Map<String, String> payment) {
            jdbc.sql("insert into orders (note) values (?)").param(payment.get("note")).update();
            return "not written: the reason answers";
        }
    }

    @RestController
    static class ConflictReasonController {
        @PostMapping("/reason/conflict")
        @Idempotent
        @ResponseStatus(code = HttpStatus.UNPROCESSABLE_CONTENT, reason = "Refused")
        public String refuse() {
            return "sent as an error page instead";
        }

        @PostMapping("/reason/default")
        @Idempotent
        @ResponseStatus(reason = "Failed")
        public String fail() {
            return "sent as an error page instead";
        }

        @PostMapping("/reason/fine")
        @Idempotent
        @ResponseStatus(code = HttpStatus.CREATED, reason = "Created")
        public String created() {
            return "stored";
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aSuccessWithAReasonStartsAndIsKeptStoredAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "reason-accepted-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        String first = post("/reason/accepted", key, body);
        long rowsAfterFirst = TestDatabases.rows(DATABASE, note);
        String replay = post("/reason/accepted", key, body);

        assertThat(first).startsWith("HTTP/1.1 202 ").doesNotContain("Idempotent-Replayed");
        assertThat(rowsAfterFirst).as("the client was told 202 Accepted: the payment must have been kept")
                .isEqualTo(1);
        assertThat(replay).startsWith("HTTP/1.1 202 ").contains("Idempotent-Replayed: true");
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
        assertThat(TestDatabases.keyRows(DATABASE, key)).isEqualTo(1);
    }

    @Test
    void aRedirectWithAReasonOnTheClassIsKeptAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "reason-see-other-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        String first = post("/reason/see-other", key, body);
        String replay = post("/reason/see-other", key, body);

        assertThat(first).startsWith("HTTP/1.1 303 ");
        assertThat(replay).startsWith("HTTP/1.1 303 ").contains("Idempotent-Replayed: true");
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    @Test
    void anErrorStatusWithAReasonIsStillRefusedAtStartup() {
        assertStartFails(TestDatabases.contextRunner(DATABASE).withUserConfiguration(ConflictReasonController.class))
                .contains("ConflictReasonController.refuse() has @ResponseStatus with a reason",
                        "ConflictReasonController.fail() has @ResponseStatus with a reason", "status 422",
                        "status 500")
                .doesNotContain("created()");
    }

    private String post(String path, String key, String body) throws IOException {
        return OrdersApplicationTest.raw(port, "POST " + path + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/json\r\nContent-Length: " + body.length() + "\r\n"
                + "Idempotency-Key: " + key + "\r\nConnection: close\r\n\r\n" + body);
    }
}
