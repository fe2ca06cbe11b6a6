package io.idempotency.spring.roundtrips;

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
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The library adds its own statements to a request and nothing else, as performance.md counts them: a first execution
 * costs a plain transactional request's round trips plus two (the claim, and the update that stores the answer), and
 * a replay of a request the instance remembers completing, with no answers kept in memory, costs one (the read of its
 * record; the handler does not run). A round trip more per request — the transaction's isolation asked of the
 * database each time, a claim and its rollback instead of the read — shows here, where no benchmark is run.
 *
 * <p>The counter counts the server's ReadyForQuery messages, not turns: the implicit {@code BEGIN} that the driver sends
 * ahead of a transaction's first statement, without waiting, gets one of its own, so each transaction counts one more
 * than its round trips (the benchmark harness counts turns). Both requests compared open one transaction, so their
 * difference is what the library adds; the replay's read opens none.
 */
@SpringBootTest(classes = RoundTripsApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "idempotency.replay-cache.max-entries=0")
class RoundTripsIntegrationTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString("create table items (id bigserial primary key, note text not null)");
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
        // in the clear, so that the server's messages can be followed
        registry.add("spring.datasource.url", () -> DATABASE.url() + "&sslmode=disable&gssEncMode=disable"
                + "&socketFactory=" + RoundTripCounter.class.getName());
    }

    @LocalServerPort
    int port;

    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aFirstExecutionAddsTheClaimAndTheStoredAnswerAndAReplayIsOneRoundTrip() throws Exception {
        for (int i = 0; i < 3; i++) { // the first requests of a context load and prepare what later ones reuse
            assertThat(post("/plain-items", null).statusCode()).isEqualTo(201);
            String key = UUID.randomUUID().toString();
            assertThat(post("/items", key).statusCode()).isEqualTo(201);
            assertThat(post("/items", key).headers().firstValue("Idempotent-Replayed")).hasValue("true");
        }
        for (int round = 1; round <= 5; round++) { // a statement the driver prepares on the server midway costs none
            RoundTripCounter.takeCount();
            assertThat(post("/plain-items", null).statusCode()).isEqualTo(201);
            int plain = RoundTripCounter.takeCount();
            String key = UUID.randomUUID().toString();
            assertThat(post("/items", key).statusCode()).isEqualTo(201);
            int first = RoundTripCounter.takeCount();
            assertThat(post("/items", key).headers().firstValue("Idempotent-Replayed")).hasValue("true");
            int replay = RoundTripCounter.takeCount();

            assertThat(first - plain).as("what the library adds to a first execution (%d messages, a plain"
                    + " request %d), round %d", first, plain, round).isEqualTo(2);
            assertThat(replay).as("a replay answered from the database, round %d", round).isEqualTo(1);
        }
    }

    private HttpResponse<String> post(String path, String key) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"n-" + (key == null ? UUID.randomUUID() : key)
                        + "\"}"));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
}
