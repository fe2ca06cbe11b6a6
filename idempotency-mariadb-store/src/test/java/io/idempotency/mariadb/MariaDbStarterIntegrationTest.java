package io.idempotency.mariadb;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyStore;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter with the MariaDB store, over real HTTP on real MariaDB, on a pool at REPEATABLE READ: an order is made
 * once, its answer replayed byte for byte, another body under its key refused, a failing handler leaves nothing, and
 * 20 concurrent duplicates make one order.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
@SpringBootTest(classes = MariaDbStarterIntegrationTest.OrderApplication.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class MariaDbStarterIntegrationTest {

    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static TestMariaDb.Database database;

    /** Before the application starts, which reads its properties from here lazily. */
    @BeforeAll
    static void newDatabase() {
        database = TestMariaDb.newDatabase();
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        registry.add("spring.datasource.url", () -> database.url());
        registry.add("spring.datasource.username", () -> database.user());
        registry.add("spring.datasource.password", () -> database.password());
        registry.add("spring.datasource.hikari.maximum-pool-size", () -> "30");
        // InnoDB's default, whatever the server's: the starter's transactions must ask for READ COMMITTED
        registry.add("spring.datasource.hikari.transaction-isolation", () -> "TRANSACTION_REPEATABLE_READ");
    }

    @LocalServerPort
    int port;

    @Autowired
    JdbcTemplate jdbc;

    @Test
    void thePoolsConnectionsRunAtRepeatableRead() {
        assertThat(jdbc.queryForObject("SELECT @@tx_isolation", String.class)).isEqualTo("REPEATABLE-READ");
    }

    @Test
    void anOrderIsMadeOnceAndReplayedByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "once-" + key;

        HttpResponse<String> first = post(key, order(reference, 3));
        HttpResponse<String> second = post(key, "{ \"quantity\": 3, \"reference\": \"" + reference + "\" }");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(orders(reference)).isEqualTo(1);
        assertThat(jdbc.queryForObject("SELECT concat(status, ' ', response_status) FROM idempotency_keys"
                + " WHERE idempotency_key = ?", String.class, key)).isEqualTo("SUCCEEDED 201");
    }

    @Test
    void anotherBodyUnderTheKeyIsRefusedAndChangesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "mismatch-" + key;
        assertThat(post(key, order(reference, 1)).statusCode()).isEqualTo(201);

        HttpResponse<String> other = post(key, order(reference, 2));

        assertThat(other.statusCode()).isEqualTo(422);
        assertThat(other.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(jdbc.queryForObject("SELECT quantity FROM orders WHERE reference = ?", Integer.class, reference))
                .isEqualTo(1);
    }

    @Test
    void aFailingHandlerLeavesNothingAndItsRetryRuns() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "fails-" + key;

        assertThat(post(key, order(reference, -1)).statusCode()).isEqualTo(500);
        assertThat(orders(reference)).isZero();
        assertThat(jdbc.queryForObject("SELECT count(*) FROM idempotency_keys WHERE idempotency_key = ?",
                Integer.class, key)).isZero();

        assertThat(post(key, order(reference + "-fixed", 1)).statusCode()).isEqualTo(201);
        assertThat(orders(reference + "-fixed")).isEqualTo(1);
    }

    @Test
    void twentyConcurrentDuplicatesMakeOneOrder() throws Exception {
        int requests = 20;
        ExecutorService executor = Executors.newFixedThreadPool(requests);
        try {
            for (int round = 0; round < 3; round++) {
                String key = UUID.randomUUID().toString();
                String reference = "storm-" + key;
                CyclicBarrier start = new CyclicBarrier(requests);
                List<Future<HttpResponse<String>>> answers = new ArrayList<>();
                for (int i = 0; i < requests; i++) {
                    answers.add(executor.submit(() -> {
                        start.await();
                        return post(key, order(reference, 5));
                    }));
                }
                String created = null;
                for (Future<HttpResponse<String>> answer : answers) {
                    HttpResponse<String> response = answer.get(60, TimeUnit.SECONDS);
                    assertThat(response.statusCode()).isIn(201, 409);
                    if (response.statusCode() == 201) {
                        if (created == null) {
                            created = response.body();
                        }
                        assertThat(response.body()).isEqualTo(created);
                    } else {
                        assertThat(response.headers().firstValue("Retry-After")).isPresent();
                    }
                }
                assertThat(created).isNotNull();
                assertThat(orders(reference)).as("orders of round %d", round).isEqualTo(1);
            }
        } finally {
            executor.shutdownNow();
        }
    }

    private HttpResponse<String> post(String key, String body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    private static String order(String reference, int quantity) {
        return "{\"reference\":\"" + reference + "\",\"quantity\":" + quantity + "}";
    }

    private int orders(String reference) {
        return jdbc.queryForObject("SELECT count(*) FROM orders WHERE reference = ?", Integer.class, reference);
    }

    @SpringBootApplication
    static class OrderApplication {

        /** The records in MariaDB, in a table made from the shipped script (as the application's migrations would). */
        @Bean
        IdempotencyStore idempotencyStore(DataSource dataSource) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            jdbc.execute("CREATE TABLE orders (id bigint AUTO_INCREMENT PRIMARY KEY,"
                    + " reference varchar(200) NOT NULL, quantity int NOT NULL)");
            return new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
        }

        @Bean
        OrderController orderController(JdbcTemplate jdbc) {
            return new OrderController(jdbc);
        }
    }

    @RestController
    static class OrderController {

        private final JdbcTemplate jdbc;

        OrderController(JdbcTemplate jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/orders")
        @Idempotent
        ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, Object> order) throws InterruptedException {
            jdbc.update("INSERT INTO orders (reference, quantity) VALUES (?, ?)", order.get("reference"),
                    order.get("quantity"));
            if (((Number) order.get("quantity")).intValue() < 0) {
                throw new IllegalArgumentException("a quantity below zero, found after the order was written");
            }
            Thread.sleep(20); // duplicates arrive while the first one runs
            Long id = jdbc.queryForObject("SELECT LAST_INSERT_ID()", Long.class);
            return ResponseEntity.status(201).body(Map.of("id", id, "reference", order.get("reference"),
                    "quantity", order.get("quantity")));
        }
    }
}
