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
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring MVC's API versioning by a path segment ({@code spring.mvc.apiversion.use.path-segment}): the handlers of
 * {@code /api/{version}/payments} share its default scope, and the version, read from the path as Spring MVC reads it,
 * tells a retry of one version from a request of another under the same key.
 */
@SpringBootTest(classes = ApiVersionsInPathIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.mvc.apiversion.use.path-segment=1", "spring.mvc.apiversion.supported=1.0,2.0"})
@Tag("container")
class ApiVersionsInPathIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final Map<String, AtomicInteger> RUNS = new ConcurrentHashMap<>();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(PaymentsController.class)
    static class App {
    }

    @RestController
    public static class PaymentsController {
        @PostMapping(path = "/api/{version}/payments", version = "1.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String payV1(@RequestBody String payment) {
            return "v1 payment " + runs(payment);
        }

        @PostMapping(path = "/api/{version}/payments", version = "2.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String payV2(@RequestBody String payment) {
            return "v2 payment " + runs(payment);
        }

        private static int runs(String payment) {
            return RUNS.computeIfAbsent(payment, p -> new AtomicInteger()).incrementAndGet();
        }
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aKeyRetriedWithAnotherVersionInThePathIsAnotherRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String payment = "payment-" + key;

        HttpResponse<String> first = post("/api/2.0/payments", key, payment);
        HttpResponse<String> replay = post("/api/2.0/payments", key, payment);
        HttpResponse<String> otherVersion = post("/api/1.0/payments", key, payment);
        HttpResponse<String> unsupported = post("/api/3.0/payments", key, payment);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
        assertThat(first.body()).isEqualTo("v2 payment 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(422);
        assertThat(otherVersion.body()).contains("idempotency-key-mismatch");
        assertThat(unsupported.statusCode()).isEqualTo(400);
        assertThat(RUNS.get(payment)).hasValue(1);
    }

    private HttpResponse<String> post(String path, String key, String body) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "text/plain").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }
}
