package io.idempotency.mariadb;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyStore;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
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
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The MariaDB store's table comes from the application's own migrations and is checked at startup (a missing one stops
 * it: {@link MariaDbTableCheckTest}); one dropped while the application runs answers an idempotent request 503
 * {@code idempotency-store-unavailable} without running its handler, so a client retries it once the table is back,
 * and the warning logged for it gives MariaDB's reason.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
@SpringBootTest(classes = MariaDbWithoutTableIntegrationTest.OrderApplication.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@ExtendWith(OutputCaptureExtension.class)
class MariaDbWithoutTableIntegrationTest {

    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static TestMariaDb.Database database;

    @BeforeAll
    static void newDatabase() {
        database = TestMariaDb.newDatabase();
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        registry.add("spring.datasource.url", () -> database.url());
        registry.add("spring.datasource.username", () -> database.user());
        registry.add("spring.datasource.password", () -> database.password());
    }

    @LocalServerPort
    int port;

    @Autowired
    JdbcTemplate jdbc;

    @Test
    void anIdempotentRequestIsAnswered503AndItsHandlerDoesNotRun(CapturedOutput output) throws Exception {
        String reference = "no-table-" + UUID.randomUUID();
        jdbc.execute("DROP TABLE idempotency_keys");

        HttpResponse<String> response = HTTP.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                        + "/orders")).header("Content-Type", "application/json")
                .header("Idempotency-Key", UUID.randomUUID().toString())
                .POST(HttpRequest.BodyPublishers.ofString("{\"reference\":\"" + reference + "\"}")).build(),
                HttpResponse.BodyHandlers.ofString());

        assertThat(response.statusCode()).isEqualTo(503);
        assertThat(response.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(response.body()).contains("idempotency-store-unavailable");
        assertThat(response.headers().firstValue("Retry-After")).isPresent();
        assertThat(jdbc.queryForObject("SELECT count(*) FROM orders WHERE reference = ?", Integer.class, reference))
                .isZero();
        // docs/mariadb.md: the library's migration, PostgreSQL's, creates nothing here, and said so at startup
        assertThat(output.getOut().lines().filter(line -> line.contains("The idempotency table is not created")))
                .singleElement().asString().contains("INFO", "database other than PostgreSQL");
        // docs/mariadb.md: what an operator sees, MariaDB's "Table '…' doesn't exist" with the warning
        assertThat(output.getOut().lines().filter(line -> line.contains("could not be claimed; answering 503")))
                .singleElement().asString().contains("WARN", "POST /orders");
        assertThat(output.getOut().substring(output.getOut().indexOf("could not be claimed; answering 503")))
                .contains("Table", "idempotency_keys' doesn't exist");
    }

    @SpringBootApplication
    static class OrderApplication {

        /** The store, on the table the application's migrations made (dropped by the test). */
        @Bean
        IdempotencyStore idempotencyStore(DataSource dataSource) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            new JdbcTemplate(dataSource).execute("CREATE TABLE orders (id bigint AUTO_INCREMENT PRIMARY KEY,"
                    + " reference varchar(200) NOT NULL)");
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
        ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, Object> order) {
            jdbc.update("INSERT INTO orders (reference) VALUES (?)", order.get("reference"));
            return ResponseEntity.status(201).body(Map.of("reference", order.get("reference")));
        }
    }
}
