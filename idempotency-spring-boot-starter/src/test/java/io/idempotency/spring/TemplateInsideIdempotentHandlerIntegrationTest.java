package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The template called from an {@code @Idempotent} handler, in either mode: the handler's work runs in a transaction
 * of the request, and the template must own its own, so the call is refused before its work runs, and the request
 * fails as a whole — neither the template's key nor the handler's write nor an answer of the request is kept, so that
 * no retry replays a half-done request (an intent-first request's claim stays, undecided, as after any failure of its
 * handler).
 */
@SpringBootTest(classes = TemplateInsideIdempotentHandlerIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class TemplateInsideIdempotentHandlerIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();
    private static final AtomicInteger WORK = new AtomicInteger();

    @org.springframework.test.context.DynamicPropertySource
    static void database(org.springframework.test.context.DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(OrdersController.class)
    static class App {
    }

    @RestController
    public static class OrdersController {

        private final JdbcClient jdbc;
        private final IdempotencyTemplate template;

        public OrdersController(JdbcClient jdbc, IdempotencyTemplate template) {
            this.jdbc = jdbc;
            this.template = template;
        }

        @PostMapping("/orders/one-transaction")
        @Idempotent
        public String inOneTransaction(@RequestBody String note) throws Exception {
            return order(note);
        }

        @PostMapping("/orders/intent-first")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
        public String intentFirst(@RequestBody String note) throws Exception {
            return order(note);
        }

        private String order(String note) throws Exception {
            jdbc.sql("insert into orders (note) values (?)").param(note).update();
            return new String(template.execute(new ScopedKey("", "order-events", "template-" + note),
                    note.getBytes(StandardCharsets.UTF_8), () -> {
                        WORK.incrementAndGet();
                        return "published".getBytes(StandardCharsets.UTF_8);
                    }).value(), StandardCharsets.UTF_8);
        }
    }

    @LocalServerPort
    int port;

    @ParameterizedTest
    @ValueSource(strings = {"one-transaction", "intent-first"})
    void theTemplateInsideAnIdempotentHandlerIsRefusedAndNothingOfTheRequestIsKept(String mode) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "nested-template-" + mode + "-" + key;
        int before = WORK.get();
        boolean intentFirst = mode.equals("intent-first");
        for (int attempt = 1; attempt <= 2; attempt++) {
            HttpResponse<String> answer = post(mode, key, note);

            // an intent-first handler that threw has an unknown outcome: its claim is held for its lease (then the
            // resolver decides), so the retry is told the request is in progress
            assertThat(answer.statusCode()).as("attempt %d: %s", attempt, answer.body())
                    .isEqualTo(intentFirst && attempt == 2 ? 409 : 500);
            assertThat(WORK).as("the template's work never runs").hasValue(before);
            assertThat(TestDatabases.rows(DATABASE, note)).as("the handler's write is not kept").isZero();
            assertThat(TestDatabases.keyRows(DATABASE, "template-" + note)).as("no template key").isZero();
        }
        // no answer is kept for the request: in one transaction its claim is rolled back and the retry runs the handler
        // again; intent-first, the claim alone stays, undecided
        assertThat(TestDatabases.keyRows(DATABASE, key)).isEqualTo(intentFirst ? 1 : 0);
    }

    private HttpResponse<String> post(String mode, String key, String note) throws Exception {
        return HttpClient.newHttpClient().send(HttpRequest.newBuilder(
                        URI.create("http://localhost:" + port + "/orders/" + mode))
                .header("Idempotency-Key", key).header("Content-Type", "text/plain")
                .POST(HttpRequest.BodyPublishers.ofString(note)).build(), HttpResponse.BodyHandlers.ofString());
    }
}
