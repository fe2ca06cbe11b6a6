package io.idempotency.jpa;

import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.context.TestPropertySource;

import javax.sql.DataSource;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A commit that fails is checked against the record, read back after it. With open-in-view on, the request's
 * EntityManager keeps its connection until the request ends, and every other connection of the pool is taken (here by
 * the test, as by the other requests of a busy server): the read must not wait for a second connection, until the
 * pool's {@code connection-timeout}, and then take a commit that happened for one that failed.
 */
@SpringBootTest(classes = JpaTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@TestPropertySource(properties = {"spring.datasource.hikari.maximum-pool-size=2",
        "spring.datasource.hikari.connection-timeout=10000"})
class BusyPoolCommitFailureIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    /** Far below the pool's connection-timeout: a request answered later waited for a connection. */
    private static final Duration PROMPTLY = Duration.ofSeconds(5);

    @Autowired
    DataSource dataSource;

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Test
    void aCommitRefusedAtTheCommitIsAnsweredWithoutASecondConnection() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "busy-deferred-" + key;

        HttpResponse<String> refused = postWithTheOtherConnectionTaken(key, reference, "fails-at-commit");

        assertThat(refused.statusCode()).isEqualTo(500);
        assertThat(refused.body()).contains("idempotency-commit-failed", "none were kept");
        assertThat(purchases(reference)).isZero();
        assertThat(record(key)).isNull();
    }

    @Test
    void aCommitFollowedByAFailingPostCommitListenerIsAnsweredWithItsAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "busy-post-commit-" + key;

        HttpResponse<String> kept = postWithTheOtherConnectionTaken(key, reference, "fails-after-commit");

        assertThat(kept.statusCode()).as("the purchase was committed: " + kept.body()).isEqualTo(201);
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isEqualTo("SUCCEEDED 201");
    }

    private HttpResponse<String> postWithTheOtherConnectionTaken(String key, String reference, String note)
            throws Exception {
        try (Connection taken = dataSource.getConnection()) {
            long started = System.nanoTime();
            HttpResponse<String> answer = post("/commit-time/purchases", key,
                    "{\"reference\":\"" + reference + "\",\"note\":\"" + note + "\"}");
            assertThat(Duration.ofNanos(System.nanoTime() - started)).as("answered without waiting for the pool")
                    .isLessThan(PROMPTLY);
            return answer;
        }
    }
}
