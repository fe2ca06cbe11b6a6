package io.idempotency.jpa;

import io.idempotency.testkit.TestPostgres;
import org.springframework.boot.test.web.server.LocalServerPort;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

/** A test of the JPA application over real HTTP: its requests, and what they left in its database. */
abstract class JpaHttpTest {

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    /** The test class's own database (see {@link JpaContexts#withPurchases()}). */
    abstract TestPostgres.Database database();

    HttpResponse<String> post(String path, String key, String body) throws IOException, InterruptedException {
        return post(path, key, body, Duration.ofMinutes(1));
    }

    /** As {@link #post(String, String, String)}, failing with HttpTimeoutException if no answer came in time. */
    HttpResponse<String> post(String path, String key, String body, Duration timeout)
            throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                        .timeout(timeout)
                        .header("Content-Type", "application/json")
                        .header("Idempotency-Key", key)
                        .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    long purchases(String reference) {
        return database().queryLong("select count(*) from purchases where reference = '" + reference + "'");
    }

    /** The key's record as "STATUS response_status", or null when there is none. */
    String record(String key) {
        return database().queryString("select status || ' ' || coalesce(response_status::text, '-')"
                + " from idempotency_keys where idempotency_key = '" + key + "'");
    }
}
