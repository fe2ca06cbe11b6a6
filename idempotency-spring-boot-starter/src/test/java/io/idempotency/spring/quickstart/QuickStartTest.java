package io.idempotency.spring.quickstart;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The README's quick start, followed to the letter: its controller method ({@link QuickStartApplication}) in an
 * application with nothing but the starter, answering its walk-through's requests as the README says, over real HTTP
 * on real PostgreSQL.
 */
@SpringBootTest(classes = QuickStartApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class QuickStartTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString("create table payments (id bigserial primary key, order_id text not null,"
                + " amount numeric(19, 2) not null, currency text not null)");
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void theWalkThroughAnswersAsTheReadmeSays() throws Exception {
        String key = "6f1c1f0e-3b4e-4a8e-9a57-1d2b7d1c9a01";

        HttpResponse<String> created = post(key, "{\"orderId\":\"o-1\",\"amount\":\"12.50\",\"currency\":\"EUR\"}");
        assertThat(created.statusCode()).isEqualTo(201);
        long id = DATABASE.queryLong("select id from payments where order_id = 'o-1'");
        assertThat(created.headers().firstValue("Location")).hasValue("/payments/" + id);
        assertThat(created.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(created.body()).isEqualTo(
                "{\"id\":" + id + ",\"orderId\":\"o-1\",\"amount\":12.50,\"currency\":\"EUR\"}");

        HttpResponse<String> replayed = post(key, "{ \"currency\":\"EUR\", \"amount\":\"12.50\", \"orderId\":\"o-1\" }");
        assertThat(replayed.statusCode()).isEqualTo(201);
        assertThat(replayed.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replayed.headers().firstValue("Location")).hasValue("/payments/" + id);
        assertThat(replayed.body()).isEqualTo(created.body());
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-1'")).isEqualTo(1);
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo(1);

        HttpResponse<String> mismatch = post(key, "{\"orderId\":\"o-1\",\"amount\":\"99.00\",\"currency\":\"EUR\"}");
        assertThat(mismatch.statusCode()).isEqualTo(422);
        assertProblem(mismatch, "idempotency-key-mismatch");

        HttpResponse<String> missing = send(request("{\"orderId\":\"o-2\",\"amount\":\"1.00\",\"currency\":\"EUR\"}")
                .build());
        assertThat(missing.statusCode()).isEqualTo(400);
        assertProblem(missing, "idempotency-key-missing");

        HttpResponse<String> malformed = post("k".repeat(300),
                "{\"orderId\":\"o-2\",\"amount\":\"1.00\",\"currency\":\"EUR\"}");
        assertThat(malformed.statusCode()).isEqualTo(400);
        assertProblem(malformed, "idempotency-key-malformed");
        assertThat(DATABASE.queryLong("select count(*) from payments where order_id = 'o-2'")).isZero();
    }

    private static void assertProblem(HttpResponse<String> response, String type) {
        assertThat(response.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(response.body()).contains("\"type\":\"https://idempotency-starter.github.io/problems/" + type + "\"");
    }

    private HttpRequest.Builder request(String body) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/payments"))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
    }

    private HttpResponse<String> post(String key, String body) throws IOException, InterruptedException {
        return send(request(body).header("Idempotency-Key", key).build());
    }

    private HttpResponse<String> send(HttpRequest request) throws IOException, InterruptedException {
        return http.send(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    }
}
