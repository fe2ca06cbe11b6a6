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
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An endpoint made idempotent for GET ({@code @Idempotent(methods = "GET")}): Spring MVC serves HEAD requests with
 * the same handler, so a HEAD must not run it without idempotency.
 */
@SpringBootTest(classes = HeadRequestsIntegrationTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class HeadRequestsIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final Map<String, AtomicInteger> RUNS = new ConcurrentHashMap<>();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(ConfirmationsController.class)
    static class App {
    }

    /** Confirms by a link: a GET with an effect, made idempotent for GET. */
    @RestController
    public static class ConfirmationsController {
        @GetMapping("/confirmations")
        @Idempotent(methods = "GET")
        public String confirm(@RequestParam String token) {
            return "confirmation " + RUNS.computeIfAbsent(token, t -> new AtomicInteger()).incrementAndGet()
                    + " of " + token;
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aHeadRequestNeverRunsTheHandlerWithoutIdempotency() throws Exception {
        String token = UUID.randomUUID().toString();
        String key = UUID.randomUUID().toString();

        String withoutKey = raw("HEAD", token, null);
        String first = raw("HEAD", token, key);
        String again = raw("HEAD", token, key);

        assertThat(withoutKey).as("a key is required, as for GET").startsWith("HTTP/1.1 400 ");
        assertThat(first).startsWith("HTTP/1.1 200 ").doesNotContain("Idempotent-Replayed");
        assertThat(again).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        String length = "Content-Length: " + ("confirmation 1 of " + token).length() + "\r\n";
        assertThat(first).as("the length the GET's answer has").contains(length).endsWith("\r\n\r\n");
        assertThat(again).contains(length).endsWith("\r\n\r\n");
        assertThat(RUNS.get(token)).as("the handler ran once").hasValue(1);
    }

    /** A HEAD is its own request, under a scope of its own (method and route), as every method is. */
    @Test
    void aHeadAndAGetUnderOneKeyDoNotTakeEachOthersAnswer() throws Exception {
        String token = UUID.randomUUID().toString();
        String key = UUID.randomUUID().toString();

        String head = raw("HEAD", token, key);
        String get = raw("GET", token, key);

        String body = "confirmation 2 of " + token;
        assertThat(get).startsWith("HTTP/1.1 200 ").doesNotContain("Idempotent-Replayed").endsWith("\r\n\r\n" + body);
        assertThat(head).startsWith("HTTP/1.1 200 ").endsWith("\r\n\r\n");
        assertThat(RUNS.get(token)).hasValue(2);
    }

    private String raw(String method, String token, String key) throws IOException {
        String request = method + " /confirmations?token=" + token + " HTTP/1.1\r\nHost: localhost\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n";
        return OrdersApplicationTest.raw(port, request);
    }
}
