package io.idempotency.liquibase;

import io.idempotency.liquibase.app.LiquibaseTestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The schema managed by the application's Liquibase ({@code idempotency.jdbc.initialize-schema=false}), as the README
 * says: a changelog applies the script shipped in the jar with {@code sqlFile}, the startup check accepts the table,
 * and an {@code @Idempotent} endpoint runs once and replays, over real HTTP on real PostgreSQL.
 */
@SpringBootTest(classes = LiquibaseTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.liquibase.change-log=classpath:db/self-managed.xml",
                "idempotency.jdbc.initialize-schema=false"})
class LiquibaseManagedSchemaIntegrationTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void theChangelogMadeTheTableFromTheScriptAndTheLibraryMigratedNothing() {
        assertThat(DATABASE.queryLong("select count(*) from databasechangelog where id = 'idempotency-keys'"))
                .isEqualTo(1);
        // the script's every statement ran: the table, and both of its indexes
        assertThat(DATABASE.queryLong("select count(*) from pg_indexes where schemaname = current_schema()"
                + " and tablename = 'idempotency_keys'")).isEqualTo(3);
        assertThat(DATABASE.queryString("select to_regclass('idempotency_schema_history')")).isNull();
    }

    @Test
    void anOrderIsMadeOnceAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"reference\":\"order-" + key + "\"}";

        HttpResponse<String> first = post(key, body);
        HttpResponse<String> second = post(key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(DATABASE.queryLong("select count(*) from orders where reference = 'order-" + key + "'"))
                .isEqualTo(1);
        assertThat(DATABASE.queryString("select status || ' ' || response_status from idempotency_keys"
                + " where idempotency_key = '" + key + "'")).isEqualTo("SUCCEEDED 201");
    }

    private HttpResponse<String> post(String key, String body) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                        .header("Content-Type", "application/json")
                        .header("Idempotency-Key", key)
                        .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8)).build(),
                HttpResponse.BodyHandlers.ofString());
    }
}
