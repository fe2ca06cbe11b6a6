package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Service;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An intent-first {@code @Idempotent} method (a gateway charge) called by an {@code @Idempotent} handler that runs in
 * one transaction. The request is claimed once, by the handler, in its mode: the charge would run inside that
 * transaction, with no claim committed before it and nothing left for the resolver when its outcome is unknown — the
 * mode it asks for silently not given. The call is refused before the charge runs, and nothing of the request is kept.
 */
@SpringBootTest(classes = NestedIntentFirstMethodIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class NestedIntentFirstMethodIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();
    private static final AtomicInteger CHARGES = new AtomicInteger();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({OrdersController.class, Gateway.class})
    static class App {
    }

    @Service
    public static class Gateway {

        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
        public String charge(String note) {
            CHARGES.incrementAndGet();
            return "charged " + note;
        }
    }

    @RestController
    public static class OrdersController {

        private final JdbcClient jdbc;
        private final Gateway gateway;

        public OrdersController(JdbcClient jdbc, Gateway gateway) {
            this.jdbc = jdbc;
            this.gateway = gateway;
        }

        @PostMapping("/orders")
        @Idempotent
        public String order(@RequestBody String note) {
            jdbc.sql("insert into orders (note) values (?)").param(note).update();
            return gateway.charge(note);
        }
    }

    @LocalServerPort
    int port;

    @Test
    void anIntentFirstMethodCalledInAOneTransactionRequestIsRefused() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "nested-" + key;
        HttpResponse<String> answer = HttpClient.newHttpClient().send(HttpRequest.newBuilder(
                        URI.create("http://localhost:" + port + "/orders"))
                .header("Idempotency-Key", key).header("Content-Type", "text/plain")
                .POST(HttpRequest.BodyPublishers.ofString(note)).build(), HttpResponse.BodyHandlers.ofString());

        assertThat(answer.statusCode()).as(answer.body()).isEqualTo(500);
        assertThat(CHARGES).as("charges run in the request's one transaction").hasValue(0);
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
    }
}
