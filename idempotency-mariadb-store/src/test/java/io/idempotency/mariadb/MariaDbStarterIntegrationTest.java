package io.idempotency.mariadb;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.testkit.Await;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter with the MariaDB store, over real HTTP on real MariaDB, on a pool at REPEATABLE READ: an order is made
 * once, its answer replayed byte for byte, another body under its key refused, a failing handler leaves nothing, and
 * 20 concurrent duplicates make one order, on one instance (where they wait in memory) and on two instances of the
 * application sharing the database (where only the database stands between them).
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
        // read when the application starts, after the database is made
        for (String name : List.of("spring.datasource.url", "spring.datasource.username",
                "spring.datasource.password", "spring.datasource.hikari.maximum-pool-size",
                "spring.datasource.hikari.transaction-isolation", "idempotency.in-flight-wait")) {
            registry.add(name, () -> properties().get(name)); // null: not set
        }
    }

    /** What every instance of the application runs with (no password when the URL or server needs none). */
    private static Map<String, String> properties() {
        Map<String, String> properties = new HashMap<>();
        properties.put("spring.datasource.url", database.url());
        properties.put("spring.datasource.username", database.user());
        if (database.password() != null) {
            properties.put("spring.datasource.password", database.password());
        }
        properties.put("spring.datasource.hikari.maximum-pool-size", "30");
        // InnoDB's default, whatever the server's: the starter's transactions must ask for READ COMMITTED
        properties.put("spring.datasource.hikari.transaction-isolation", "TRANSACTION_REPEATABLE_READ");
        // long enough that duplicates outwait a handler held for 1.5 s on a loaded machine
        properties.put("idempotency.in-flight-wait", "10s");
        return properties;
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

    /**
     * Duplicates on two instances: the first request runs on one instance and is held in its handler (its claim
     * uncommitted) while the others are sent, half to each instance. The other instance knows nothing of the key in
     * memory, so its requests claim in MariaDB and wait there for the first one's outcome: each gets the first
     * answer's replay (or a 409 if its wait ran out), and the order is made once.
     */
    @Test
    void duplicatesOnTwoInstancesWhileTheFirstRunsMakeOneOrder() throws Exception {
        Map<String, Object> twoPools = new HashMap<>(properties());
        twoPools.put("server.port", "0");
        try (ConfigurableApplicationContext other = new SpringApplicationBuilder(OrderApplication.class)
                .properties(twoPools).run()) {
            int otherPort = ((WebServerApplicationContext) other).getWebServer().getPort();
            String key = UUID.randomUUID().toString();
            String reference = "two-instances-" + key;
            String body = "{\"reference\":\"" + reference + "\",\"quantity\":2,\"holdMillis\":1500}";
            ExecutorService executor = Executors.newFixedThreadPool(20);
            try {
                Future<HttpResponse<String>> first = executor.submit(() -> post(port, key, body));
                Await.until("the first request's handler started", Duration.ofSeconds(20),
                        () -> OrderController.RUNNING.contains(key));
                List<Future<HttpResponse<String>>> onThis = new ArrayList<>();
                List<Future<HttpResponse<String>>> onOther = new ArrayList<>();
                for (int i = 0; i < 9; i++) {
                    onThis.add(executor.submit(() -> post(port, key, body)));
                    onOther.add(executor.submit(() -> post(otherPort, key, body)));
                }
                onOther.add(executor.submit(() -> post(otherPort, key, body)));

                HttpResponse<String> created = first.get(60, TimeUnit.SECONDS);
                assertThat(created.statusCode()).as(created.body()).isEqualTo(201);
                assertThat(created.headers().firstValue("Idempotent-Replayed")).isEmpty();
                int replayedByTheOther = 0;
                for (List<Future<HttpResponse<String>>> instance : List.of(onThis, onOther)) {
                    for (Future<HttpResponse<String>> answer : instance) {
                        HttpResponse<String> response = answer.get(60, TimeUnit.SECONDS);
                        assertThat(response.statusCode()).as(response.body()).isIn(201, 409);
                        if (response.statusCode() == 201) {
                            assertThat(response.headers().firstValue("Idempotent-Replayed")).hasValue("true");
                            assertThat(response.body()).isEqualTo(created.body());
                            replayedByTheOther += instance == onOther ? 1 : 0;
                        } else {
                            assertThat(response.headers().firstValue("Retry-After")).isPresent();
                        }
                    }
                }
                assertThat(OrderController.executions(key)).as("runs of the handler").isEqualTo(1);
                assertThat(orders(reference)).isEqualTo(1);
                // the other instance knows nothing of the key in memory: its replays were read from MariaDB, where its
                // duplicates found the claim (uncommitted while the first request ran, which the store's contract
                // tests show a claim waits for) or the answer it committed
                assertThat(replayedByTheOther).as("replays the other instance read from the database").isPositive();
            } finally {
                executor.shutdownNow();
            }
        }
    }

    private HttpResponse<String> post(String key, String body) throws Exception {
        return post(port, key, body);
    }

    private static HttpResponse<String> post(int port, String key, String body) throws Exception {
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

        /**
         * The records in MariaDB, in a table made from the shipped script (as the application's migrations would), by
         * the first instance to start.
         */
        @Bean
        IdempotencyStore idempotencyStore(DataSource dataSource) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            if (jdbc.queryForObject("SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE()"
                    + " AND table_name = 'idempotency_keys'", Integer.class) == 0) {
                jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
                jdbc.execute("CREATE TABLE orders (id bigint AUTO_INCREMENT PRIMARY KEY,"
                        + " reference varchar(200) NOT NULL, quantity int NOT NULL)");
            }
            return new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
        }

        @Bean
        OrderController orderController(JdbcTemplate jdbc) {
            return new OrderController(jdbc);
        }
    }

    @RestController
    static class OrderController {

        /** Keys whose handler is running, on any instance. */
        static final Set<String> RUNNING = ConcurrentHashMap.newKeySet();
        private static final Map<String, AtomicInteger> EXECUTIONS = new ConcurrentHashMap<>();

        private final JdbcTemplate jdbc;

        static int executions(String key) {
            AtomicInteger runs = EXECUTIONS.get(key);
            return runs == null ? 0 : runs.get();
        }

        OrderController(JdbcTemplate jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/orders")
        @Idempotent
        ResponseEntity<Map<String, Object>> create(@RequestHeader("Idempotency-Key") String key,
                                                   @RequestBody Map<String, Object> order) throws InterruptedException {
            EXECUTIONS.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
            jdbc.update("INSERT INTO orders (reference, quantity) VALUES (?, ?)", order.get("reference"),
                    order.get("quantity"));
            if (((Number) order.get("quantity")).intValue() < 0) {
                throw new IllegalArgumentException("a quantity below zero, found after the order was written");
            }
            Thread.sleep(20); // duplicates arrive while the first one runs
            if (order.get("holdMillis") instanceof Number hold) {
                RUNNING.add(key);
                try {
                    Thread.sleep(hold.longValue()); // its claim uncommitted, while the test sends the duplicates
                } finally {
                    RUNNING.remove(key);
                }
            }
            Long id = jdbc.queryForObject("SELECT LAST_INSERT_ID()", Long.class);
            return ResponseEntity.status(201).body(Map.of("id", id, "reference", order.get("reference"),
                    "quantity", order.get("quantity")));
        }
    }
}
