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
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Two handlers of one route told apart by a request parameter alone ({@code params = "op=…"}), under the default
 * scope they share: the parameter is part of the fingerprint, so a key sent to both is one request and another, never
 * one handler's answer replayed for the other.
 */
@SpringBootTest(classes = ParameterDispatchedHandlersIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class ParameterDispatchedHandlersIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger CAPTURES = new AtomicInteger();
    private static final AtomicInteger REFUNDS = new AtomicInteger();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(OperationsController.class)
    static class App {
    }

    @RestController
    static class OperationsController {
        @PostMapping(path = "/operations", params = "op=capture")
        @Idempotent
        public String capture() {
            return "capture " + CAPTURES.incrementAndGet();
        }

        @PostMapping(path = "/operations", params = "op=refund")
        @Idempotent
        public String refund() {
            return "refund " + REFUNDS.incrementAndGet();
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aKeyOfOneOperationSentToTheOtherIsAMismatchNotAReplay() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<String> capture = post("capture", key);
        HttpResponse<String> retry = post("capture", key);
        HttpResponse<String> refund = post("refund", key);

        assertThat(capture.statusCode()).as(capture.body()).isEqualTo(200);
        assertThat(retry.body()).isEqualTo(capture.body());
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(refund.statusCode()).as(refund.body()).isEqualTo(422);
        assertThat(CAPTURES).hasValue(1);
        assertThat(REFUNDS).hasValue(0);
        assertThat(post("refund", UUID.randomUUID().toString()).body()).isEqualTo("refund 1");
    }

    private HttpResponse<String> post(String operation, String key) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/operations?op=" + operation))
                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("{\"amount\":5}")).build();
        return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
    }
}
