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
import org.springframework.web.bind.annotation.CrossOrigin;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A browser calling an idempotent endpoint from another origin: the preflight admits the key header, and the first
 * answer, the replay and the library's errors all carry the CORS headers, so that the page can read them (the
 * replay marker included).
 */
@SpringBootTest(classes = CrossOriginIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class CrossOriginIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final String ORIGIN = "https://shop.example";
    private static final AtomicInteger RUNS = new AtomicInteger();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(CheckoutController.class)
    static class App {
    }

    @RestController
    @CrossOrigin(origins = ORIGIN, allowedHeaders = "Idempotency-Key",
            exposedHeaders = {"Idempotent-Replayed", "Retry-After"})
    public static class CheckoutController {
        @PostMapping("/checkouts")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String checkout(@RequestBody String cart) {
            return "checkout " + RUNS.incrementAndGet() + " of " + cart;
        }
    }

    @LocalServerPort
    int port;

    @Test
    void thePreflightAdmitsTheKeyAndEveryAnswerCarriesTheCorsHeaders() throws Exception {
        String key = UUID.randomUUID().toString();

        String preflight = raw("OPTIONS /checkouts HTTP/1.1\r\nHost: localhost\r\nOrigin: " + ORIGIN
                + "\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: idempotency-key"
                + "\r\nConnection: close\r\n\r\n");
        String first = post(key);
        String replay = post(key);
        String keyless = post(null);

        assertThat(preflight).startsWith("HTTP/1.1 200 ")
                .containsIgnoringCase("Access-Control-Allow-Headers: idempotency-key");
        assertThat(first).startsWith("HTTP/1.1 201 ").doesNotContain("Idempotent-Replayed: true");
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(keyless).startsWith("HTTP/1.1 400 ").contains("idempotency-key-missing");
        for (String answer : new String[] {first, replay, keyless}) {
            assertThat(answer).contains("Access-Control-Allow-Origin: " + ORIGIN)
                    .contains("Access-Control-Expose-Headers: Idempotent-Replayed, Retry-After");
        }
        assertThat(RUNS).hasValue(1);
    }

    private String post(String key) throws IOException {
        String body = "cart-1";
        return raw("POST /checkouts HTTP/1.1\r\nHost: localhost\r\nOrigin: " + ORIGIN
                + "\r\nContent-Type: text/plain\r\nContent-Length: " + body.length() + "\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n" + body);
    }

    private String raw(String request) throws IOException {
        return OrdersApplicationTest.raw(port, request);
    }
}
