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
 * Spring MVC's API versioning (a version header here, Spring Boot's {@code spring.mvc.apiversion.*}): two handlers of
 * one route, chosen by the version the request names. A key is one request, so a retry under it with another version
 * is another request, refused as a mismatch: neither run twice, nor answered with the other version's answer.
 */
@SpringBootTest(classes = ApiVersionsIntegrationTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.mvc.apiversion.use.header=API-Version", "spring.mvc.apiversion.default=1.0",
                "spring.mvc.apiversion.supported=1.0,2.0"})
@Tag("container")
class ApiVersionsIntegrationTest {

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
        @PostMapping(path = "/payments", version = "1.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String payV1(@RequestBody String payment) {
            return "v1 payment " + runs(payment) + " of " + payment;
        }

        @PostMapping(path = "/payments", version = "2.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String payV2(@RequestBody String payment) {
            return "{\"version\":2,\"run\":" + runs(payment) + "}";
        }

        private static int runs(String payment) {
            return RUNS.computeIfAbsent(payment, p -> new AtomicInteger()).incrementAndGet();
        }
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aKeyRetriedWithAnotherVersionIsAnotherRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String payment = "payment-" + key;

        HttpResponse<String> first = post(key, "1.0", payment);
        HttpResponse<String> replay = post(key, "1.0", payment);
        HttpResponse<String> otherVersion = post(key, "2.0", payment);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).startsWith("v1 payment 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(422);
        assertThat(otherVersion.body()).contains("idempotency-key-mismatch");
        assertThat(RUNS.get(payment)).as("runs of either version").hasValue(1);
    }

    @Test
    void aRequestThatNamesNoVersionIsFingerprintedAsItWasSent() throws Exception {
        // the default version handles it; a retry that names none either is the same request, whatever the
        // application's default is by then, and one that names the default is another
        String key = UUID.randomUUID().toString();
        String payment = "unversioned-" + key;

        HttpResponse<String> first = post(key, null, payment);
        HttpResponse<String> replay = post(key, null, payment);
        HttpResponse<String> named = post(key, "1.0", payment);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).startsWith("v1 payment 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(named.statusCode()).as(named.body()).isEqualTo(422);
        assertThat(RUNS.get(payment)).hasValue(1);
    }

    private HttpResponse<String> post(String key, String version, String body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/payments"))
                .header("Content-Type", "text/plain").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (version != null) {
            request.header("API-Version", version);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
}
